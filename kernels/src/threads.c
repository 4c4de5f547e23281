/* The persistent thread pool and le_graph_compute.
 *
 * Every thread (the caller is thread 0) walks the same node array; each node
 * is split across threads by the op itself. A barrier separates a node from
 * the ones before it unless it touches none of the memory they write and
 * writes none they read (le_plan_barriers, sched_plan.c): a decode step is
 * ~20 tiny nodes per layer, and q/k/v or gate/up projections need no wait
 * between them. Which thread computes what never changes a value, so
 * results do not depend on it.
 * Waiting spins briefly on an atomic (nodes are short, a sleep/wake round
 * trip costs more than the work), then yields the CPU in a loop for a while
 * (see le_wait_change_poll), then sleeps on a condition variable so an idle
 * context burns no CPU. When thread 0 spends much of a compute waiting for
 * threads that are not running (another process holds the CPUs), the next
 * computes run on thread 0 alone (le_adapt): two threads that take turns
 * at every barrier are slower than one, by 3x on a busy 2-core machine.
 *
 * Cancelling (le_ctx_cancel, from another thread while a compute runs) is
 * seen at two places: between nodes, decided at a barrier by the thread that
 * completes it so every thread stops before the same node (a thread leaving
 * early would pair its barriers with the wrong ones of the others), and
 * between chunks of a node (le_next_chunk hands out no more work, so a long
 * mul_mat ends after the chunks already taken). */
#define _GNU_SOURCE
#include "le_cpus.h"
#include "le_internal.h"
#include "le_sched.h"

#if defined(__wasm__) && !defined(__wasm_atomics__)
#define LE_NO_THREADS 1 /* one thread only: see le_nothreads.h */
#include "le_nothreads.h"
#elif defined(__wasm__)
#include "le_wasm_threads.h" /* host workers: see wasm_threads.c */
#else
#include <pthread.h>
#include <sched.h>
#endif
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef LE_SPIN
#define LE_SPIN 4096
#endif
/* A worker waiting for the next compute polls this long (ns) before it
 * sleeps: a decode step's TypeScript between two computes takes well under
 * this, so the worker is running when the next one starts, instead of
 * being woken through the kernel (tens of microseconds, more in a VM) at
 * the start of every token. An idle context burns at most this much CPU
 * per compute, like ggml's polling threadpool. */
#ifndef LE_POLL_NS
#define LE_POLL_NS 2000000.0
#endif
/* A barrier polls this long (ns) after its spin before it sleeps. */
#ifndef LE_BARRIER_POLL_NS
#define LE_BARRIER_POLL_NS 1000000.0
#endif

/* le_adapt: the share of a compute's time thread 0 may wait for threads
 * that are not running before computes fall back to one thread, how many
 * computes such a fallback lasts (the first, and at most), and how many
 * node arrays' times it keeps. */
#ifndef LE_SLOW_SHARE
#define LE_SLOW_SHARE 0.5
#endif
#define LE_SOLO_MIN 8
#define LE_SOLO_MAX 256
#define LE_SOLO_NS 250e6
#define LE_AD_PROGRAMS 4

/* le_next_chunk's counter of one node, alone on its cache line. */
typedef struct le_chunk {
  atomic_llong v;
  char pad[64 - sizeof(atomic_llong)];
} le_chunk;

/* The counter of the node this thread is computing (nodes overlap without barriers). */
static __thread le_chunk *le_cur_chunk;

typedef struct le_worker {
  le_ctx *ctx;
  int ith;
  pthread_t tid;
  le_cpus cpus; /* where it may run (cpus.c) */
} le_worker;

struct le_ctx {
  int n_threads;
  int nth_run;      /* threads this compute runs on: n_threads, or 1 (see le_adapt) */
  int solo_left;    /* computes still to run on one thread */
  int solo_backoff; /* how many the last fallback to one thread lasted */
  int force_solo;   /* LE_SOLO=1: every compute as after a fallback (tests) */
  int64_t n_solo;   /* computes run on one thread (profile) */
  double solo_ns;   /* wall time of the last compute run on one thread */
  /* Node arrays le_adapt timed lately (a decode loop runs the same one, a
   * prompt's comes between) and their average wall time on one thread and
   * on all (0: none yet). */
  struct {
    const le_node *nodes;
    int32_t n;
    double solo, all;
  } ad[LE_AD_PROGRAMS];
  int ad_cur, ad_next;
  le_worker *workers;
  const le_node *nodes;
  int n_nodes;
  void *wdata;
  size_t wsize;
  /* The barrier's counter (written by every arriving thread), the
   * generation the waiting threads spin on, and the flags every chunk reads
   * each on a cache line of their own (at least 64 bytes apart whatever the
   * allocation's alignment), as ggml keeps n_barrier and n_barrier_passed:
   * a waiter's spinning reads would otherwise contend with each arrival's
   * write, and the chunk loop's reads of `cancel` with both. */
  atomic_int job_gen;
  atomic_int stop;
  atomic_int cpu0; /* the CPU thread 0 started this compute on (-1: unknown) */
  char pad0[64];
  atomic_int bar_count;
  char pad1[64];
  atomic_int bar_gen;
  atomic_int sleepers;
  char pad2[64];
  atomic_int busy;
  atomic_int failed;
  atomic_int cancel;   /* set by le_ctx_cancel; read by every thread */
  atomic_int stopping; /* the barrier's decision to stop (see le_sync_stop) */
  char pad3[64];
  le_chunk *chunks;    /* per node, zeroed before each compute */
  uint8_t *sync;       /* per node: 1 = barrier before it */
  int32_t cap_nodes;   /* entries of chunks and sync */
  int64_t n_barriers;  /* barriers between nodes (profile) */
  int64_t n_computes;
  atomic_llong n_sleeps; /* waits that ended in a sleep (profile) */
  double setup_ns;       /* node checks and barrier plan (profile) */
  char fail_msg[256];
  char error[512]; /* le_ctx_error */
  /* LE_PROFILE=1: thread 0's wall time per op (node + its barrier), printed at free */
  int profile;
  /* per op, and one more slot (PROF_ATTN) for MUL_MAT over a 3-D src0:
   * attention's KQ and KQV, apart from the weights' products */
  double prof_ns[LE_OP_COUNT + 1];
  long prof_n[LE_OP_COUNT + 1];
  double prof_bytes[LE_OP_COUNT + 1]; /* src0 bytes, for a bandwidth figure */
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

static double le_now_ns(void);

/* Time this thread spent waiting past the spin (see le_wait_change_poll):
 * waits for a thread that is not running. Read by thread 0 (le_adapt). */
static __thread double le_slow_ns;

/* Wait until *v != old: spin, then yield the CPU in a loop until poll_ns
 * have passed, then sleep. Spinning answers fastest; yielding lets a thread
 * we wait for run when it was preempted on this CPU (a loaded machine) and
 * still answers within a microsecond or so on an idle one; sleeping costs a
 * wake-up through the kernel (tens of microseconds, more in a VM, where it
 * halts the virtual CPU), which a barrier sleeping on one side and waking
 * late on the other can turn into a chain of such waits. Correct against
 * le_notify because both sides use seq_cst on (v, sleepers) and the sleeper
 * rechecks v under the mutex before waiting. */
static void le_wait_change_poll(le_ctx *ctx, atomic_int *v, int old, double poll_ns) {
  for (int i = 0; i < LE_SPIN; i++) {
    if (atomic_load(v) != old) return;
    le_cpu_relax();
  }
  const double t0 = le_now_ns();
  if (poll_ns > 0) {
    do {
      for (int i = 0; i < 16; i++) {
        if (atomic_load(v) != old) {
          le_slow_ns += le_now_ns() - t0;
          return;
        }
        sched_yield();
      }
    } while (le_now_ns() - t0 < poll_ns);
  }
  if (ctx->profile) atomic_fetch_add_explicit(&ctx->n_sleeps, 1, memory_order_relaxed);
  pthread_mutex_lock(&ctx->mu);
  atomic_fetch_add(&ctx->sleepers, 1);
  while (atomic_load(v) == old) pthread_cond_wait(&ctx->cv, &ctx->mu);
  atomic_fetch_sub(&ctx->sleepers, 1);
  pthread_mutex_unlock(&ctx->mu);
  le_slow_ns += le_now_ns() - t0;
}

static void le_wait_change(le_ctx *ctx, atomic_int *v, int old) {
  le_wait_change_poll(ctx, v, old, LE_BARRIER_POLL_NS);
}

static void le_notify(le_ctx *ctx) {
  if (atomic_load(&ctx->sleepers) > 0) {
    pthread_mutex_lock(&ctx->mu);
    pthread_cond_broadcast(&ctx->cv);
    pthread_mutex_unlock(&ctx->mu);
  }
}

void le_barrier(le_ctx *ctx) {
  const int nth = ctx->nth_run;
  if (nth == 1) return;
  const int gen = atomic_load(&ctx->bar_gen);
  if (atomic_fetch_add(&ctx->bar_count, 1) == nth - 1) {
    atomic_store(&ctx->bar_count, 0);
    atomic_fetch_add(&ctx->bar_gen, 1);
    le_notify(ctx);
  } else {
    le_wait_change(ctx, &ctx->bar_gen, gen);
  }
}

/* A barrier that also says whether the compute is cancelled: the thread that
 * completes it samples the flag and publishes the decision before releasing
 * the others, so all threads return the same answer. The decision cannot be
 * overwritten before a slow thread reads it, since the next barrier cannot
 * complete until that thread arrives there. */
static int le_sync_stop(le_ctx *ctx) {
  const int nth = ctx->nth_run;
  if (nth == 1) return atomic_load_explicit(&ctx->cancel, memory_order_relaxed);
  const int gen = atomic_load(&ctx->bar_gen);
  if (atomic_fetch_add(&ctx->bar_count, 1) == nth - 1) {
    if (atomic_load(&ctx->cancel)) atomic_store(&ctx->stopping, 1);
    atomic_store(&ctx->bar_count, 0);
    atomic_fetch_add(&ctx->bar_gen, 1);
    le_notify(ctx);
  } else {
    le_wait_change(ctx, &ctx->bar_gen, gen);
  }
  return atomic_load(&ctx->stopping);
}

int64_t le_next_chunk(le_ctx *ctx) {
  /* Cancelled: a count past any node's chunks ends the caller's loop. The
   * node's output is then incomplete, which is fine: the compute fails. */
  if (ctx && atomic_load_explicit(&ctx->cancel, memory_order_relaxed)) return INT64_MAX / 2;
  return atomic_fetch_add_explicit(&le_cur_chunk->v, 1, memory_order_relaxed);
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

#define PROF_ATTN LE_OP_COUNT

static void le_prof_add(le_ctx *ctx, int i, double ns, int count) {
  int op = ctx->nodes[i].op;
  if (op < 0 || op >= LE_OP_COUNT) return;
  if (op == LE_OP_MUL_MAT && (ctx->nodes[i].src[0].ne[2] > 1 || ctx->nodes[i].src[0].ne[3] > 1))
    op = PROF_ATTN;
  ctx->prof_ns[op] += ns;
  if (!count) return;
  ctx->prof_n[op]++;
  const le_tensor *s0 = &ctx->nodes[i].src[0];
  ctx->prof_bytes[op] += (double)s0->nb[1] * (double)(s0->ne[1] * s0->ne[2] * s0->ne[3]);
}

static void le_run_nodes(le_ctx *ctx, int ith) {
  le_compute_params p = {
      .ith = ith, .nth = ctx->nth_run, .ctx = ctx, .wdata = ctx->wdata, .wsize = ctx->wsize};
  le_compute_params solo = p;
  solo.nth = 1;
  /* Profile: each op is charged its own time and the wait for it to finish
   * on every thread (the next barrier). */
  const int prof = ctx->profile && ith == 0;
  for (int i = 0; i < ctx->n_nodes; i++) {
    const uint8_t sync = ctx->sync[i];
    if (i > 0 && (sync & LE_SYNC_BEFORE)) {
      const double t0 = prof ? le_now_ns() : 0;
      const int stop = le_sync_stop(ctx);
      if (prof) le_prof_add(ctx, i - 1, le_now_ns() - t0, 0);
      if (stop) break; /* every thread breaks here, before node i */
    } else if (ctx->nth_run == 1 && atomic_load_explicit(&ctx->cancel, memory_order_relaxed)) {
      break; /* one thread: no barriers, so check before every node */
    }
    if ((sync & LE_SYNC_SOLO) && ith != 0) continue;
    const double t0 = prof ? le_now_ns() : 0;
    le_cur_chunk = &ctx->chunks[i];
    le_node_compute(&ctx->nodes[i], sync & LE_SYNC_SOLO ? &solo : &p);
    if (prof) le_prof_add(ctx, i, le_now_ns() - t0, 1);
  }
  const double t0 = prof ? le_now_ns() : 0;
  le_barrier(ctx);
  if (prof && ctx->n_nodes) le_prof_add(ctx, ctx->n_nodes - 1, le_now_ns() - t0, 0);
}

static void *le_worker_main(void *arg) {
  le_worker *w = arg;
  le_ctx *ctx = w->ctx;
  int seen = 0;
#if defined(__linux__) && !defined(__wasm__)
  /* A name of our own: tools and tests tell the pools' workers from the
   * runtime's threads (which would otherwise share the main thread's name). */
  pthread_setname_np(pthread_self(), "le-worker");
#endif
  le_cpus_init(&w->cpus);
  for (;;) {
    le_wait_change_poll(ctx, &ctx->job_gen, seen, LE_POLL_NS);
    seen = atomic_load(&ctx->job_gen);
    if (atomic_load(&ctx->stop)) break;
    /* off the CPU the caller started on (cpus.c) */
    le_cpus_leave(&w->cpus, atomic_load_explicit(&ctx->cpu0, memory_order_relaxed), ctx->n_threads);
    le_run_nodes(ctx, w->ith);
    le_cpus_back(&w->cpus);
  }
  return NULL;
}

le_ctx *le_ctx_new(int32_t n_threads) {
  if (n_threads < 1 || n_threads > LE_MAX_THREADS) {
    le_set_error("le_ctx_new: thread count %d outside 1..%d", n_threads, LE_MAX_THREADS);
    return NULL;
  }
#if defined(LE_NO_THREADS)
  if (n_threads > 1) {
    le_set_error("le_ctx_new: %d threads asked, this build runs one", n_threads);
    return NULL;
  }
#endif
  le_ctx *ctx = calloc(1, sizeof *ctx);
  if (!ctx) {
    le_set_error("le_ctx_new: out of memory");
    return NULL;
  }
  ctx->n_threads = n_threads;
  ctx->nth_run = n_threads;
  atomic_store(&ctx->cpu0, -1);
  const char *prof = getenv("LE_PROFILE");
  const char *solo = getenv("LE_SOLO");
  ctx->force_solo = solo && solo[0] == '1';
  ctx->profile = prof && *prof && *prof != '0' ? atoi(prof) > 1 ? 2 : 1 : 0;
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
    if (ctx->n_computes)
      fprintf(stderr,
              "le_profile: %.1f barriers between nodes per compute (%lld computes), "
              "%.2f sleeps and %.1f us of checks and barrier planning per compute, "
              "%lld computes on thread 0 alone (le_adapt, LE_SOLO)\n",
              (double)ctx->n_barriers / (double)ctx->n_computes, (long long)ctx->n_computes,
              (double)atomic_load(&ctx->n_sleeps) / (double)ctx->n_computes,
              ctx->setup_ns / 1e3 / (double)ctx->n_computes, (long long)ctx->n_solo);
    double tot = 0;
    for (int i = 0; i <= PROF_ATTN; i++) tot += ctx->prof_ns[i];
    for (int i = 0; i <= PROF_ATTN; i++)
      if (ctx->prof_n[i])
        fprintf(stderr, "le_profile op %2d%s: %10.3f ms %5.1f%% (%ld nodes, src0 %.2f GB/s)\n",
                i == PROF_ATTN ? LE_OP_MUL_MAT : i, i == PROF_ATTN ? " (3-D src0)" : "",
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
  le_free(ctx->wdata);
  le_free(ctx->chunks);
  free(ctx->sync);
  free(ctx);
}

int32_t le_ctx_threads(const le_ctx *ctx) { return ctx ? ctx->n_threads : 0; }

void le_ctx_cancel(le_ctx *ctx, int32_t on) {
  if (ctx) atomic_store(&ctx->cancel, on ? 1 : 0);
}

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

/* After a compute on all threads that took `wall` ns: when thread 0 spent
 * a good part of it waiting past the spin for threads that were not
 * running (other processes hold the CPUs), the next computes run on thread
 * 0 alone, as with one thread: every node gives the same values on any
 * thread count (those that would not keep all threads, see fixed_nth), and
 * on a loaded machine one thread that runs beats two that take turns at
 * every barrier, unless the same node array has run faster on all threads
 * than on one (moving averages). Each fallback in a row lasts twice as long
 * as the last, from LE_SOLO_MIN computes up to LE_SOLO_MAX but no more than
 * about LE_SOLO_NS of them; a compute without such waits ends the series. */
static void le_adapt(le_ctx *ctx, double wall) {
  /* All threads still beat one on the same nodes, waits and all (a
   * moderately busy machine): keep them. */
  const double solo = ctx->ad[ctx->ad_cur].solo, all = ctx->ad[ctx->ad_cur].all;
  if (solo > 0 && all > 0 && all < solo) {
    ctx->solo_backoff = 0;
    return;
  }
  if (le_slow_ns > LE_SLOW_SHARE * wall) {
    const int b = ctx->solo_backoff ? 2 * ctx->solo_backoff : LE_SOLO_MIN;
    ctx->solo_backoff = b > LE_SOLO_MAX ? LE_SOLO_MAX : b;
    /* at most ~LE_SOLO_NS of computes like the last one run alone (this
     * one's time on a busy machine says little of that): a big model's
     * steps probe all threads again soon after the machine becomes idle */
    const double est = ctx->solo_ns > 0 ? ctx->solo_ns : wall;
    const double cap = LE_SOLO_NS / (est > 1 ? est : 1);
    ctx->solo_left = cap < ctx->solo_backoff ? (cap < 1 ? 1 : (int)cap) : ctx->solo_backoff;
  } else if (le_slow_ns < 0.25 * LE_SLOW_SHARE * wall) {
    ctx->solo_backoff = 0;
  }
}

static int32_t le_graph_compute_impl(le_ctx *ctx, const le_node *nodes, int32_t n_nodes) {
  if (!ctx || (!nodes && n_nodes > 0) || n_nodes < 0) {
    le_set_error("le_graph_compute: null context or node array");
    return -1;
  }
  const double t_setup = ctx->profile ? le_now_ns() : 0;
  int expected = 0;
  if (!atomic_compare_exchange_strong(&ctx->busy, &expected, 1)) {
    le_set_error("le_graph_compute: context is already computing");
    return -2;
  }
  size_t need = 0;
  int fixed_nth = 0; /* a node whose values depend on the thread count */
  for (int i = 0; i < n_nodes; i++) {
    fixed_nth |= nodes[i].op == LE_OP_FLASH_ATTN_EXT &&
                 le_flash_attn_nth_bound(&nodes[i], ctx->n_threads);
    if (le_node_check(&nodes[i]) != 0) {
      char msg[400];
      snprintf(msg, sizeof msg, "%s", le_last_error());
      le_set_error("node %d: %s", i, msg);
      atomic_store(&ctx->busy, 0);
      return -3;
    }
    size_t w = le_node_wsize(&nodes[i], ctx->n_threads);
    const size_t priv = nodes[i].op == LE_OP_MUL_MAT ? le_mm_private_bytes(&nodes[i], ctx->n_threads) : 0;
    if (priv * (size_t)ctx->n_threads > w) w = priv * (size_t)ctx->n_threads;
    if (le_node_wsize(&nodes[i], 1) > w) w = le_node_wsize(&nodes[i], 1); /* run solo */
    if (w > need) need = w;
  }
  if (n_nodes > ctx->cap_nodes) {
    const int32_t cap = n_nodes > 2 * ctx->cap_nodes ? n_nodes : 2 * ctx->cap_nodes;
    le_free(ctx->chunks);
    free(ctx->sync);
    ctx->cap_nodes = 0;
    ctx->chunks = le_alloc((size_t)cap * sizeof(le_chunk), 64);
    ctx->sync = malloc((size_t)cap);
    if (!ctx->chunks || !ctx->sync) {
      le_free(ctx->chunks);
      free(ctx->sync);
      ctx->chunks = NULL;
      ctx->sync = NULL;
      le_set_error("le_graph_compute: out of memory");
      atomic_store(&ctx->busy, 0);
      return -4;
    }
    ctx->cap_nodes = cap;
  }
  if (n_nodes > 0) memset(ctx->chunks, 0, (size_t)n_nodes * sizeof(le_chunk));
  const int adapt = ctx->n_threads > 1 && !fixed_nth;
  ctx->nth_run = adapt && (ctx->solo_left > 0 || ctx->force_solo) ? 1 : ctx->n_threads;
  if (ctx->nth_run == 1 && ctx->n_threads > 1) {
    if (ctx->solo_left > 0) ctx->solo_left--;
    ctx->n_solo++;
  }
  le_plan_barriers(ctx->sync, nodes, n_nodes, ctx->nth_run);
  if (ctx->profile) ctx->setup_ns += le_now_ns() - t_setup;
  if (ctx->profile > 1 && ctx->n_computes == 1) { /* the barrier plan: "|" barrier, "s" solo */
    for (int i = 0; i < n_nodes; i++)
      fprintf(stderr, "%s%s%d", ctx->sync[i] & LE_SYNC_BEFORE ? " |" : " ",
              ctx->sync[i] & LE_SYNC_SOLO ? "s" : "", nodes[i].op);
    fprintf(stderr, "\n");
  }
  if (ctx->profile) {
    ctx->n_computes++;
    for (int i = 1; i < n_nodes; i++) ctx->n_barriers += ctx->sync[i] & LE_SYNC_BEFORE;
  }
  if (need > ctx->wsize) {
    le_free(ctx->wdata);
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
  atomic_store(&ctx->failed, 0);
  atomic_store(&ctx->stopping, 0);
  /* A compute that has to wake a sleeping worker first waits for the
   * wake-up (slow in a VM even on an idle machine): it says nothing of how
   * busy the machine is, so le_adapt does not judge it. */
  const int judge = adapt && ctx->nth_run > 1 && atomic_load(&ctx->sleepers) == 0;
  const int solo_run = ctx->nth_run == 1 && ctx->n_threads > 1;
  const double t_run = judge || solo_run ? le_now_ns() : 0;
  le_slow_ns = 0;
  if (ctx->nth_run > 1) {
    atomic_store_explicit(&ctx->cpu0, le_cpu_now(), memory_order_relaxed); /* le_cpus_leave */
    atomic_fetch_add(&ctx->job_gen, 1);
    le_notify(ctx);
  }
  le_run_nodes(ctx, 0); /* ends with a barrier: every worker is done */
  ctx->nodes = NULL;
  if (t_run > 0) {
    const double wall = le_now_ns() - t_run;
    int k = 0;
    while (k < LE_AD_PROGRAMS && (ctx->ad[k].nodes != nodes || ctx->ad[k].n != n_nodes)) k++;
    if (k == LE_AD_PROGRAMS) { /* a new one replaces the oldest */
      k = ctx->ad_next;
      ctx->ad_next = (k + 1) % LE_AD_PROGRAMS;
      ctx->ad[k].nodes = nodes;
      ctx->ad[k].n = n_nodes;
      ctx->ad[k].solo = ctx->ad[k].all = 0;
    }
    ctx->ad_cur = k;
    double *avg = solo_run ? &ctx->ad[k].solo : &ctx->ad[k].all;
    *avg = *avg > 0 ? 0.75 * *avg + 0.25 * wall : wall;
    if (solo_run) ctx->solo_ns = wall;
    else le_adapt(ctx, wall);
  }
  int rc = 0;
  if (atomic_load(&ctx->cancel)) {
    /* Also when the flag came after the last node: the caller asked to stop,
     * and a cancelled compute's outputs are never read. */
    le_set_error("le_graph_compute: cancelled");
    rc = LE_CANCELLED;
  } else if (atomic_load(&ctx->failed)) {
    le_set_error("%s", ctx->fail_msg);
    rc = -5;
  }
  atomic_store(&ctx->busy, 0);
  return rc;
}
