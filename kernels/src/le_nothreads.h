/* The single-threaded build (wasm32 without the threads proposal): the
 * pthread calls threads.c makes, as no-ops for one thread. le_ctx_new
 * refuses more than one thread there (pthread_create fails), so nothing
 * ever waits on a mutex or condition variable: every wait in threads.c
 * happens only with two or more threads. Not part of the ABI. */
#ifndef LE_NOTHREADS_H
#define LE_NOTHREADS_H

typedef int pthread_t;
typedef int pthread_mutex_t;
typedef int pthread_cond_t;

static inline int pthread_mutex_init(pthread_mutex_t *m, const void *a) { (void)a; *m = 0; return 0; }
static inline int pthread_mutex_destroy(pthread_mutex_t *m) { (void)m; return 0; }
static inline int pthread_mutex_lock(pthread_mutex_t *m) { (void)m; return 0; }
static inline int pthread_mutex_unlock(pthread_mutex_t *m) { (void)m; return 0; }
static inline int pthread_cond_init(pthread_cond_t *c, const void *a) { (void)a; *c = 0; return 0; }
static inline int pthread_cond_destroy(pthread_cond_t *c) { (void)c; return 0; }
static inline int pthread_cond_broadcast(pthread_cond_t *c) { (void)c; return 0; }
static inline int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m) { (void)c; (void)m; return 0; }
static inline int pthread_create(pthread_t *t, const void *a, void *(*f)(void *), void *arg) {
  (void)t; (void)a; (void)f; (void)arg;
  return -1; /* no threads: le_ctx_new reports "cannot start thread 1" */
}
static inline int pthread_join(pthread_t t, void **r) { (void)t; (void)r; return 0; }
static inline int sched_yield(void) { return 0; }

#endif
