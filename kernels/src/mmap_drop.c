/* The live mappings of le_mmap_file (core.c), so that le_mmap_drop only ever
 * discards pages of a private read-only file mapping, which read back from
 * the file, never anonymous memory, which would read back as zeros. Used to
 * hand back the pages of weights the CPU backend keeps a repacked copy of. */
#define _GNU_SOURCE
#include "le_internal.h"

#if defined(__wasi__) || defined(_WIN32)
/* no file mappings there */
void le_maps_add(const void *base, uint64_t size) { (void)base; (void)size; }
void le_maps_forget(const void *base, uint64_t size) { (void)base; (void)size; }
int32_t le_mmap_drop(const void *addr, uint64_t len) {
  (void)addr;
  (void)len;
  le_set_error("le_mmap_drop: no file mappings in this build");
  return -1;
}
#else
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#define LE_MAX_MAPS 256
static struct { uintptr_t base; uint64_t size; } le_maps[LE_MAX_MAPS];
static pthread_mutex_t le_maps_lock = PTHREAD_MUTEX_INITIALIZER;

/* A mapping past the table's size is simply never dropped from. */
void le_maps_add(const void *base, uint64_t size) {
  pthread_mutex_lock(&le_maps_lock);
  for (int i = 0; i < LE_MAX_MAPS; i++)
    if (!le_maps[i].size) {
      le_maps[i].base = (uintptr_t)base;
      le_maps[i].size = size;
      break;
    }
  pthread_mutex_unlock(&le_maps_lock);
}

void le_maps_forget(const void *base, uint64_t size) {
  pthread_mutex_lock(&le_maps_lock);
  for (int i = 0; i < LE_MAX_MAPS; i++)
    if (le_maps[i].size && le_maps[i].base == (uintptr_t)base && le_maps[i].size == size) {
      le_maps[i].base = 0;
      le_maps[i].size = 0;
      break;
    }
  pthread_mutex_unlock(&le_maps_lock);
}

int32_t le_mmap_drop(const void *addr, uint64_t len) {
  const uintptr_t a = (uintptr_t)addr;
  int found = 0;
  /* held across madvise: le_munmap cannot unmap (and the range be reused)
   * in between */
  pthread_mutex_lock(&le_maps_lock);
  for (int i = 0; i < LE_MAX_MAPS && !found; i++)
    found = le_maps[i].size && a >= le_maps[i].base && len <= le_maps[i].size &&
            a - le_maps[i].base <= le_maps[i].size - len;
#ifdef MADV_DONTNEED
  if (found) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = (a + page - 1) & ~(page - 1), hi = (a + len) & ~(page - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
  }
#endif
  pthread_mutex_unlock(&le_maps_lock);
  if (!found) le_set_error("le_mmap_drop: range is not inside a mapping of le_mmap_file");
  return found ? 0 : -1;
}
#endif
