/* Read-bandwidth probe for `deno task bench` (bench/bandwidth.ts builds and
 * runs it): T threads each stream their own part of one buffer with the
 * widest loads the compiler targets (-march=native), several times; prints
 * the median and the range of the runs in GB/s as one JSON line.
 *
 *   cc -O2 -march=native -pthread bench/bandwidth.c -o /tmp/bandwidth
 *   /tmp/bandwidth THREADS MIB
 *
 * The buffer is asked for on huge pages (MADV_HUGEPAGE, as le_alloc does
 * for weights), which gives the machine's best streaming figure: a bound
 * an engine can meet, never one it beats by reading fewer TLB entries. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

typedef int64_t v64 __attribute__((vector_size(64)));

static char *buf;
static size_t part;
static volatile int64_t sink;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Four independent sums so the adds never wait on each other. */
static void *reader(void *arg) {
  const v64 *p = (const v64 *)(const void *)(buf + (size_t)(intptr_t)arg * part);
  v64 a = {0}, b = {0}, c = {0}, d = {0};
  for (size_t i = 0; i < part / sizeof(v64); i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  v64 s = a + b + c + d;
  sink = s[0];
  return NULL;
}

static int cmp(const void *x, const void *y) {
  const double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

int main(int argc, char **argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 1;
  const size_t mib = argc > 2 ? (size_t)atoll(argv[2]) : 1024;
  if (threads < 1 || threads > 256 || mib < 64) {
    fprintf(stderr, "usage: bandwidth THREADS MIB (MIB >= 64)\n");
    return 2;
  }
  part = (mib << 20) / (size_t)threads / 256 * 256;
  const size_t size = part * (size_t)threads;
  if (posix_memalign((void **)&buf, (size_t)2 << 20, size) != 0) {
    fprintf(stderr, "bandwidth: cannot allocate %zu MiB\n", mib);
    return 1;
  }
#ifdef MADV_HUGEPAGE
  madvise(buf, size, MADV_HUGEPAGE);
#endif
  memset(buf, 1, size);
  enum { RUNS = 7 };
  double gbs[RUNS];
  pthread_t th[256];
  for (int r = 0; r < RUNS; r++) {
    const double t0 = now();
    for (intptr_t i = 0; i < threads; i++) pthread_create(&th[i], NULL, reader, (void *)i);
    for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);
    gbs[r] = (double)size / (now() - t0) / 1e9;
  }
  qsort(gbs, RUNS, sizeof gbs[0], cmp);
  printf("{\"gbps\":%.2f,\"min\":%.2f,\"max\":%.2f,\"threads\":%d,\"mib\":%zu}\n", gbs[RUNS / 2],
         gbs[0], gbs[RUNS - 1], threads, mib);
  free(buf);
  return 0;
}
