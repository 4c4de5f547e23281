/* Threads for the threaded wasm32 build (see le_wasm_threads.h): futex
 * mutexes and condition variables, and the pool of host workers that
 * pthread_create draws from. Empty in every other build.
 *
 * A worker is a Web Worker the host (lib/backend/wasm_threads.ts) started
 * with its own instance of this module on the shared memory, its own stack
 * and TLS block; it calls le_wasm_worker(id) and never returns. Its slot
 * goes FREE (parked, waiting) -> CLAIMED (pthread_create chose it) -> RUN
 * (function and argument set) -> DONE (function returned) -> FREE (joined). */
#include "le_internal.h"

#if defined(__wasm__) && defined(__wasm_atomics__)
#include "le_wasm_threads.h"

#include <limits.h>

#define LE_WASM_MAX_WORKERS 64

enum { LE_W_FREE, LE_W_CLAIMED, LE_W_RUN, LE_W_DONE };

typedef struct {
  atomic_int present; /* 1 once the worker is parked in le_wasm_worker */
  atomic_int state;
  void *(*fn)(void *);
  void *arg;
} le_wslot;

static le_wslot le_pool[LE_WASM_MAX_WORKERS];

/* Whether this thread may block in memory.atomic.wait32: the workers may; a
 * browser's main thread traps there, so the thread that instantiated the
 * module (TLS zero) spins instead. */
static _Thread_local int le_can_block;

static void le_futex_wait(atomic_int *a, int val) {
  if (le_can_block) {
    (void)__builtin_wasm_memory_atomic_wait32((int *)a, val, -1);
  } else {
    while (atomic_load(a) == val) {
    }
  }
}

static void le_futex_wake(atomic_int *a, unsigned n) {
  (void)__builtin_wasm_memory_atomic_notify((int *)a, n);
}

/* Drepper's futex mutex ("Futexes are tricky", mutex 2). */
void le_wmutex_lock(le_wmutex *m) {
  int c = 0;
  if (atomic_compare_exchange_strong(&m->v, &c, 1)) return;
  if (c != 2) c = atomic_exchange(&m->v, 2);
  while (c != 0) {
    le_futex_wait(&m->v, 2);
    c = atomic_exchange(&m->v, 2);
  }
}

void le_wmutex_unlock(le_wmutex *m) {
  if (atomic_fetch_sub(&m->v, 1) != 1) {
    atomic_store(&m->v, 0);
    le_futex_wake(&m->v, 1);
  }
}

/* Callers recheck their condition in a loop (threads.c does), so a wake
 * that raced the sequence read only costs one more round. */
void le_wcond_wait(le_wcond *c, le_wmutex *m) {
  const int seq = atomic_load(&c->seq);
  le_wmutex_unlock(m);
  le_futex_wait(&c->seq, seq);
  le_wmutex_lock(m);
}

void le_wcond_broadcast(le_wcond *c) {
  atomic_fetch_add(&c->seq, 1);
  le_futex_wake(&c->seq, UINT_MAX);
}

int le_wthread_create(le_wthread *t, void *(*fn)(void *), void *arg) {
  for (int i = 0; i < LE_WASM_MAX_WORKERS; i++) {
    le_wslot *s = &le_pool[i];
    int free = LE_W_FREE;
    if (!atomic_load(&s->present) || !atomic_compare_exchange_strong(&s->state, &free, LE_W_CLAIMED))
      continue;
    s->fn = fn;
    s->arg = arg;
    atomic_store(&s->state, LE_W_RUN); /* publishes fn and arg */
    le_futex_wake(&s->state, 1);
    *t = i;
    return 0;
  }
  return -1; /* no parked worker: the host starts them before le_ctx_new */
}

int le_wthread_join(le_wthread t) {
  if (t < 0 || t >= LE_WASM_MAX_WORKERS) return -1;
  le_wslot *s = &le_pool[t];
  int st;
  while ((st = atomic_load(&s->state)) != LE_W_DONE) le_futex_wait(&s->state, st);
  atomic_store(&s->state, LE_W_FREE);
  return 0;
}

/* Parks worker `id` for good: runs what le_wthread_create hands it. */
__attribute__((export_name("le_wasm_worker"))) void le_wasm_worker(int32_t id) {
  if (id < 0 || id >= LE_WASM_MAX_WORKERS) return;
  le_can_block = 1;
  le_wslot *s = &le_pool[id];
  atomic_store(&s->present, 1);
  for (;;) {
    int st;
    while ((st = atomic_load(&s->state)) != LE_W_RUN) le_futex_wait(&s->state, st);
    s->fn(s->arg);
    atomic_store(&s->state, LE_W_DONE);
    le_futex_wake(&s->state, UINT_MAX);
  }
}

/* Workers parked so far (the host waits for its count before le_ctx_new). */
__attribute__((export_name("le_wasm_workers"))) int32_t le_wasm_workers(void) {
  int32_t n = 0;
  for (int i = 0; i < LE_WASM_MAX_WORKERS; i++) n += atomic_load(&le_pool[i].present);
  return n;
}

/* The most workers the pool holds. */
__attribute__((export_name("le_wasm_max_workers"))) int32_t le_wasm_max_workers(void) {
  return LE_WASM_MAX_WORKERS;
}
#endif
