/* Which nodes of a command buffer need a barrier before them, and which
 * run on thread 0 alone (le_plan_barriers, for threads.c): a node may start
 * while the ones since the last barrier still run when it touches none of
 * the memory they write, writes none they read, and their scratch use
 * cannot collide. */
#include "le_internal.h"
#include "le_sched.h"

#include <string.h>

/* Most nodes that may run between two barriers (bounds le_plan_barriers' work). */
#define LE_GROUP_MAX 8
/* Nodes at most this big run on thread 0 alone (see le_solo): elements of
 * dst, or multiply-adds of a mul_mat. Waking a second thread and waiting for
 * it costs more than the work. */
#ifndef LE_SOLO_ELEMS
#define LE_SOLO_ELEMS 4096
#endif
#ifndef LE_SOLO_MACS
#define LE_SOLO_MACS 32768
#endif

typedef struct le_span {
  uint64_t lo, hi; /* bytes [lo, hi); empty when lo == hi */
} le_span;

static le_span le_span_of(const le_tensor *t) {
  le_span s = {t->data, t->data};
  if (!t->data) return s;
  const le_type_traits *tr = le_traits(t->type);
  const int64_t ts = tr ? (int64_t)tr->size : 8, bl = tr ? tr->blck : 1; /* unknown: wide */
  int64_t ext = ts + (t->ne[0] / bl - 1) * t->nb[0];
  for (int i = 0; i < LE_MAX_DIMS; i++) {
    if (t->ne[i] <= 0) return s;
    if (i > 0) ext += (t->ne[i] - 1) * t->nb[i];
  }
  s.hi = s.lo + (uint64_t)ext;
  return s;
}

static int le_overlap(le_span a, le_span b) {
  return a.lo < a.hi && b.lo < b.hi && a.lo < b.hi && b.lo < a.hi;
}

/* How a node uses the context scratch, as far as other threads can see. */
typedef struct le_scratch {
  enum { LE_SCR_SHARED, LE_SCR_PRIVATE, LE_SCR_SOLO } kind;
  /* SHARED: the whole scratch, every thread. PRIVATE: thread ith only
   * [ith * bytes, (ith + 1) * bytes). SOLO: thread 0 only, [0, bytes). */
  int64_t bytes; /* 0: no scratch */
} le_scratch;

/* Whether two nodes' scratch use can overlap in time without touching the
 * same bytes from different threads. */
static int le_scratch_ok(le_scratch a, le_scratch b) {
  if (!a.bytes || !b.bytes) return 1;
  if (a.kind == LE_SCR_SHARED || b.kind == LE_SCR_SHARED) return 0;
  if (a.kind == b.kind) return a.kind == LE_SCR_SOLO || a.bytes == b.bytes;
  /* thread 0's solo bytes against the private parts of threads >= 1 */
  return a.kind == LE_SCR_SOLO ? a.bytes <= b.bytes : b.bytes <= a.bytes;
}

static int le_solo(const le_node *n);

/* What le_plan_barriers needs of one node, computed once per node (not once
 * per pair it is compared in): its memory spans, scratch use, and flags. */
typedef struct le_node_use {
  le_span dst, src[LE_MAX_SRC];
  int n_src;
  le_scratch scr;
  uint8_t solo, fa_split;
} le_node_use;

static void le_use_of(const le_node *n, int nth, le_node_use *u) {
  u->dst = le_span_of(&n->dst);
  u->n_src = n->n_src < LE_MAX_SRC ? n->n_src : LE_MAX_SRC;
  for (int k = 0; k < u->n_src; k++) u->src[k] = le_span_of(&n->src[k]);
  /* split-KV flash attention shares its partial sums across threads */
  u->fa_split = n->op == LE_OP_FLASH_ATTN_EXT && le_flash_attn_split(n);
  u->solo = (uint8_t)le_solo(n);
  /* as with one thread; mul_mat's conversion needs less than its wsize bound */
  u->scr = (le_scratch){LE_SCR_SOLO, (int64_t)(n->op == LE_OP_MUL_MAT ? le_mm_src1_bytes(n)
                                                                        : le_node_wsize(n, 1))};
  if (!u->solo) {
    const size_t priv = n->op == LE_OP_MUL_MAT ? le_mm_private_bytes(n, nth) : 0;
    u->scr = priv ? (le_scratch){LE_SCR_PRIVATE, (int64_t)priv}
                  : (le_scratch){LE_SCR_SHARED, (int64_t)le_node_wsize(n, nth)};
  }
}

/* Whether node j may run concurrently with node g (which comes before it):
 * j reads nothing g writes, writes nothing g reads or writes, and their
 * scratch use cannot collide. */
static int le_independent(const le_node_use *g, const le_node_use *j) {
  if (!le_scratch_ok(g->scr, j->scr) || g->fa_split || j->fa_split) return 0;
  if (le_overlap(g->dst, j->dst)) return 0;
  for (int k = 0; k < g->n_src; k++)
    if (le_overlap(j->dst, g->src[k])) return 0;
  for (int k = 0; k < j->n_src; k++)
    if (le_overlap(g->dst, j->src[k])) return 0;
  return 1;
}

/* Whether a node is so small that thread 0 computes it alone (as with one
 * thread: every op gives the same values for any thread count) while the
 * others skip it. A run of such nodes then needs no barriers inside. */
static int le_solo(const le_node *n) {
  const le_tensor *d = &n->dst;
  const int64_t nd = d->ne[0] * d->ne[1] * d->ne[2] * d->ne[3];
  if (n->op == LE_OP_MUL_MAT) return nd * n->src[0].ne[0] <= LE_SOLO_MACS;
  /* ggml's split-KV flash attention cuts the cache by thread count; the
   * others are sized by their multiply-adds, rows times cells times both
   * head sizes (by dst alone, a decode step's attention over 511 cells of
   * TinyLlama's 32 heads, 2 M multiply-adds, ran on one thread) */
  if (n->op == LE_OP_FLASH_ATTN_EXT)
    return !le_flash_attn_split(n) &&
           (nd / d->ne[0]) * n->src[1].ne[1] * (n->src[1].ne[0] + d->ne[0]) <= LE_SOLO_MACS;
  return nd <= LE_SOLO_ELEMS;
}

/* Fill sync: a barrier before node i unless, for every node since the
 * last barrier, the two are independent or both run on thread 0 alone (one
 * thread, program order). With one thread nothing runs concurrently. */
void le_plan_barriers(uint8_t *sync, const le_node *nodes, int32_t n_nodes, int nth) {
  le_node_use use[LE_GROUP_MAX];
  int ng = 0;
  if (nth == 1) { /* nothing runs concurrently: every node "after a barrier", none solo */
    if (n_nodes > 0) memset(sync, LE_SYNC_BEFORE, (size_t)n_nodes);
    return;
  }
  for (int i = 0; i < n_nodes; i++) {
    le_node_use u;
    le_use_of(&nodes[i], nth, &u);
    int ok = i > 0 && ng < LE_GROUP_MAX;
    for (int k = 0; ok && k < ng; k++)
      ok = (use[k].solo && u.solo) || /* thread 0 alone, in order */
           le_independent(&use[k], &u);
    sync[i] = (uint8_t)((ok ? 0 : LE_SYNC_BEFORE) | (u.solo ? LE_SYNC_SOLO : 0));
    if (!ok) ng = 0;
    use[ng++] = u;
  }
}
