/* Where a pool worker runs (cpus.c): the CPUs it may use, and leaving the
 * one its compute's caller runs on (threads.c). Linux only; elsewhere the
 * calls do nothing. */
#ifndef LE_CPUS_H
#define LE_CPUS_H

#if defined(__linux__) && !defined(__wasm__)
#define LE_CPU_AFFINITY 1
#include <sched.h>

typedef struct le_cpus {
  cpu_set_t allowed; /* the CPUs the thread may run on, as it started */
  int moved;         /* it left the caller's CPU for this compute */
} le_cpus;

/* The calling thread's CPU now (-1: unknown). */
int le_cpu_now(void);
/* Records the calling thread's allowed CPUs. */
void le_cpus_init(le_cpus *c);
/* If the calling thread runs on CPU `cpu`, moves it to its other allowed
 * CPUs, unless there are fewer of those than `n_threads`. */
void le_cpus_leave(le_cpus *c, int cpu, int n_threads);
/* Gives the thread back every CPU it was allowed, if it moved. */
void le_cpus_back(le_cpus *c);
#else
typedef struct le_cpus {
  int unused;
} le_cpus;
static inline int le_cpu_now(void) { return -1; }
static inline void le_cpus_init(le_cpus *c) { (void)c; }
static inline void le_cpus_leave(le_cpus *c, int cpu, int n_threads) {
  (void)c, (void)cpu, (void)n_threads;
}
static inline void le_cpus_back(le_cpus *c) { (void)c; }
#endif

#endif
