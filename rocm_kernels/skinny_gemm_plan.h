// The work split of rocm_kernels/skinny_gemm.hip, in plain C++ (host and device, no HIP
// or torch header): the launcher, the kernel and the host test
// (tests/test_skinny_gemm_fnuz.py, through ctypes) run this same code, so the test's
// model of the schedule (every (tile, K range) exactly once, the arrival counter, the
// fixed summation order) checks what the GPU would do, not a copy of it.
#pragma once

#include <cstdint>
#include <climits>

#if defined(__HIP__)
#define IK_HD __host__ __device__
#else
#define IK_HD
#endif

namespace inference_kernels::rocm_gemm {

constexpr int kChunk = 64;      // K bytes per MFMA step: 4 lane groups x 16 bytes per row
constexpr int kMaxM = 32;       // activation rows per tile: two 16-row m-tiles
constexpr int kProducers = 8;   // waves that load; producer p owns chunk p of every step
constexpr int kConsumers = 4;   // waves that run the MFMAs; consumer c: chunks c, c + 4
constexpr int kStep = kProducers;  // chunks per ring slot (one per producer)
constexpr int kDepth = 4;       // steps each producer keeps in flight in its registers
constexpr int kMaxSplits = 32;  // K splits of one tile across work items
// What starting a work item costs, in KB of weight streamed per CU: the ring's fill
// (about one memory latency) and the partials' round trip. A guess, not a measurement.
constexpr int64_t kItemOverheadKB = 32;

// Counts are 32-bit so the kernel's item arithmetic is 32-bit (64-bit scalar division is
// a long routine that spilled SGPRs); make_plan reports whether they fit.
struct Plan {
  int nw, mt;         // 16-row n-tiles and 16-row m-tiles per tile
  int nchunks;        // ceil(K / 64)
  int n_tiles;        // tiles along N (16 * nw weight rows each)
  int tiles;          // n_tiles x ceil(M / 32)
  int splits;         // K ranges per tile (work items per tile)
  int items;          // tiles x splits
  int grid;           // blocks: one per CU, fewer when there are fewer items
  int64_t workspace;  // bytes: fp32 partials per item, then one counter per tile
  bool fits;          // every count above fits in 32 bits (else the launch is refused)
};

// tiles_per_block: 0 (automatic), 1 or 2 n-tiles; splits: 0 (automatic) or forced
// (clamped to 1 .. min(nchunks, kMaxSplits)).
IK_HD inline Plan make_plan(int64_t M, int64_t N, int64_t K, int cus, int tiles_per_block,
                            int splits) {
  Plan p{};
  p.mt = M > 16 ? 2 : 1;
  // Two n-tiles share each activation chunk; only where one tile per CU is still there.
  p.nw = tiles_per_block > 0 ? (tiles_per_block >= 2 ? 2 : 1) : ((N + 31) / 32 >= cus ? 2 : 1);
  const int64_t nchunks = (K + kChunk - 1) / kChunk;
  const int64_t n_tiles = (N + 16 * p.nw - 1) / (16 * p.nw);
  const int64_t tiles = n_tiles * ((M + kMaxM - 1) / kMaxM);
  const int64_t most = nchunks < kMaxSplits ? nchunks : kMaxSplits;
  int64_t chosen = 1;
  if (splits > 0) {
    chosen = splits < most ? splits : most;
  } else {
    // Fewest rounds of items over the CUs, each round as long as its longest item plus
    // the item overhead; a split below one ring step is never worth it.
    int64_t best = -1;
    for (int64_t s = 1; s <= most; ++s) {
      if (s > 1 && nchunks / s < kStep) break;
      const int64_t rounds = (tiles * s + cus - 1) / cus;
      const int64_t cost = rounds * ((nchunks + s - 1) / s * p.nw + kItemOverheadKB);
      if (best < 0 || cost < best) {
        best = cost;
        chosen = s;
      }
    }
  }
  if (chosen < 1) chosen = 1;  // K = 0: one empty item per tile
  const int64_t items = tiles * chosen;
  // c0 = split * nchunks / splits is computed in 32 bits too.
  p.fits = items <= INT32_MAX && nchunks * chosen <= INT32_MAX;
  p.nchunks = int(nchunks);
  p.n_tiles = int(n_tiles);
  p.tiles = int(tiles);
  p.splits = int(chosen);
  p.items = int(items);
  p.grid = int(items < cus ? items : cus);
  p.workspace = chosen > 1 ? items * p.nw * p.mt * 1024 + tiles * 4 : 0;
  return p;
}

// Work item `item`: tile item / splits (n-tiles fastest, then 32-row m-slices), K chunks
// [c0, c1) of split item % splits. The splits of a tile are consecutive items, so they
// run at once on neighbouring blocks and the last arrival finds the others done.
struct Item {
  int tile, split, c0, c1;
  int64_t n0, m0;
};

IK_HD inline Item item_work(const Plan& p, int item) {
  Item w{};
  w.tile = item / p.splits;
  w.split = item % p.splits;
  w.n0 = int64_t(w.tile % p.n_tiles) * 16 * p.nw;
  w.m0 = int64_t(w.tile / p.n_tiles) * kMaxM;
  w.c0 = w.split * p.nchunks / p.splits;
  w.c1 = (w.split + 1) * p.nchunks / p.splits;
  return w;
}

IK_HD inline int item_steps(const Item& w) { return (w.c1 - w.c0 + kStep - 1) / kStep; }

// The chunk that producer `p` loads (and consumer `c`, `j`-th of the step, reads) in
// step s, and the ring slot that step lives in; a chunk >= w.c1 is not multiplied.
IK_HD inline int producer_chunk(const Item& w, int s, int p) { return w.c0 + s * kStep + p; }
IK_HD inline int consumer_chunk(const Item& w, int s, int c, int j) {
  return w.c0 + s * kStep + c + j * kConsumers;
}
IK_HD inline int ring_slot(int s) { return s & 1; }

}  // namespace inference_kernels::rocm_gemm
