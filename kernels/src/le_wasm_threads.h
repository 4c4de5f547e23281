/* The threaded wasm32 build (-matomics, one shared memory): the pthread
 * calls threads.c makes, over a pool of host workers (wasm_threads.c).
 * wasi-libc here has no pthreads, so a thread is a Web Worker the host
 * started with its own instance of the module on the same memory, parked
 * in le_wasm_worker; pthread_create hands it a function. Mutexes and
 * condition variables are futexes on memory.atomic.wait32/notify, except
 * where the calling thread may not block (a browser's main thread): there
 * a wait spins. Not part of the ABI. */
#ifndef LE_WASM_THREADS_H
#define LE_WASM_THREADS_H

#include <stdatomic.h>

typedef struct {
  atomic_int v; /* 0 free, 1 locked, 2 locked with waiters */
} le_wmutex;
typedef struct {
  atomic_int seq; /* bumped by every broadcast */
} le_wcond;
typedef int le_wthread; /* the worker's slot in the pool */

void le_wmutex_lock(le_wmutex *m);
void le_wmutex_unlock(le_wmutex *m);
void le_wcond_wait(le_wcond *c, le_wmutex *m);
void le_wcond_broadcast(le_wcond *c);
int le_wthread_create(le_wthread *t, void *(*fn)(void *), void *arg);
int le_wthread_join(le_wthread t);

#define pthread_t le_wthread
#define pthread_mutex_t le_wmutex
#define pthread_cond_t le_wcond
static inline int le_wmutex_init(le_wmutex *m) { atomic_store(&m->v, 0); return 0; }
static inline int le_wcond_init(le_wcond *c) { atomic_store(&c->seq, 0); return 0; }
#define pthread_mutex_init(m, a) le_wmutex_init(m)
#define pthread_mutex_destroy(m) 0
#define pthread_mutex_lock(m) (le_wmutex_lock(m), 0)
#define pthread_mutex_unlock(m) (le_wmutex_unlock(m), 0)
#define pthread_cond_init(c, a) le_wcond_init(c)
#define pthread_cond_destroy(c) 0
#define pthread_cond_wait(c, m) (le_wcond_wait(c, m), 0)
#define pthread_cond_broadcast(c) (le_wcond_broadcast(c), 0)
#define pthread_create(t, a, f, arg) le_wthread_create(t, f, arg)
#define pthread_join(t, r) le_wthread_join(t)
/* No scheduler to yield to: the poll loop between spin and sleep just polls. */
#define sched_yield() 0

#endif
