/* Library-level services: version, CPU feature detection and SIMD level,
 * thread-local error text, aligned allocation and read-only file mapping. */
#define _GNU_SOURCE
#include "le_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <time.h>
#if !defined(__wasi__)
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

#if defined(LE_X86)
#include <cpuid.h>
#endif

static _Thread_local char le_err[512];

void le_set_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(le_err, sizeof le_err, fmt, ap);
  va_end(ap);
}

const char *le_last_error(void) { return le_err; }

int32_t le_abi_version(void) { return LE_ABI_VERSION; }

#if !defined(__wasi__)
int32_t le_pause(int32_t micros) {
  if (micros < 0 || micros > 1000) {
    le_set_error("le_pause: %d microseconds is outside 0..1000", micros);
    return -1;
  }
  struct timespec t = {0, (long)micros * 1000};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
  return 0;
}
#endif

#if defined(LE_X86)
static uint64_t le_xgetbv(void) {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((uint64_t)hi << 32) | lo;
}
#endif

int32_t le_cpu_features(void) {
  int32_t f = 0;
#if defined(LE_X86)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27), f16c = c & (1u << 29);
  if (!osxsave) return 0;
  const uint64_t xcr0 = le_xgetbv();
  const bool ymm = (xcr0 & 6) == 6, zmm = (xcr0 & 0xe6) == 0xe6;
  if (__get_cpuid_max(0, NULL) < 7) return 0;
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx2 = b & (1u << 5);
  const bool avx512f = b & (1u << 16), avx512bw = b & (1u << 30), avx512vl = b & (1u << 31);
  if (ymm && avx2 && fma && f16c) f |= 1;
  if ((f & 1) && zmm && avx512f && avx512bw && avx512vl) f |= 2;
#elif defined(LE_NEON)
  f |= 4;
#endif
  return f;
}

static atomic_int le_level = -1;

static int le_best_level(void) {
  const int32_t f = le_cpu_features();
  if (f & 2) return LE_SIMD_AVX512;
  if (f & 1) return LE_SIMD_AVX2;
  if (f & 4) return LE_SIMD_NEON;
  return LE_SIMD_SCALAR;
}

int le_simd(void) {
  int l = atomic_load_explicit(&le_level, memory_order_relaxed);
  if (l < 0) {
    l = le_best_level();
    atomic_store(&le_level, l);
  }
  return l;
}

int32_t le_set_simd_level(int32_t level) {
  const int best = le_best_level();
  int l = level;
  if (l < 0) l = best;
  /* a level the CPU lacks degrades to the best one below it */
  const int32_t f = le_cpu_features();
  if (l == LE_SIMD_AVX512 && !(f & 2)) l = LE_SIMD_AVX2;
  if (l == LE_SIMD_AVX2 && !(f & 1)) l = LE_SIMD_SCALAR;
  if (l == LE_SIMD_NEON && !(f & 4)) l = LE_SIMD_SCALAR;
  if (l >= LE_SIMD_COUNT) l = best;
  atomic_store(&le_level, l);
  return l;
}

#if defined(LE_X86)
/* AVX-512 VNNI (vpdpbusd), for the kernels that use it at the AVX-512 level. */
int le_cpu_vnni(void) {
  static int state = -1;
  if (state < 0) state = __builtin_cpu_supports("avx512vnni") ? 1 : 0;
  return state;
}
#endif

/* Buffers from this size up are asked for on huge pages (le_alloc). */
#define LE_HUGE_MIN ((uint64_t)4 << 20)
#define LE_HUGE_PAGE ((uint64_t)2 << 20)

/* Every block carries, just before it, where its allocation begins and how
 * it was made, so le_free needs no size from the caller. */
typedef struct {
  void *base;    /* what posix_memalign or mmap returned */
  size_t len;    /* mmap's length; 0: posix_memalign's */
  uint64_t magic;
} le_block_head;
#define LE_BLOCK_MAGIC 0x6b636f6c622d656cULL /* "le-block" */

static void *le_block(void *base, size_t len, size_t align) {
  char *p = (char *)(((uintptr_t)base + sizeof(le_block_head) + align - 1) & ~(uintptr_t)(align - 1));
  ((le_block_head *)p)[-1] = (le_block_head){base, len, LE_BLOCK_MAGIC};
  return p;
}

void *le_alloc(uint64_t size, uint64_t align) {
  if (align < 64) align = 64;
  if (align & (align - 1)) {
    le_set_error("le_alloc: alignment %llu is not a power of two", (unsigned long long)align);
    return NULL;
  }
  if (size == 0) size = 1;
  if (size > (uint64_t)SIZE_MAX - 2 * LE_HUGE_PAGE || align > LE_HUGE_PAGE) { /* no overflow below */
    le_set_error("le_alloc: %llu bytes at alignment %llu is more than this build can map",
                 (unsigned long long)size, (unsigned long long)align);
    return NULL;
  }
#if defined(MADV_HUGEPAGE) && defined(MAP_ANONYMOUS)
  if (size >= LE_HUGE_MIN) {
    /* Large buffers (weights, repacked copies, KV caches, compute arenas):
     * fresh pages from mmap are zero already and become resident only where
     * written, so a compute arena's pages that no tensor of the graph
     * reaches cost no memory (a memset made all of a 1.1B model's 70 MiB
     * arena resident, where llama.cpp's compute buffer had 50 MiB). They are
     * streamed by matrix-vector products: on 2 MiB pages the loads miss the
     * TLB far less (a read-bandwidth probe on Zen 4: 30 -> 33.5 GB/s), so
     * they are asked for where transparent huge pages are "madvise" only. */
    const size_t len = (size_t)size + LE_HUGE_PAGE + 4096;
    void *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
      le_set_error("le_alloc: out of memory mapping %llu bytes: %s", (unsigned long long)size,
                   strerror(errno));
      return NULL;
    }
    void *p = le_block(base, len, LE_HUGE_PAGE);
    (void)madvise(p, (size_t)size & ~(size_t)(LE_HUGE_PAGE - 1), MADV_HUGEPAGE);
    return p;
  }
#endif
  void *base = NULL;
  if (posix_memalign(&base, (size_t)align, (size_t)(size + align)) != 0) {
    le_set_error("le_alloc: out of memory allocating %llu bytes", (unsigned long long)size);
    return NULL;
  }
  void *p = le_block(base, 0, (size_t)align);
  memset(p, 0, (size_t)size);
  return p;
}

void le_free(void *p) {
  if (!p) return;
  const le_block_head h = ((const le_block_head *)p)[-1];
  /* TypeScript frees only blocks it holds, once; this catches an address
   * inside a block (a freed block's head may be gone with its pages). */
  if (h.magic != LE_BLOCK_MAGIC) {
    le_set_error("le_free: %p is not a block of le_alloc", p);
    return;
  }
#if defined(MADV_HUGEPAGE) && defined(MAP_ANONYMOUS)
  if (h.len) {
    munmap(h.base, h.len);
    return;
  }
#endif
  free(h.base);
}

#if defined(__wasi__)
/* wasm32: the module sees no files; the host copies models into its memory. */
void *le_mmap_file(const char *path, uint64_t *size) {
  if (size) *size = 0;
  le_set_error("le_mmap_file: %s: no file mapping in the WebAssembly build", path);
  return NULL;
}

void le_munmap(void *base, uint64_t size) { (void)base; (void)size; }
#else
void *le_mmap_file(const char *path, uint64_t *size) {
  if (size) *size = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    le_set_error("le_mmap_file: cannot open %s: %s", path, strerror(errno));
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    le_set_error("le_mmap_file: %s is not a regular file", path);
    close(fd);
    return NULL;
  }
  if (st.st_size == 0) {
    le_set_error("le_mmap_file: %s is empty", path);
    close(fd);
    return NULL;
  }
  void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  close(fd);
  if (p == MAP_FAILED) {
    le_set_error("le_mmap_file: mmap of %s failed: %s", path, strerror(err));
    return NULL;
  }
#ifdef POSIX_MADV_WILLNEED
  posix_madvise(p, (size_t)st.st_size, POSIX_MADV_WILLNEED);
#endif
  if (size) *size = (uint64_t)st.st_size;
  le_maps_add(p, (uint64_t)st.st_size);
  return p;
}

void le_munmap(void *base, uint64_t size) {
  if (!base || !size) return;
  le_maps_forget(base, size); /* before the pages go: no drop into a reused range */
  munmap(base, (size_t)size);
}
#endif
