// The fiber scheduler of emu.h and stand-ins for the CUDA runtime calls that
// runtime.cu makes (host memory for device memory, memcpy for copies, one
// device named "host emulation", a stream that is always idle).
#include "emu.h"

#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

#include <vector>

// Switching threads: on x86-64 a register swap (callee-saved registers and
// the stack pointer; ucontext's swapcontext makes a signal-mask system call
// per switch, which made the emulation a hundred times slower), elsewhere
// ucontext.
#if defined(__x86_64__)
extern "C" void lec_emu_switch(void **save, void *to);
asm(R"(
  .text
  .globl lec_emu_switch
  .hidden lec_emu_switch
  .type lec_emu_switch,@function
lec_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size lec_emu_switch, .-lec_emu_switch
)");
#define EMU_FAST_SWITCH 1
#endif

namespace emu {

dim3 g_block, g_bdim, g_gdim;

namespace {
enum State { RUN, SYNC, SHFL, DONE };
struct Fiber {
  ucontext_t ctx;
  void *sp;
  uint3 tid;
  int warp, lane;
  State state;
  unsigned shfl_count;
};
const size_t STACK = 64 * 1024;
ucontext_t sched;
void *sched_sp;
std::vector<Fiber> fibers;
std::vector<char> stacks;
std::vector<uint64_t> slots;  // [warp][parity][lane]
std::vector<char> shared_mem;
Fiber *cur = nullptr;
const std::function<void()> *body = nullptr;

void to_scheduler() {
#ifdef EMU_FAST_SWITCH
  lec_emu_switch(&cur->sp, sched_sp);
#else
  swapcontext(&cur->ctx, &sched);
#endif
}

void trampoline() {
  (*body)();
  cur->state = DONE;
  to_scheduler();
  __builtin_unreachable();
}

void yield(State s) {
  cur->state = s;
  to_scheduler();
}

void start(Fiber &f, char *stack) {
#ifdef EMU_FAST_SWITCH
  // The first switch pops six registers, then returns into trampoline with
  // the stack aligned as after a call.
  uintptr_t top = ((uintptr_t)(stack + STACK)) & ~(uintptr_t)15;
  void **sp = (void **)(top - 64);
  for (int i = 0; i < 6; i++) sp[i] = nullptr;
  sp[6] = (void *)&trampoline;
  sp[7] = nullptr;
  f.sp = sp;
#else
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = stack;
  f.ctx.uc_stack.ss_size = STACK;
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, trampoline, 0);
#endif
}

void enter(Fiber &f) {
  cur = &f;
#ifdef EMU_FAST_SWITCH
  lec_emu_switch(&sched_sp, f.sp);
#else
  swapcontext(&sched, &f.ctx);
#endif
}

void run_block(unsigned n) {
  for (unsigned i = 0; i < n; i++) {
    Fiber &f = fibers[i];
    start(f, &stacks[i * STACK]);
    f.state = RUN;
    f.shfl_count = 0;
  }
  const unsigned nwarps = (n + 31) / 32;
  // Odd blocks run their threads last to first: a read of shared memory that
  // lacks its barrier then sees stale data in one order or the other.
  const bool reverse = ((g_block.x + g_block.y + g_block.z) & 1) != 0;
  for (;;) {
    for (unsigned j = 0; j < n; j++) {
      const unsigned i = reverse ? n - 1 - j : j;
      if (fibers[i].state != RUN) continue;
      enter(fibers[i]);
    }
    bool all_done = true, any_sync = false, all_sync = true;
    for (unsigned i = 0; i < n; i++) {
      const State s = fibers[i].state;
      if (s != DONE) all_done = false;
      if (s == SYNC) any_sync = true;
      if (s != DONE && s != SYNC) all_sync = false;
    }
    if (all_done) return;
    bool released = false;
    if (any_sync && all_sync) {
      for (unsigned i = 0; i < n; i++) {
        if (fibers[i].state == SYNC) fibers[i].state = RUN;
      }
      released = true;
    }
    for (unsigned w = 0; w < nwarps; w++) {
      bool any = false, all = true;
      for (unsigned i = 32 * w; i < n && i < 32 * (w + 1); i++) {
        if (fibers[i].state == SHFL) any = true;
        else if (fibers[i].state != DONE) all = false;
      }
      if (any && all) {
        for (unsigned i = 32 * w; i < n && i < 32 * (w + 1); i++) {
          if (fibers[i].state == SHFL) fibers[i].state = RUN;
        }
        released = true;
      }
    }
    if (!released) {
      fprintf(stderr, "emu: block (%u,%u,%u) deadlocked at a barrier\n", g_block.x, g_block.y,
              g_block.z);
      abort();
    }
  }
}
}  // namespace

const uint3 &tid() { return cur->tid; }
void sync_block() { yield(SYNC); }
void *dyn_shared() { return shared_mem.data(); }

void shfl_exchange(uint64_t v, int o, uint64_t *out) {
  Fiber *f = cur;
  const unsigned par = f->shfl_count++ & 1;
  uint64_t *s = &slots[(f->warp * 2 + par) * 32];
  s[f->lane] = v;
  yield(SHFL);
  *out = s[(f->lane ^ o) & 31];
}

void run_grid(dim3 grid, dim3 block, size_t shmem, const std::function<void()> &fn) {
  const unsigned n = block.x * block.y * block.z;
  if (fibers.size() < n) {
    fibers.resize(n);
    stacks.resize(n * STACK);
  }
  slots.assign(((n + 31) / 32) * 64, 0);
  shared_mem.assign(shmem + 16, 0);
  for (unsigned i = 0; i < n; i++) {
    fibers[i].tid = make_uint3(i % block.x, (i / block.x) % block.y, i / (block.x * block.y));
    fibers[i].warp = i / 32;
    fibers[i].lane = i % 32;
  }
  body = &fn;
  g_bdim = block;
  g_gdim = grid;
  for (unsigned z = 0; z < grid.z; z++) {
    for (unsigned y = 0; y < grid.y; y++) {
      for (unsigned x = 0; x < grid.x; x++) {
        g_block = dim3(x, y, z);
        run_block(n);
      }
    }
  }
}
}  // namespace emu

// ---- the CUDA runtime calls runtime.cu makes -------------------------------
extern "C" {
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char *cudaGetErrorName(cudaError_t e) { return e == cudaSuccess ? "cudaSuccess" : "cudaErrorEmu"; }
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated failure"; }
cudaError_t cudaRuntimeGetVersion(int *v) { return *v = 13000, cudaSuccess; }
cudaError_t cudaDriverGetVersion(int *v) { return *v = 0, cudaSuccess; }
cudaError_t cudaGetDeviceCount(int *n) { return *n = 1, cudaSuccess; }
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int) {
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "host emulation");
  p->totalGlobalMem = (size_t)1 << 32;
  p->major = 9;
  p->multiProcessorCount = 1;
  p->warpSize = 32;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *f, size_t *t) { return *f = *t = (size_t)1 << 32, cudaSuccess; }
cudaError_t cudaMalloc(void **p, size_t n) {
  *p = aligned_alloc(256, (n + 255) / 256 * 256);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void *p) { return free(p), cudaSuccess; }
cudaError_t cudaMallocHost(void **p, size_t n) { return cudaMalloc(p, n); }
cudaError_t cudaFreeHost(void *p) { return cudaFree(p); }
cudaError_t cudaMemset(void *p, int v, size_t n) { return memset(p, v, n), cudaSuccess; }
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind) {
  return memmove(d, s, n), cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int) {
  *s = (cudaStream_t)(uintptr_t)1;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
}
