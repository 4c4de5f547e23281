/* Micro-benchmark of the AVX2 F16 panel (kernels/src/sgemm_avx2.c,
 * le_sgemm8_panel), the N >= 2 mul_mat of a decode step of several
 * sequences, on the 125M random llama's weight shapes (K x M: 768 x 768 q
 * and o, 768 x 256 k and v, 768 x 2048 gate and up, 2048 x 768 down).
 *
 *   cc -O2 -std=gnu11 -ffp-contract=off -Ikernels/include -Ikernels/src \
 *     bench/panel.c kernels/src/sgemm_avx2.c -lpthread -o /tmp/panel
 *   /tmp/panel [N...]        (default 2 4 8 16)
 *
 * For an A/B, build a second binary from the other sgemm_avx2.c (e.g.
 * `git show main:kernels/src/sgemm_avx2.c > /tmp/old.c`, same -I flags) and
 * run both alternately. Two figures per N:
 * - hot: one 48-row block (mul_mat's panel unit) already in L2, one thread:
 *   the tiles' arithmetic rate (Zen 3 FMA peak ~100 GFLOP/s at 3.15 GHz);
 * - stream: one layer's weights from memory (12 layers rotate, 150 MB), two
 *   threads taking alternate 48-row blocks with a barrier after each matrix,
 *   as mul_mat does; compare with N = 1 (the memory bound).
 * Each figure is the fastest of many short trials, so a host shared with
 * other work still gives usable relative numbers (the trials another
 * process interrupts are dropped). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "le_internal.h"

#define ROWS 48 /* mul_mat.c PANEL_ROWS */
#define LAYERS 12
static const int64_t SHAPES[7][2] = {{768, 768}, {768, 256}, {768, 256},  {768, 768},
                                     {768, 2048}, {768, 2048}, {2048, 768}};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint16_t *w;
static float *y, *s;
static size_t layer; /* weights per layer */
static int n_cols, reps;
static double best;
static pthread_barrier_t bar;

static void *stream(void *arg) {
  const long id = (long)arg;
  for (int r = 0; r < reps; r++) {
    size_t off = (size_t)(r % LAYERS) * layer;
    pthread_barrier_wait(&bar);
    const double t0 = now();
    for (int i = 0; i < 7; i++) {
      const int64_t K = SHAPES[i][0], M = SHAPES[i][1];
      for (int64_t r0 = id * ROWS; r0 < M; r0 += 2 * ROWS)
        le_sgemm8_panel(1, K, w + off + r0 * K, (size_t)K * 2, M - r0 < ROWS ? M - r0 : ROWS, y,
                        (size_t)K, n_cols, s + r0, (size_t)M);
      off += (size_t)(K * M);
      pthread_barrier_wait(&bar);
    }
    const double t = now() - t0;
    if (id == 0 && t < best) best = t;
  }
  return NULL;
}

int main(int argc, char **argv) {
  static const int defaults[] = {2, 4, 8, 16};
  for (int i = 0; i < 7; i++) layer += (size_t)(SHAPES[i][0] * SHAPES[i][1]);
  w = aligned_alloc(64, layer * LAYERS * 2);
  y = aligned_alloc(64, 16 * 2048 * 4);
  s = aligned_alloc(64, 16 * 2048 * 4);
  if (!w || !y || !s) return 1;
  srand(1);
  for (size_t i = 0; i < layer * LAYERS; i++) w[i] = 0x3c00 ^ (uint16_t)(rand() & 0x3ff);
  for (int i = 0; i < 16 * 2048; i++) y[i] = (float)(rand() % 1000) / 1000.0f;
  pthread_barrier_init(&bar, NULL, 2);
  const int count = argc > 1 ? argc - 1 : 4;
  for (int a = 0; a < count; a++) {
    n_cols = argc > 1 ? atoi(argv[a + 1]) : defaults[a];
    if (n_cols < 1 || n_cols > 16) return 2;
    double hot = 1e9;
    for (int r = 0; r < 3000; r++) {
      const double t0 = now();
      le_sgemm8_panel(1, 768, w, 768 * 2, ROWS, y, 768, n_cols, s, ROWS);
      const double t = now() - t0;
      if (t < hot) hot = t;
    }
    best = 1e9, reps = 400;
    pthread_t th;
    pthread_create(&th, NULL, stream, (void *)1L);
    stream(NULL);
    pthread_join(th, NULL);
    printf("N=%2d  hot %5.1f GFLOP/s   stream %.3f ms/layer %5.2f GB/s %5.1f GFLOP/s\n", n_cols,
           2.0 * ROWS * 768 * n_cols / hot / 1e9, best * 1e3, (double)layer * 2 / best / 1e9,
           2.0 * (double)layer * n_cols / best / 1e9);
  }
  return 0;
}
