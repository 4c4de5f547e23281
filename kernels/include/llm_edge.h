/*
 * llm_edge.h — the whole ABI between the TypeScript engine and the native
 * kernels. Everything TypeScript may call is declared here; ffi/symbols.ts
 * mirrors it one to one. All pointers, sizes and offsets arrive validated by
 * TypeScript (see lib/backend/cpu.ts), so the C side trusts its arguments.
 *
 * Tensors follow ggml's conventions: ne[0] is the innermost (contiguous)
 * dimension, nb[i] is the byte stride of dimension i, types are ggml type ids.
 */
#ifndef LLM_EDGE_H
#define LLM_EDGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility; everything declared here is
 * the exported surface. */
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(default)
#endif

#define LE_ABI_VERSION 6

/* ---- ops -------------------------------------------------------------- */
/* Semantics are ggml's. Which types and shapes each op accepts is decided in
 * TypeScript, by the op table of lib/graph/ops.ts; le_graph_compute only
 * asserts what keeps its own dispatch from crashing. */
enum le_op {
  LE_OP_NONE = 0,
  LE_OP_GET_ROWS = 1,  /* dst[:, i] = dequant(src0[:, src1[i]]); src1 I32 */
  LE_OP_RMS_NORM = 2,  /* params f32[0] = eps */
  LE_OP_MUL = 3,       /* src1 broadcast over src0 (ne1[i] divides ne0[i]) */
  LE_OP_ADD = 4,       /* same broadcast */
  LE_OP_MUL_MAT = 5,   /* dst[M,N,..] = src0[K,M,..]^T * src1[K,N,..] */
  LE_OP_ROPE = 6,      /* src1 = I32 positions, optional src2 F32 freq factors */
  LE_OP_SOFT_MAX = 7,  /* src1 = optional mask (F32/F16); params f32 scale, max_bias */
  LE_OP_SILU = 8,
  LE_OP_SWIGLU = 9,    /* silu(src0) * src1 */
  LE_OP_CPY = 10,      /* dst = convert(src0), both may be strided views */
  LE_OP_SCALE = 11,    /* params f32[0] = s, f32[1] = bias (dst = x*s + b) */
  LE_OP_NORM = 12,     /* layer norm without affine; params f32[0] = eps */
  LE_OP_GELU = 13,
  LE_OP_GEGLU = 14,    /* gelu(src0) * src1 (ggml_geglu_split) */
  LE_OP_FLASH_ATTN_EXT = 15, /* ggml_flash_attn_ext: src0 q F32 [D, n, nHead], src1 k and
                              * src2 v [D, nKv, nHeadKv] (F16/F32/Q8_0, not transposed),
                              * src3 optional F16 mask [nKv, >= n]; dst F32 [Dv, nHead, n];
                              * params f32 scale, max_bias, softcap (0) */
  LE_OP_SSM_CONV = 16, /* ggml_ssm_conv: src0 sx F32 [d_conv-1+n_t, d_inner, n_s], src1 c F32
                        * [d_conv, d_inner]; dst F32 [d_inner, n_t, n_s] */
  LE_OP_SSM_SCAN = 17, /* ggml_ssm_scan: src0 s [d_state, head_dim, n_head, >= n_s], src1 x
                        * [head_dim, n_head, n_t, n_s], src2 dt [n_head, n_t, n_s], src3 A
                        * [d_state or 1, n_head], src4 B and src5 C [d_state, n_group, n_t,
                        * n_s], src6 ids I32 [n_s]; dst F32 1-D: y (x's element count)
                        * then K states per sequence; params[0] = K */
  LE_OP_CONCAT = 18,   /* src0 ++ src1 along dim params[0] (both F32, may be strided) */
  LE_OP_HADAMARD = 19, /* rows of ne0 (a power of 2) times the orthonormal Walsh-Hadamard
                        * matrix: ggml's fast path of a mul_mat hinted
                        * GGML_HINT_SRC0_IS_HADAMARD (ggml_compute_forward_fwht) */
  LE_OP_SET_ROWS = 20, /* ggml_set_rows: dst row src1[i, i2 % ne11, i3 % ne12] of plane
                        * (i2, i3) = convert(src0 row (i, i2, i3)); src0 F32 [ne0, nr, ne2,
                        * ne3], src1 I32 ids [nr, ne11, ne12]; dst a view written in place
                        * (KV cache stores); an id outside 0..ne1-1 fails the node */
  LE_OP_COUNT
};

/* ROPE params (int32 slots; f32 values stored as their bit patterns):
 *   [0] n_dims  [1] mode (0 normal, 2 neox)  [2] n_ctx_orig
 *   [3] f32 freq_base  [4] f32 freq_scale  [5] f32 ext_factor
 *   [6] f32 attn_factor  [7] f32 beta_fast  [8] f32 beta_slow        */

#define LE_MAX_DIMS 4
#define LE_MAX_SRC 7
#define LE_MAX_PARAMS 16
/* Most threads a context runs (le_ctx_new refuses more). ffi/symbols.ts
 * mirrors it as MAX_THREADS; tests/ffi_test.ts compares the two. */
#define LE_MAX_THREADS 512

/* One tensor as the kernels see it: 80 bytes, little-endian. */
typedef struct le_tensor {
  int32_t type;   /* ggml type id */
  int32_t flags;  /* 0, or for MUL_MAT's src0 a LE_FLAG_* repacked layout */
  int64_t ne[LE_MAX_DIMS];
  int64_t nb[LE_MAX_DIMS];
  uint64_t data;  /* address of element [0,0,0,0] */
} le_tensor;

/* One node of the command buffer: 712 bytes. The buffer TypeScript hands to
 * le_graph_compute is an array of these, executed in order with a barrier
 * between nodes. */
typedef struct le_node {
  int32_t op;     /* enum le_op */
  int32_t n_src;
  le_tensor dst;
  le_tensor src[LE_MAX_SRC];
  int32_t params[LE_MAX_PARAMS];
} le_node;

/* ---- library ---------------------------------------------------------- */
int32_t le_abi_version(void);
/* Sleeps `micros` (0..1000; else -1) on the calling thread. Called on a
 * Deno worker thread (nonblocking FFI), it makes the event loop park, and
 * so poll I/O, before the call returns: a call that returns at once may
 * resolve before the loop parks, and then I/O waits. Not in wasm. */
int32_t le_pause(int32_t micros);
/* Bit set of what this CPU supports: 1 AVX2+FMA+F16C, 2 AVX-512F/BW/VL, 4 NEON. */
int32_t le_cpu_features(void);
/* Force a SIMD level for tests: 0 scalar, 1 AVX2, 2 AVX-512, 3 NEON, -1 best.
 * Returns the level actually in effect. */
int32_t le_set_simd_level(int32_t level);
/* Message of the last failure on this thread (static storage). */
const char *le_last_error(void);

/* ---- memory ------------------------------------------------------------ */
void *le_alloc(uint64_t size, uint64_t align); /* zero-filled; NULL on failure */
void le_free(void *p);

/* Read-only private mapping of a whole file. Returns the base address (NULL
 * on failure, see le_last_error) and writes the mapped length to *size. */
void *le_mmap_file(const char *path, uint64_t *size);
void le_munmap(void *base, uint64_t size);
/* Lets the OS drop the whole pages of [addr, addr + len), which must lie in
 * a live mapping of le_mmap_file: they read back from the file when touched
 * again (a weight whose repacked copy is used instead keeps no resident
 * pages). 0, or -1 (nothing done) for a range outside such a mapping. */
int32_t le_mmap_drop(const void *addr, uint64_t len);

/* ---- compute ----------------------------------------------------------- */
typedef struct le_ctx le_ctx;
/* A context owns the persistent thread pool and the scratch area used to
 * quantize activations; n_threads >= 1. */
le_ctx *le_ctx_new(int32_t n_threads);
void le_ctx_free(le_ctx *ctx);
int32_t le_ctx_threads(const le_ctx *ctx);
/* Run n_nodes nodes of a command buffer. Returns 0, or a negative code with
 * le_last_error() set (LE_CANCELLED after le_ctx_cancel). Safe to call from
 * a worker thread (Deno nonblocking). */
int32_t le_graph_compute(le_ctx *ctx, const le_node *nodes, int32_t n_nodes);
/* le_graph_compute's result when the cancel flag was set. */
#define LE_CANCELLED (-6)
/* Set (on != 0) or clear the cancel flag of ctx. Any thread may set it while
 * a le_graph_compute runs: the compute stops before its next node, or after
 * the chunks already taken of a long node, and returns LE_CANCELLED. The
 * flag stays set until cleared; clear it before the next compute. */
void le_ctx_cancel(le_ctx *ctx, int32_t on);
/* Message of the last failed le_graph_compute on ctx ("" after a success).
 * le_last_error is thread-local, and a nonblocking FFI call runs on another
 * thread than the one that reads the error, so the context keeps a copy. */
const char *le_ctx_error(const le_ctx *ctx);

/* ---- repacked weights --------------------------------------------------- */
/* le_tensor.flags of a MUL_MAT src0 whose data is not plain rows but a
 * layout made by le_repack (ne/nb still describe the plain rows). */
#define LE_FLAG_Q4_0_8X8 1 /* Q4_0, 8 rows interleaved (llama.cpp's q4_0_8x8) */
#define LE_FLAG_Q4_K_8X8 2 /* Q4_K, 8 rows interleaved (llama.cpp's q4_K_8x8) */
/* Q8_0, 16 rows interleaved 4 codes at a time (kernels/src/repack_q8_0.c): a
 * faster float order than llama.cpp's, never the default (le_repack_flag_fast) */
#define LE_FLAG_Q8_0_16X4 3
/* The layout (LE_FLAG_*) mul_mat wants for a 2-D weight of `type`, ne0 x
 * ne1, at the SIMD level in effect, or 0 for plain rows: where llama.cpp's
 * matching CPU variant repacks (ggml_repack_get_optimal_repack_type). */
int32_t le_repack_flag(int32_t type, int64_t ne0, int64_t ne1);
/* The same where faster float orders are allowed (ContextOptions.matmulOrder
 * "fast"): also Q8_0 into LE_FLAG_Q8_0_16X4 at AVX2 and AVX-512 with VNNI,
 * ne1 % 16 == 0. */
int32_t le_repack_flag_fast(int32_t type, int64_t ne0, int64_t ne1);
/* Bytes layout `flag` takes for an ne0 x ne1 weight of `type` (-1: no such
 * layout for that type and shape). */
int64_t le_repack_size(int32_t flag, int32_t type, int64_t ne0, int64_t ne1);
/* Writes contiguous plain rows `src` (ne0 x ne1 of `type`) into dst
 * (dst_size bytes, at least le_repack_size; no overlap) in layout `flag`.
 * 0, or -1 with le_last_error set. */
int32_t le_repack(int32_t flag, int32_t type, const void *src, void *dst, uint64_t dst_size,
                  int64_t ne0, int64_t ne1);

/* ---- row helpers (tests, quantize tool, reference checks) --------------- */
/* Dequantize n elements (a multiple of the type's block size) to f32. */
int32_t le_dequantize_row(int32_t type, const void *src, float *dst, int64_t n);
/* Quantize n f32 elements with llama.cpp's reference quantizer of `type`. */
int32_t le_quantize_row(int32_t type, const float *src, void *dst, int64_t n);
/* Dot product of a `type` row with an f32 row the way mul_mat does it
 * (activations converted to the type's vec_dot type first). */
int32_t le_vec_dot(int32_t type, int64_t n, const void *x, const float *y, float *out);
/* How many floats, of the bit patterns lo, lo + step, ... <= hi, get other
 * bits from flash attention's vector expf at the current SIMD level than
 * from libm's expf; -1 where that expf is not used (no AVX2, or a libm it
 * does not reproduce). */
int64_t le_expf_mismatches(uint32_t lo, uint32_t hi, uint32_t step);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif
