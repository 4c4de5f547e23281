/* The persistent thread pool and le_graph_compute.
 *
 * Every thread (the caller is thread 0) walks the same node array; each node
 * is split across threads by the op itself, and a barrier separates nodes.
 * Waiting spins briefly on an atomic (nodes are short, a sleep/wake round
 * trip costs more than the work) and then sleeps on a condition variable so
 * an idle context burns no CPU. */
#define _GNU_SOURCE
#include "le_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define LE_SPIN 4096

typedef struct le_worker {
  le_ctx *ctx;
  int ith;
  pthread_t tid;
} le_worker;

struct le_ctx {
  int n_threads;
  le_worker *workers;
  const le_node *nodes;
  int n_nodes;
  void *wdata;
  size_t wsize;
  atomic_int job_gen;
  atomic_int stop;
  atomic_int bar_count;
  atomic_int bar_gen;
  atomic_int sleepers;
  atomic_int busy;
  atomic_int failed;
  atomic_llong chunk; /* le_next_chunk's counter; 0 whenever all threads sit in a barrier */
  char fail_msg[256];
  char error[512]; /* le_ctx_error */
  /* LE_PROFILE=1: thread 0's wall time per op (node + its barrier), printed at free */
  int profile;
  double prof_ns[LE_OP_COUNT];
  long prof_n[LE_OP_COUNT];
  double prof_bytes[LE_OP_COUNT]; /* src0 bytes, for a bandwidth figure */
  pthread_mutex_t mu;
  pthread_cond_t cv;
};

static inline void le_cpu_relax(void) {
#if defined(LE_X86)
  _mm_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

/* Wait until *v != old: spin, then sleep. Correct against le_notify because
 * both sides use seq_cst on (v, sleepers) and the sleeper rechecks v under
 * the mutex before waiting. */
static void le_wait_change(le_ctx *ctx, atomic_int *v, int old) {
  for (int i = 0; i < LE_SPIN; i++) {
    if (atomic_load(v) != old) return;
    le_cpu_relax();
  }
  pthread_mutex_lock(&ctx->mu);
  atomic_fetch_add(&ctx->sleepers, 1);
  while (atomic_load(v) == old) pthread_cond_wait(&ctx->cv, &ctx->mu);
  atomic_fetch_sub(&ctx->sleepers, 1);
  pthread_mutex_unlock(&ctx->mu);
}

static void le_notify(le_ctx *ctx) {
  if (atomic_load(&ctx->sleepers) > 0) {
    pthread_mutex_lock(&ctx->mu);
    pthread_cond_broadcast(&ctx->cv);
    pthread_mutex_unlock(&ctx->mu);
  }
}

void le_barrier(le_ctx *ctx) {
  const int nth = ctx->n_threads;
  if (nth == 1) {
    atomic_store_explicit(&ctx->chunk, 0, memory_order_relaxed);
    return;
  }
  const int gen = atomic_load(&ctx->bar_gen);
  if (atomic_fetch_add(&ctx->bar_count, 1) == nth - 1) {
    atomic_store(&ctx->bar_count, 0);
    atomic_store_explicit(&ctx->chunk, 0, memory_order_relaxed); /* published by bar_gen */
    atomic_fetch_add(&ctx->bar_gen, 1);
    le_notify(ctx);
  } else {
    le_wait_change(ctx, &ctx->bar_gen, gen);
  }
}

int64_t le_next_chunk(le_ctx *ctx) {
  return atomic_fetch_add_explicit(&ctx->chunk, 1, memory_order_relaxed);
}

void le_ctx_fail(le_ctx *ctx, const char *msg) {
  int expected = 0;
  if (atomic_compare_exchange_strong(&ctx->failed, &expected, 1))
    snprintf(ctx->fail_msg, sizeof ctx->fail_msg, "%s", msg);
}

static double le_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void le_run_nodes(le_ctx *ctx, int ith) {
  le_compute_params p = {
      .ith = ith, .nth = ctx->n_threads, .ctx = ctx, .wdata = ctx->wdata, .wsize = ctx->wsize};
  const int prof = ctx->profile && ith == 0;
  for (int i = 0; i < ctx->n_nodes; i++) {
    const double t0 = prof ? le_now_ns() : 0;
    le_node_compute(&ctx->nodes[i], &p);
    le_barrier(ctx);
    if (prof) {
      const int op = ctx->nodes[i].op;
      if (op >= 0 && op < LE_OP_COUNT) {
        ctx->prof_ns[op] += le_now_ns() - t0;
        ctx->prof_n[op]++;
        const le_tensor *s0 = &ctx->nodes[i].src[0];
        ctx->prof_bytes[op] += (double)s0->nb[1] * (double)(s0->ne[1] * s0->ne[2] * s0->ne[3]);
      }
    }
  }
}

static void *le_worker_main(void *arg) {
  le_worker *w = arg;
  le_ctx *ctx = w->ctx;
  int seen = 0;
  for (;;) {
    le_wait_change(ctx, &ctx->job_gen, seen);
    seen = atomic_load(&ctx->job_gen);
    if (atomic_load(&ctx->stop)) break;
    le_run_nodes(ctx, w->ith);
  }
  return NULL;
}

le_ctx *le_ctx_new(int32_t n_threads) {
  if (n_threads < 1 || n_threads > 512) {
    le_set_error("le_ctx_new: thread count %d outside 1..512", n_threads);
    return NULL;
  }
  le_ctx *ctx = calloc(1, sizeof *ctx);
  if (!ctx) {
    le_set_error("le_ctx_new: out of memory");
    return NULL;
  }
  ctx->n_threads = n_threads;
  const char *prof = getenv("LE_PROFILE");
  ctx->profile = prof && *prof && *prof != '0';
  pthread_mutex_init(&ctx->mu, NULL);
  pthread_cond_init(&ctx->cv, NULL);
  (void)le_simd(); /* detect CPU features once, before any worker runs */
  ctx->workers = calloc((size_t)n_threads, sizeof(le_worker));
  if (!ctx->workers) {
    le_set_error("le_ctx_new: out of memory");
    free(ctx);
    return NULL;
  }
  for (int i = 1; i < n_threads; i++) {
    ctx->workers[i].ctx = ctx;
    ctx->workers[i].ith = i;
    if (pthread_create(&ctx->workers[i].tid, NULL, le_worker_main, &ctx->workers[i]) != 0) {
      ctx->n_threads = i; /* join the ones that started */
      le_ctx_free(ctx);
      le_set_error("le_ctx_new: cannot start thread %d", i);
      return NULL;
    }
  }
  return ctx;
}

void le_ctx_free(le_ctx *ctx) {
  if (!ctx) return;
  if (ctx->profile) {
    double tot = 0;
    for (int i = 0; i < LE_OP_COUNT; i++) tot += ctx->prof_ns[i];
    for (int i = 0; i < LE_OP_COUNT; i++)
      if (ctx->prof_n[i])
        fprintf(stderr, "le_profile op %2d: %10.3f ms %5.1f%% (%ld nodes, src0 %.2f GB/s)\n", i,
                ctx->prof_ns[i] / 1e6, 100 * ctx->prof_ns[i] / tot, ctx->prof_n[i],
                ctx->prof_bytes[i] / ctx->prof_ns[i]);
  }
  atomic_store(&ctx->stop, 1);
  atomic_fetch_add(&ctx->job_gen, 1);
  pthread_mutex_lock(&ctx->mu);
  pthread_cond_broadcast(&ctx->cv);
  pthread_mutex_unlock(&ctx->mu);
  for (int i = 1; i < ctx->n_threads; i++) pthread_join(ctx->workers[i].tid, NULL);
  pthread_mutex_destroy(&ctx->mu);
  pthread_cond_destroy(&ctx->cv);
  free(ctx->workers);
  free(ctx->wdata);
  free(ctx);
}

int32_t le_ctx_threads(const le_ctx *ctx) { return ctx ? ctx->n_threads : 0; }

const char *le_ctx_error(const le_ctx *ctx) { return ctx ? ctx->error : ""; }

static int32_t le_graph_compute_impl(le_ctx *ctx, const le_node *nodes, int32_t n_nodes);

int32_t le_graph_compute(le_ctx *ctx, const le_node *nodes, int32_t n_nodes) {
  if (!ctx) {
    le_set_error("le_graph_compute: null context");
    return -1;
  }
  const int32_t rc = le_graph_compute_impl(ctx, nodes, n_nodes);
  if (rc != -2) snprintf(ctx->error, sizeof ctx->error, "%s", rc == 0 ? "" : le_last_error());
  return rc;
}

static int32_t le_graph_compute_impl(le_ctx *ctx, const le_node *nodes, int32_t n_nodes) {
  if (!ctx || (!nodes && n_nodes > 0) || n_nodes < 0) {
    le_set_error("le_graph_compute: null context or node array");
    return -1;
  }
  int expected = 0;
  if (!atomic_compare_exchange_strong(&ctx->busy, &expected, 1)) {
    le_set_error("le_graph_compute: context is already computing");
    return -2;
  }
  size_t need = 0;
  for (int i = 0; i < n_nodes; i++) {
    if (le_node_check(&nodes[i]) != 0) {
      char msg[400];
      snprintf(msg, sizeof msg, "%s", le_last_error());
      le_set_error("node %d: %s", i, msg);
      atomic_store(&ctx->busy, 0);
      return -3;
    }
    const size_t w = le_node_wsize(&nodes[i], ctx->n_threads);
    if (w > need) need = w;
  }
  if (need > ctx->wsize) {
    free(ctx->wdata);
    ctx->wsize = 0;
    need = (need + 4095) & ~(size_t)4095;
    ctx->wdata = le_alloc(need, 64);
    if (!ctx->wdata) {
      atomic_store(&ctx->busy, 0);
      return -4;
    }
    ctx->wsize = need;
  }
  ctx->nodes = nodes;
  ctx->n_nodes = n_nodes;
  atomic_store(&ctx->chunk, 0);
  atomic_store(&ctx->failed, 0);
  if (ctx->n_threads > 1) {
    atomic_fetch_add(&ctx->job_gen, 1);
    le_notify(ctx);
  }
  le_run_nodes(ctx, 0); /* ends with a barrier: every worker is done */
  ctx->nodes = NULL;
  int rc = 0;
  if (atomic_load(&ctx->failed)) {
    le_set_error("%s", ctx->fail_msg);
    rc = -5;
  }
  atomic_store(&ctx->busy, 0);
  return rc;
}
