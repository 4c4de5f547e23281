/* Micro-benchmark of one MUL_MAT node through le_graph_compute: Q8_0 or
 * F16 weights [K, M] (random codes, scales of 1/256) against N f32 columns,
 * the fastest and median of `reps` computes after two warm-ups.
 *
 *   make -C kernels cpu && cc -O2 -Ikernels/include bench/mul_mat.c \
 *     -Lbuild -lllm_edge -Wl,-rpath,$PWD/build -o /tmp/mul_mat
 *   /tmp/mul_mat [q8_0|f16] [K=2048] [M=2048] [N=512] [threads=1] [reps=10]
 *
 * For an A/B, run the binary with LD_LIBRARY_PATH pointing at another
 * build's directory (the run path is the default's), alternately. The
 * checksum line lets two builds be compared for equal outputs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llm_edge.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  const int f16 = argc > 1 && !strcmp(argv[1], "f16");
  const int64_t K = argc > 2 ? atol(argv[2]) : 2048, M = argc > 3 ? atol(argv[3]) : 2048;
  const int64_t N = argc > 4 ? atol(argv[4]) : 512;
  const int threads = argc > 5 ? atoi(argv[5]) : 1, reps = argc > 6 ? atoi(argv[6]) : 10;
  if (K % 32 || K <= 0 || M <= 0 || N <= 0 || threads < 1 || reps < 1) {
    fprintf(stderr, "want K a multiple of 32, positive M, N, threads and reps\n");
    return 2;
  }
  const size_t row = f16 ? (size_t)K * 2 : (size_t)K / 32 * 34;
  uint8_t *w = le_alloc(row * (size_t)M, 64);
  float *x = le_alloc((size_t)(K * N) * 4, 64), *d = le_alloc((size_t)(M * N) * 4, 64);
  double *t = calloc((size_t)reps, sizeof(double));
  if (!w || !x || !d || !t) return 1;
  srand(1);
  for (size_t i = 0; i < row * (size_t)M; i++) {
    if (f16) { /* halves of magnitude below 1 */
      w[i] = i % 2 ? (uint8_t)(0x30 | (rand() & 7)) : (uint8_t)rand();
    } else { /* Q8_0 blocks: a scale of 1/256, then 32 codes in [-127, 127] */
      const int at = (int)(i % 34);
      w[i] = at == 0 ? 0 : at == 1 ? 0x1c : (uint8_t)(rand() % 255 - 127);
    }
  }
  for (int64_t i = 0; i < K * N; i++) x[i] = (float)rand() / RAND_MAX - 0.5f;
  le_node n;
  memset(&n, 0, sizeof n);
  n.op = LE_OP_MUL_MAT, n.n_src = 2;
  n.src[0] = (le_tensor){.type = f16 ? 1 : 8,
                         .ne = {K, M, 1, 1},
                         .nb = {f16 ? 2 : 34, (int64_t)row, (int64_t)row * M, (int64_t)row * M}};
  n.src[0].data = (uint64_t)(uintptr_t)w;
  n.src[1] = (le_tensor){.type = 0, .ne = {K, N, 1, 1}, .nb = {4, K * 4, K * N * 4, K * N * 4}};
  n.src[1].data = (uint64_t)(uintptr_t)x;
  n.dst = (le_tensor){.type = 0, .ne = {M, N, 1, 1}, .nb = {4, M * 4, M * N * 4, M * N * 4}};
  n.dst.data = (uint64_t)(uintptr_t)d;
  le_ctx *ctx = le_ctx_new(threads);
  for (int r = -2; r < reps; r++) {
    const double t0 = now();
    if (le_graph_compute(ctx, &n, 1)) {
      fprintf(stderr, "compute failed: %s\n", le_ctx_error(ctx));
      return 1;
    }
    if (r >= 0) t[r] = now() - t0;
  }
  qsort(t, (size_t)reps, sizeof(double), cmp);
  double sum = 0;
  for (int64_t i = 0; i < M * N; i += 997) sum += d[i];
  printf("%s K %lld M %lld N %lld threads %d: fastest %.3f ms, median %.3f ms, %.1f GFLOP/s; "
         "checksum %.9g\n",
         f16 ? "f16" : "q8_0", (long long)K, (long long)M, (long long)N, threads, t[0] * 1e3,
         t[reps / 2] * 1e3, 2.0 * (double)K * (double)M * (double)N / t[0] / 1e9, sum);
  le_ctx_free(ctx);
  return 0;
}
