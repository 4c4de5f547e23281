/* Micro-benchmark of decode attention over an F16 cache of D cells, for
 * every layer of TinyLlama's shape (22 layers, 32 query heads, 4 KV heads,
 * heads of 64; K cells of 256 halves), nodes as lib/model/arch/builder.ts
 * emits them: unfused, the KQ mul_mat, the softmax and the KQV mul_mat (V
 * stored transposed); with `fa`, one FLASH_ATTN_EXT (V as K).
 *
 *   make -C kernels cpu && cc -O2 -Ikernels/include bench/attn.c \
 *     -Lbuild -lllm_edge -Wl,-rpath,$PWD/build -o /tmp/attn
 *   /tmp/attn [depth=2048] [threads=2] [reps=50] [layers=22] [fa|fa32|unfused] [avx2]
 *
 * ATTN_SHAPE=NH,NKV,HD: other heads (8,4,32: tolstoy-6m's; 16,2,128).
 * ATTN_Q8=1: K and V in Q8_0 (fa, fa32); ATTN_SHARED=1: every layer on
 * layer 0's cache (in cache: the arithmetic alone); ATTN_COLD=1: 256 MiB
 * read between repetitions, untimed, as the engine's weights evict K and V
 * between two tokens (the cache is otherwise warm in L3 from the last).
 *
 * `fa32` is `fa` with the node's precision GGML_PREC_F32 (flash_attn_f32.c).
 * `avx2` runs the AVX2 kernels (le_set_simd_level) on an AVX-512 CPU.
 * For an A/B, run the binary with LD_LIBRARY_PATH (or LD_PRELOAD) pointing
 * at another build, alternately. Prints the median ms per token of all
 * layers' attention, the cache bytes read per second, and a hash of the
 * outputs' bits (two builds that agree print the same). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llm_edge.h"

static int NH = 32, NKV = 4, HD = 64; /* ATTN_SHAPE=nh,nkv,hd overrides */
static int LAYERS = 22;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint16_t half(float f) { /* small normal values only */
  uint32_t x;
  memcpy(&x, &f, 4);
  const uint32_t s = (x >> 16) & 0x8000;
  const int e = (int)((x >> 23) & 0xff) - 127 + 15;
  if (e <= 0) return (uint16_t)s;
  return (uint16_t)(s | (uint32_t)e << 10 | ((x >> 13) & 0x3ff));
}

static le_tensor tensor(int32_t type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t nb1,
                        int64_t nb2, const void *data) {
  const int64_t es = type == 1 ? 2 : type == 8 ? 34 : 4; /* Q8_0: bytes per block */
  le_tensor t = {.type = type, .ne = {ne0, ne1, ne2, 1}, .nb = {es, nb1, nb2, nb2 * ne2}};
  t.data = (uint64_t)(uintptr_t)data;
  return t;
}

static int cmp(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  const char *shape = getenv("ATTN_SHAPE");
  if (shape && sscanf(shape, "%d,%d,%d", &NH, &NKV, &HD) != 3) {
    fprintf(stderr, "ATTN_SHAPE: want NH,NKV,HD\n");
    return 2;
  }
  const int64_t D = argc > 1 ? atol(argv[1]) : 2048;
  const int threads = argc > 2 ? atoi(argv[2]) : 2;
  const int reps = argc > 3 ? atoi(argv[3]) : 50;
  if (argc > 4) LAYERS = atoi(argv[4]);
  const int fa32 = argc > 5 && !strcmp(argv[5], "fa32");
  const int fa = fa32 || (argc > 5 && !strcmp(argv[5], "fa"));
  if (argc > 6 && !strcmp(argv[6], "avx2")) le_set_simd_level(1);
  /* ATTN_Q8=1: a Q8_0 cache (flash attention only) */
  const int q8 = fa && getenv("ATTN_Q8") && atoi(getenv("ATTN_Q8"));
  const int64_t cells = (D + 255) / 256 * 256; /* the cache's size, padded */
  /* ATTN_STREAMS=S: S sequences of one token each, each over its own cache
   * stream (the server's slots; flash attention only) */
  const int64_t S = fa && getenv("ATTN_STREAMS") ? atol(getenv("ATTN_STREAMS")) : 1;
  const int64_t head_bytes = q8 ? HD / 32 * 34 : HD * 2, kvt = q8 ? 8 : 1;
  const size_t kbytes = (size_t)cells * NKV * head_bytes * (size_t)S;
  le_node *nodes = calloc(3 * LAYERS, sizeof(le_node));
  float *q = le_alloc((size_t)LAYERS * NH * HD * 4 * (size_t)S, 64);
  float *kq = le_alloc((size_t)LAYERS * NH * D * 4, 64);
  float *kqv = le_alloc((size_t)LAYERS * NH * HD * 4 * (size_t)S, 64);
  float *mask = le_alloc((size_t)D * 4, 64); /* zeros: F32 or F16 */
  /* ATTN_LIVE=n: the mask drops cells n.. (a window padded past the
   * sequence's end; -inf is 0xfc00 in f16) */
  const int64_t live = getenv("ATTN_LIVE") ? atol(getenv("ATTN_LIVE")) : D;
  if (fa)
    for (int64_t i = live; i < D; i++) ((uint16_t *)mask)[i] = 0xfc00;
  srand(1);
  for (int64_t i = 0; i < (int64_t)LAYERS * NH * HD * S; i++) q[i] = (float)rand() / RAND_MAX - 0.5f;
  for (int l = 0; l < LAYERS; l++) {
    /* One block for every layer's K and V, as the engine's KV cache (huge
     * pages where the kernel gives them: core.c's le_alloc). */
    static uint16_t *kv;
    if (!kv) kv = le_alloc(2 * kbytes * (size_t)LAYERS, 64);
    /* ATTN_SHARED=1: every layer reads layer 0's K and V, which stay in
     * cache: the kernel's arithmetic alone, against memory's share. */
    const int shared = getenv("ATTN_SHARED") && atoi(getenv("ATTN_SHARED"));
    uint16_t *k = (uint16_t *)(void *)((char *)kv + 2 * kbytes * (size_t)(shared ? 0 : l));
    uint16_t *v = (uint16_t *)(void *)((char *)k + kbytes);
    if (q8) { /* blocks of a scale of 1/256, then 32 random bytes */
      uint8_t *kb = (uint8_t *)k, *vb = (uint8_t *)v;
      for (size_t i = 0; i < kbytes; i++) {
        const int at = (int)(i % 34);
        kb[i] = at == 0 ? 0 : at == 1 ? 0x1c : (uint8_t)rand();
        vb[i] = at == 0 ? 0 : at == 1 ? 0x1c : (uint8_t)rand();
      }
    } else {
      for (size_t i = 0; i < kbytes / 2; i++) {
        k[i] = half((float)rand() / RAND_MAX - 0.5f);
        v[i] = half((float)rand() / RAND_MAX - 0.5f);
      }
    }
    le_node *n = nodes + (fa ? 1 : 3) * l;
    float *ql = q + (size_t)l * NH * HD * S, *kql = kq + (size_t)l * NH * D;
    float *kqvl = kqv + (size_t)l * NH * HD * S;
    if (fa) { /* softmax(q k * scale + mask) v: dst [HD, NH, 1] */
      n[0].op = LE_OP_FLASH_ATTN_EXT, n[0].n_src = 4;
      n[0].src[0] = tensor(0, HD, 1, NH, HD * 4, HD * 4, ql);
      n[0].src[1] = tensor(kvt, HD, D, NKV, NKV * head_bytes, head_bytes, k);
      n[0].src[2] = tensor(kvt, HD, D, NKV, NKV * head_bytes, head_bytes, v);
      n[0].src[3] = tensor(1, D, 1, 1, D * 2, D * 2, mask);
      n[0].dst = tensor(0, HD, NH, 1, HD * 4, HD * NH * 4, kqvl);
      /* streams: q [HD, 1, NH, S], K and V [HD, D, NKV, S], dst [HD, NH, 1, S] */
      n[0].src[0].ne[3] = S, n[0].src[0].nb[3] = HD * NH * 4;
      n[0].src[1].ne[3] = S, n[0].src[1].nb[3] = (int64_t)cells * NKV * head_bytes;
      n[0].src[2].ne[3] = S, n[0].src[2].nb[3] = (int64_t)cells * NKV * head_bytes;
      n[0].dst.ne[3] = S, n[0].dst.nb[3] = HD * NH * 4;
      const float scale = 0.125f;
      memcpy(&n[0].params[0], &scale, 4);
      n[0].params[3] = fa32 ? 10 : 0; /* GGML_PREC_F32 */
      continue;
    }
    /* kq = k [HD, D, NKV] (cells of NKV*HD halves) x q [HD, 1, NH] */
    n[0].op = LE_OP_MUL_MAT, n[0].n_src = 2;
    n[0].src[0] = tensor(1, HD, D, NKV, NKV * HD * 2, HD * 2, k);
    n[0].src[1] = tensor(0, HD, 1, NH, HD * 4, HD * 4, ql);
    n[0].dst = tensor(0, D, 1, NH, D * 4, D * 4, kql);
    /* softmax(kq * scale + mask) */
    n[1].op = LE_OP_SOFT_MAX, n[1].n_src = 2;
    n[1].src[0] = n[0].dst;
    n[1].src[1] = tensor(0, D, 1, 1, D * 4, D * 4, mask);
    n[1].dst = n[0].dst;
    const float scale = 0.125f;
    memcpy(&n[1].params[0], &scale, 4);
    /* kqv = v^T [D, HD, NKV] (rows of `cells` halves) x kq [D, 1, NH] */
    n[2].op = LE_OP_MUL_MAT, n[2].n_src = 2;
    n[2].src[0] = tensor(1, D, HD, NKV, cells * 2, cells * 2 * HD, v);
    n[2].src[1] = n[0].dst;
    n[2].dst = tensor(0, HD, 1, NH, HD * 4, HD * 4, kqvl);
  }
  le_ctx *ctx = le_ctx_new(threads);
  double *t = calloc((size_t)reps, sizeof(double));
  const int cold = getenv("ATTN_COLD") && atoi(getenv("ATTN_COLD"));
  const size_t flush_n = cold ? ((size_t)256 << 20) / 8 : 0;
  uint64_t *flush = cold ? le_alloc(flush_n * 8, 64) : NULL;
  volatile uint64_t sink = 0;
  for (size_t i = 0; i < flush_n; i++) flush[i] = i;
  for (int r = -3; r < reps; r++) {
    uint64_t sum = 0;
    for (size_t i = 0; i < flush_n; i += 8) sum += flush[i];
    sink += sum;
    const double t0 = now();
    if (le_graph_compute(ctx, nodes, (fa ? 1 : 3) * LAYERS)) {
      fprintf(stderr, "compute failed: %s\n", le_ctx_error(ctx));
      return 1;
    }
    if (r >= 0) t[r] = now() - t0;
  }
  qsort(t, (size_t)reps, sizeof(double), cmp);
  /* the outputs' bits (FNV-1a), to tell two builds' results apart */
  uint32_t sum = 2166136261u;
  const uint32_t *out = (const uint32_t *)(const void *)kqv;
  for (int64_t i = 0; i < (int64_t)LAYERS * NH * HD * S; i++) sum = (sum ^ out[i]) * 16777619u;
  const double bytes = (double)LAYERS * 2 * (double)live * NKV * head_bytes * (double)S;
  printf("%sdepth %lld threads %d: %.3f ms/token (min %.3f), %.1f GB/s of K and V; bits %08x\n",
         fa32 ? "fa32 " : fa ? "fa " : "", (long long)D, threads, t[reps / 2] * 1e3, t[0] * 1e3,
         bytes / t[reps / 2] / 1e9, sum);
  le_ctx_free(ctx);
  return 0;
}
