/* Where a pool worker runs. A compute's thread 0 is whatever thread
 * called: under Deno's nonblocking FFI, one of a pool of runtime threads
 * taking turns, each woken where the scheduler likes, often on the CPU
 * where a worker is polling for work. Both then share one CPU until the
 * kernel's load balancing moves one, milliseconds later: on a 2-core VM a
 * quarter of a 16-sequence decode loop ran so (perf samples of tolstoy-6m,
 * the worker and the caller alone on one CPU), and le_adapt fell back to
 * one thread for a third of the steps (kernels/PARITY.md section 40). So a
 * worker that wakes on the caller's CPU leaves it for the compute. Only
 * the worker's own affinity changes, within the CPUs it was allowed, and
 * it is restored after the compute. */
#define _GNU_SOURCE
#include "le_cpus.h"

#if defined(LE_CPU_AFFINITY)
int le_cpu_now(void) { return sched_getcpu(); }

void le_cpus_init(le_cpus *c) {
  if (sched_getaffinity(0, sizeof c->allowed, &c->allowed) != 0) CPU_ZERO(&c->allowed);
  c->moved = 0;
}

void le_cpus_leave(le_cpus *c, int cpu, int n_threads) {
  /* not with more threads than CPUs: there the kernel's balancing of all
   * of them beats keeping every worker off one CPU */
  if (cpu < 0 || cpu >= CPU_SETSIZE || sched_getcpu() != cpu || !CPU_ISSET(cpu, &c->allowed) ||
      CPU_COUNT(&c->allowed) < n_threads)
    return;
  cpu_set_t others = c->allowed;
  CPU_CLR(cpu, &others);
  c->moved = sched_setaffinity(0, sizeof others, &others) == 0;
}

void le_cpus_back(le_cpus *c) {
  if (c->moved) sched_setaffinity(0, sizeof c->allowed, &c->allowed);
  c->moved = 0;
}
#endif
