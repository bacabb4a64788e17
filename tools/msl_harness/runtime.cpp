// The harness's runtime: runs a compiled shader's threadgroups on the CPU.
//
// Each threadgroup's threads are cooperative fibers (ucontext) on one worker thread; a
// fiber runs until it reaches a threadgroup_barrier or a simd_* collective, then the
// next fiber runs. Switching only there makes every run deterministic for a given
// thread order, and a missing barrier shows up as a wrong result: a thread runs ahead
// past where the barrier should have stopped it and overwrites shared data the others
// have not read yet. `order` (forward, reverse, seeded shuffle) changes which thread
// runs ahead. Threadgroups run in parallel on std::threads, one at a time per thread.
//
// A dispatch aborts, returning the message, when threads do not all meet: a barrier
// that some threads skip (they returned, or wait at another barrier), or lanes of one
// SIMD-group in collectives at different call sites. Locations are the shader's own
// (std::source_location, mapped to the .metal file by msl.py's #line directives).
#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "msl_glue.h"

extern "C" const msl_rt::Kernel msl_kernels[];
extern "C" const int msl_num_kernels;

namespace msl_rt {
namespace {

constexpr size_t kStack = 64 * 1024;

enum class St { kRun, kBarrier, kSimd, kDone, kFailed };

struct Loc {
  const char* file = "";
  unsigned line = 0, column = 0;
  const char* what = "";
  bool operator==(const Loc& o) const {
    return line == o.line && column == o.column && std::strcmp(file, o.file) == 0;
  }
};

std::string str(const Loc& l) {
  return std::string(l.file) + ":" + std::to_string(l.line) + ":" + std::to_string(l.column);
}

struct Fiber {
  ucontext_t ctx;
  St st = St::kRun;
  Loc at;          // where it waits
  unsigned buf = 0;  // which simd slot buffer it wrote
  ThreadIds ids;
};

struct SimdGroup {
  alignas(16) unsigned char slots[2][32][16];
  unsigned active[2] = {0, 0};
  unsigned gen = 0;
};

struct Dispatch {
  const Kernel* k;
  void* const* buffers;
  uint3 groups, tg, grid;  // grid: threads (non-uniform edges when not a multiple)
  int order;
  unsigned seed;
  std::atomic<unsigned> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::string error;
  void fail(const std::string& m) {
    std::lock_guard<std::mutex> g(mu);
    if (!failed.exchange(true)) error = m;
  }
};

// One worker's state: the threadgroup it is running.
struct Group {
  Dispatch* d;
  std::vector<Fiber> fibers;
  std::vector<SimdGroup> simds;
  std::unique_ptr<char[]> stacks;
  size_t stacks_n = 0;
  ucontext_t sched;
  Fiber* cur = nullptr;
  std::string tg_name;
  std::string error;  // set by a fiber that failed
  std::vector<void*> poisoned;  // threadgroup storage already filled this run
};

thread_local Group* g_group = nullptr;

void fiber_main() {
  Group& g = *g_group;
  Fiber& f = *g.cur;
  g.d->k->invoke(f.ids, g.d->buffers);
  f.st = St::kDone;
  // uc_link returns to the scheduler.
}

void block(St st, const Loc& at) {
  Group& g = *g_group;
  Fiber& f = *g.cur;
  f.st = st;
  f.at = at;
  swapcontext(&f.ctx, &g.sched);
}

Loc loc_of(const std::source_location& l, const char* what) {
  return {l.file_name(), l.line(), l.column(), what};
}

// Runs threadgroup `id` to completion; false (and d.error set) on failure.
bool run_group(Group& g, uint3 id) {
  Dispatch& d = *g.d;
  uint3 size = d.tg;
  for (int i = 0; i < 3; ++i) size[i] = std::min(d.tg[i], d.grid[i] - id[i] * d.tg[i]);
  const unsigned n = size.x * size.y * size.z;
  const unsigned nsimd = (n + 31) / 32;
  g.tg_name = "threadgroup (" + std::to_string(id.x) + "," + std::to_string(id.y) + "," +
              std::to_string(id.z) + ")";
  if (g.stacks_n < n) {
    g.stacks.reset(new char[n * kStack]);
    g.stacks_n = n;
  }
  g.poisoned.clear();
  g.fibers.assign(n, Fiber{});
  g.simds.assign(nsimd, SimdGroup{});
  for (unsigned i = 0; i < n; ++i) {
    Fiber& f = g.fibers[i];
    const uint3 p(i % size.x, i / size.x % size.y, i / (size.x * size.y));
    f.ids = ThreadIds{p + id * d.tg, p, id, size, d.groups, d.grid,
                      i, i % 32, i / 32, 32, nsimd};
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = g.stacks.get() + size_t(i) * kStack;
    f.ctx.uc_stack.ss_size = kStack;
    f.ctx.uc_link = &g.sched;
    makecontext(&f.ctx, fiber_main, 0);
  }
  std::vector<unsigned> order(n);
  for (unsigned i = 0; i < n; ++i) order[i] = i;
  if (d.order == 1) std::reverse(order.begin(), order.end());
  if (d.order == 2) {
    std::mt19937 rng(d.seed ^ (id.x * 73856093u) ^ (id.y * 19349663u) ^ (id.z * 83492791u));
    std::shuffle(order.begin(), order.end(), rng);
  }
  auto fail = [&](const std::string& m) {
    d.fail(m + " (" + g.tg_name + ", " + std::to_string(n) + " threads)");
    return false;
  };
  for (;;) {
    for (unsigned i : order) {
      Fiber& f = g.fibers[i];
      if (f.st != St::kRun) continue;
      g.cur = &f;
      swapcontext(&g.sched, &f.ctx);
      if (f.st == St::kFailed) return fail(g.error);
      if (d.failed.load(std::memory_order_relaxed)) return false;
    }
    // Everyone is blocked or done. SIMD-groups whose active lanes all wait in one
    // collective go on; lanes that returned are inactive, as on hardware.
    bool released = false;
    unsigned done = 0, at_barrier = 0;
    for (unsigned s = 0; s < nsimd; ++s) {
      const Fiber* first = nullptr;
      const Fiber* other = nullptr;  // a lane of this SIMD-group not in the collective
      unsigned mask = 0;
      for (unsigned l = 0; l < 32 && s * 32 + l < n; ++l) {
        const Fiber& f = g.fibers[s * 32 + l];
        if (f.st == St::kSimd) {
          if (!first) first = &f;
          else if (!(f.at == first->at))
            return fail(str(first->at) + ": " + first->at.what + " and " + str(f.at) + ": " +
                        f.at.what + ": SIMD collective called from diverging call sites in "
                        "SIMD-group " + std::to_string(s));
          mask |= 1u << l;
        } else if (f.st == St::kBarrier) {
          other = &f;
        }
      }
      if (!first) continue;
      if (other)
        return fail(str(first->at) + ": " + first->at.what + " waits for lanes that are at " +
                    str(other->at) + ": " + other->at.what + " (diverging control flow in "
                    "SIMD-group " + std::to_string(s) + ")");
      SimdGroup& sg = g.simds[s];
      sg.active[sg.gen & 1] = mask;
      ++sg.gen;
      for (unsigned l = 0; l < 32; ++l)
        if ((mask >> l) & 1u) g.fibers[s * 32 + l].st = St::kRun;
      released = true;
    }
    if (released) continue;
    const Fiber* first = nullptr;
    for (const Fiber& f : g.fibers) {
      if (f.st == St::kDone) ++done;
      if (f.st != St::kBarrier) continue;
      ++at_barrier;
      if (!first) first = &f;
      else if (!(f.at == first->at))
        return fail(str(first->at) + ": threadgroup_barrier and " + str(f.at) +
                    ": threadgroup_barrier: threads wait at different barriers");
    }
    if (done == n) return true;
    if (done > 0)
      return fail(str(first->at) + ": threadgroup_barrier reached by " +
                  std::to_string(at_barrier) + " of " + std::to_string(n) +
                  " threads; the other " + std::to_string(done) + " returned without it");
    for (Fiber& f : g.fibers) f.st = St::kRun;
  }
}

void worker(Dispatch* d) {
  Group g;
  g.d = d;
  g_group = &g;
  const unsigned total = d->groups.x * d->groups.y * d->groups.z;
  for (;;) {
    const unsigned i = d->next.fetch_add(1);
    if (i >= total || d->failed.load()) break;
    const uint3 id(i % d->groups.x, i / d->groups.x % d->groups.y,
                   i / (d->groups.x * d->groups.y));
    if (!run_group(g, id)) break;
  }
  g_group = nullptr;
}

}  // namespace

void barrier(const std::source_location& loc) {
  block(St::kBarrier, loc_of(loc, "threadgroup_barrier"));
}

const unsigned char* simd_exchange(const void* value, unsigned bytes, unsigned* active,
                                   unsigned* lane, const char* what,
                                   const std::source_location& loc) {
  Group& g = *g_group;
  Fiber& f = *g.cur;
  const unsigned s = f.ids.simdgroup_index_in_threadgroup, l = f.ids.thread_index_in_simdgroup;
  SimdGroup& sg = g.simds[s];
  // Double-buffered by generation: a lane that runs ahead to the next collective
  // writes the other buffer while slower lanes still read this one.
  const unsigned buf = sg.gen & 1;
  std::memcpy(sg.slots[buf][l], value, bytes);
  block(St::kSimd, loc_of(loc, what));
  *active = sg.active[buf];
  *lane = l;
  return &sg.slots[buf][0][0];
}

void poison_once(void* p, unsigned long n) {
  Group& g = *g_group;
  if (std::find(g.poisoned.begin(), g.poisoned.end(), p) != g.poisoned.end()) return;
  g.poisoned.push_back(p);
  std::memset(p, 0xFF, n);
}

void fail(const char* what, const std::source_location& loc) {
  Group& g = *g_group;
  g.error = str(loc_of(loc, what)) + ": " + what;
  g.cur->st = St::kFailed;
  swapcontext(&g.cur->ctx, &g.sched);
  __builtin_unreachable();  // never resumed
}

}  // namespace msl_rt

// The C ABI the tests call through ctypes. `counts` is threadgroups per grid
// (uniform: dispatchThreadgroups) or, with `threads` set, threads per grid (Metal's
// dispatchThreads: edge threadgroups are smaller). order: 0 forward, 1 reverse,
// 2 shuffled by `seed`. Returns 0, or -1 with the message in `err`.
extern "C" int msl_dispatch(const char* name, const unsigned counts[3], const unsigned tg[3],
                            int threads, void* const* buffers, int nbuffers, int order,
                            unsigned seed, char* err, int errlen) {
  using namespace msl_rt;
  auto out = [&](const std::string& m) {
    std::snprintf(err, errlen, "%s", m.c_str());
    return -1;
  };
  const Kernel* k = nullptr;
  for (int i = 0; i < msl_num_kernels; ++i)
    if (std::strcmp(msl_kernels[i].name, name) == 0) k = &msl_kernels[i];
  if (!k) return out(std::string("no kernel named ") + name);
  if (nbuffers < k->buffers)
    return out(std::string(name) + " binds " + std::to_string(k->buffers) + " buffers, got " +
               std::to_string(nbuffers));
  if (tg[0] * tg[1] * tg[2] == 0 || tg[0] * tg[1] * tg[2] > 1024)
    return out("threads per threadgroup must be 1..1024");
  Dispatch d;
  d.k = k;
  d.buffers = buffers;
  d.tg = uint3(tg[0], tg[1], tg[2]);
  d.order = order;
  d.seed = seed;
  if (threads) {
    d.grid = uint3(counts[0], counts[1], counts[2]);
    for (int i = 0; i < 3; ++i) d.groups[i] = (counts[i] + tg[i] - 1) / tg[i];
  } else {
    d.groups = uint3(counts[0], counts[1], counts[2]);
    d.grid = d.groups * d.tg;
  }
  const unsigned total = d.groups.x * d.groups.y * d.groups.z;
  if (total == 0) return 0;
  const unsigned nw = std::max(1u, std::min(total, std::thread::hardware_concurrency()));
  std::vector<std::thread> ws;
  for (unsigned i = 1; i < nw; ++i) ws.emplace_back(worker, &d);
  worker(&d);
  for (auto& w : ws) w.join();
  return d.failed ? out(d.error) : 0;
}
