// The skinny FP8 GEMM's converts 4, 5 and 8: Hopper's fp8 warpgroup MMA with the weight
// as the register operand, and the cluster epilogues convert 6 shares. See skinny_gemm.cu.
#pragma once

#include "skinny_gemm_common.cuh"
#include "wgmma.cuh"

namespace {

// convert 4 (kWgmma, M <= 32): Hopper's fp8 warpgroup MMA (wgmma.cuh), no conversion at
// all. One weight row a lane: a warpgroup streams 32 rows, each lane 16 bytes of its row
// per 64-byte chunk of K, and that load is the whole A fragment of one MMA as it lies:
// the MMA's logical rows g and g + 8 are both the lane's row, row g taking words 0 and 2,
// row g + 8 words 1 and 3. B (the activation, in shared memory) holds every row twice,
// permuted for each: column m against words {0, 2}, column 8 NH + m against {1, 3}, so
// the row's sum is D[g][m] + D[g + 8][8 NH + m], both in the same thread: the MMA's n is
// 16 NH (16 to 64 for M up to 8 to 32). (A fragment
// built from two rows' loads costs register moves that ptxas puts right after the loads,
// and every refill then waits for its own load: benchmarks/wgmma_probe.cu's first kernel.)
// G groups of kWgU chunks a lane in flight (two only at M <= 16), each group's MMAs
// issued back to back and its chunks refilled once they are done; the fp8 accumulator
// keeps fewer bits than fp32, so each group starts from zero and is added to fp32
// registers. A block is WGS warpgroups (2 unless the caller's tiles_per_block says
// 1; one measured no better, s13e). K is split over the blocks of a cluster (up to 8),
// partials summed through distributed shared memory in a fixed order, as the other
// paths do.
constexpr int kWgU = 8;
constexpr int kWgRows = 64;  // weight rows a block at most: two warpgroups (WGS)

// Shared memory: the activation's copy for `cps` chunks (padded to whole groups of kWgU),
// then the block's fp32 partials [rows of a: 16, or 8 nh past 16][64].
__host__ __device__ constexpr int64_t wg_x_slots(int64_t cps) { return (cps + kWgU - 1) / kWgU * kWgU; }
__host__ __device__ constexpr int64_t wg_smem_bytes(int64_t cps, int nh) {
  return wg_x_slots(cps) * nh * 512 + (nh > 2 ? nh : 2) * 8 * kWgRows * 4;
}

// convert 4 and 5's copy of the activation into shared memory (see
// skinny_gemm_wgmma_kernel): chunks c0 .. c0 + cn - 1 of every row of a, then zeros up to
// cpad chunks, as cp.async copies the caller waits for.
template <int NH, int kThreads>
__device__ __forceinline__ void wg_copy_x(uint32_t xsa, const SkinnyGemmParams& p, int64_t M, int64_t K, int64_t c0,
                                          int cn, int cpad) {
  constexpr int NT = 2 * NH;
  const auto* a = static_cast<const uint8_t*>(p.a);
  const int items = cpad * 8 * NH * 4;
  for (int i = threadIdx.x; i < items; i += kThreads) {
    const int tt = i & 3, m = (i >> 2) % (8 * NH), s = (i >> 2) / (8 * NH);
    const int64_t off = (c0 + s) * kChunk + 16 * tt;
    const bool valid = s < cn && m < M && off < K;
    const uint8_t* src = valid ? a + m * p.lda + off : a;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int col = (j & 1) * 8 * NH + m, h = j >> 1;
      cp_async4_zfill(xsa + ((s * 2 + h) * NT + (col >> 3)) * 128 + (col & 7) * 16 + 4 * tt, src + 4 * j, valid);
    }
  }
}

// A block's sums for its kRows weight rows (each row's two halves added) into partials[m][row].
template <int NH, int kRows>
__device__ __forceinline__ void wg_put_partials(float* partials, const float (&acc)[8 * NH], int t, int rl, int64_t M) {
#pragma unroll
  for (int j = 0; j < NH; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int m = 8 * j + 2 * t + e;
      if (m < M) partials[m * kRows + rl] = acc[4 * j + e] + acc[4 * (j + NH) + 2 + e];
    }
  }
}

// The cluster's partials of one tile summed in rank order, scaled, biased and stored; each
// block stores its share. After a cluster barrier that follows every block's partials.
template <typename OutT, int kRows, int kThreads>
__device__ __forceinline__ void wg_sum_partials(const SkinnyGemmParams& p, cg::cluster_group& cluster, float* partials,
                                                int nc, int rank, int64_t tile) {
  const int64_t M = p.M, N = p.N;
  const float sa = *p.scale_a;
  for (int i = rank * kThreads + threadIdx.x; i < kRows * M; i += kThreads * nc) {
    const int r = i % kRows;
    const int64_t m = i / kRows, n = tile * kRows + r;
    if (n >= N) continue;
    float sum = 0.0f;
    for (int q = 0; q < nc; ++q) sum += (nc > 1 ? cluster.map_shared_rank(partials, q) : partials)[m * kRows + r];
    float y = sum * (sa * p.scale_b[p.scale_b_per_channel ? n : 0]);
    if (p.bias) y += to_float(static_cast<const OutT*>(p.bias)[n]);
    static_cast<OutT*>(p.out)[m * p.ldo + n] = from_float<OutT>(y);
  }
}

// The same sums by weight row (convert 6 at M >= 16, the split small; launch_tma): a
// thread keeps one weight row r (kThreads is a multiple of kRows) and the activation rows
// kThreads / kRows x nc apart, reads its scale and bias once and gathers every sum, rank by
// rank, before the first store. wg_sum_partials's loads of one element wait behind the
// last element's store (the compiler cannot move a load past a store that may alias it):
// at M = 32 a third of the consumer warps' samples sat there (Nsight Compute, s26g).
template <typename OutT, int kRows, int kThreads>
__device__ __forceinline__ void wg_sum_rows(const SkinnyGemmParams& p, cg::cluster_group& cluster, float* partials,
                                            int nc, int rank, int64_t tile) {
  static_assert(kThreads % kRows == 0, "a thread keeps one weight row");
  constexpr int kStep = kThreads / kRows, kIt = (kMaxM + kStep - 1) / kStep;
  const int r = threadIdx.x % kRows, m0 = rank * kStep + threadIdx.x / kRows, dm = kStep * nc;
  const int64_t n = tile * kRows + r;
  // Threads with no row end here, before the scale's and bias's loads (s26j: waiting for
  // those loads in all but 64 threads at M = 1 cost 1-4%).
  if (n >= p.N || m0 >= p.M) return;
  const float s = *p.scale_a * p.scale_b[p.scale_b_per_channel ? n : 0];
  const float b = p.bias ? to_float(static_cast<const OutT*>(p.bias)[n]) : 0.0f;
  float sum[kIt];
#pragma unroll
  for (int it = 0; it < kIt; ++it) sum[it] = 0.0f;  // as wg_sum_partials: 0 + x over the ranks
  for (int q = 0; q < nc; ++q) {
    const float* src = nc > 1 ? cluster.map_shared_rank(partials, q) : partials;
#pragma unroll
    for (int it = 0; it < kIt; ++it) {
      const int m = m0 + it * dm;
      if (m < p.M) sum[it] += src[m * kRows + r];
    }
  }
#pragma unroll
  for (int it = 0; it < kIt; ++it) {
    const int m = m0 + it * dm;
    if (m >= p.M) continue;
    float y = sum[it] * s;
    if (p.bias) y += b;
    static_cast<OutT*>(p.out)[m * p.ldo + n] = from_float<OutT>(y);
  }
}

// A block's partials are written: the cluster's sums for the tile (wg_sum_partials, or by
// weight row: wg_sum_rows), between the barriers that make every block's partials visible
// and keep them alive until read.
template <typename OutT, int kRows, int kThreads, bool kByRow = false>
__device__ __forceinline__ void wg_finish_tile(const SkinnyGemmParams& p, cg::cluster_group& cluster, float* partials,
                                               int nc, int rank, int64_t tile) {
  if (nc > 1) {
    cluster.sync();
  } else {
    __syncthreads();
  }
  if constexpr (kByRow) {
    wg_sum_rows<OutT, kRows, kThreads>(p, cluster, partials, nc, rank, tile);
  } else {
    wg_sum_partials<OutT, kRows, kThreads>(p, cluster, partials, nc, rank, tile);
  }
  if (nc > 1) cluster.sync();
}

// One group of kWgU MMAs from zero (convert 4 and 8): d = sum over u of A (the 16 bytes
// w[u]) x B (the 8 NT columns x 32 bytes at b + u NT 256 in shared memory), then the wait.
// The MMAs run back to back (PTX orders wgmmas of one shape on the same accumulator); one
// wait for all of them. A wait after each was slower by 0.5-5.6% at 49 of 60 points and
// level at the rest (s14d).
template <int NT>
__device__ __forceinline__ void wg_mma_group(float (&d)[4 * NT], const uint4* w, uint32_t b) {
#pragma unroll
  for (int u = 0; u < kWgU; ++u) {
    const uint64_t desc = wgmma_desc(b + u * (NT * 256), NT * 128, 128);
    if (u == 0) {
      wgmma_fence();  // the group's registers were written by its loads
      wgmma_e4m3<NT, 0>(d, w[u], desc);
    } else {
      wgmma_e4m3<NT, 1>(d, w[u], desc);
    }
  }
  wgmma_commit();
  wgmma_wait_all();
}

// A lane's stream of `pad` chunks (whole groups; the first G groups already loaded into w,
// B's chunk c at b + c NT 256) summed into acc: each group's MMAs from zero, then added to
// fp32. The group's refills go together, after its last MMA (as ptxas schedules them
// anyway; each right after its own MMA measured 1-10% slower, s13g), and only for the
// `have` chunks the lane has: a padding slot keeps its old weights against zero
// activations (e4m3 has no infinity, and a NaN there was already the row's). Loading the
// padding too cost up to a group's worth of extra reads where convert 4's split leaves one
// short. With G = 2 these loads fly while the other group's MMAs run.
template <int NT, int G, typename Load>
__device__ __forceinline__ void wg_stream(float (&acc)[4 * NT], uint4 (&w)[G * kWgU], uint32_t b, int pad, int have,
                                          const Load& load) {
  float part[4 * NT];
  for (int c0 = 0; c0 < pad; c0 += G * kWgU) {
#pragma unroll
    for (int h = 0; h < G; ++h) {
      const int cb = c0 + h * kWgU;
      if (cb >= pad) break;  // block-uniform
      wg_mma_group<NT>(part, w + h * kWgU, b + cb * (NT * 256));
#pragma unroll
      for (int u = 0; u < kWgU; ++u) {
        if (cb + u + G * kWgU < have) w[h * kWgU + u] = load(cb + u + G * kWgU);
      }
#pragma unroll
      for (int i = 0; i < 4 * NT; ++i) acc[i] += part[i];
    }
  }
}

// A cluster rank's share of K (convert 4 and 5): chunks [c0, c0 + cn) of K's, cps a
// rank (cn 0 past the end).
struct KShare {
  int nc, rank;
  int64_t c0;
  int cn;
};
__device__ __forceinline__ KShare k_share(const cg::cluster_group& cluster, int64_t K, int64_t cps) {
  KShare s;
  s.nc = int(cluster.num_blocks()), s.rank = int(cluster.block_rank());
  const int64_t nchunks = (K + kChunk - 1) / kChunk;
  s.c0 = int64_t(s.rank) * cps;
  s.cn = int(std::max<int64_t>(0, std::min(s.c0 + cps, nchunks) - s.c0));
  return s;
}

// G: groups of kWgU chunks a lane keeps in flight (wgmma_groups): with 2, one group's
// loads are on their way while the other's MMAs run (112-122 registers against 72-90).
template <typename OutT, int NH, int WGS, int G = 1>
__global__ void __launch_bounds__(128 * WGS, 1) skinny_gemm_wgmma_kernel(SkinnyGemmParams p, int64_t cps) {
  pdl_enter();
  constexpr int kRows = 32 * WGS, kThreads = 128 * WGS;
  extern __shared__ __align__(128) uint8_t wsm[];
  constexpr int NT = 2 * NH;  // B's 8-column groups: each activation row twice
  cg::cluster_group cluster = cg::this_cluster();
  const KShare ks = k_share(cluster, p.K, cps);
  const int nc = ks.nc, rank = ks.rank, cn = ks.cn;
  const int64_t M = p.M, N = p.N, K = p.K, c0 = ks.c0;
  const int cpad = (cn + kWgU - 1) / kWgU * kWgU;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int rl = (threadIdx.x >> 5) * 8 + g;  // the lane's row in the block's kRows
  const int64_t tile = blockIdx.x / nc;
  const int64_t row = tile * kRows + rl;
  const auto* row_base = static_cast<const uint8_t*>(p.b) + std::min(row, N - 1) * p.ldb;
  const uint8_t* pw = row_base + c0 * kChunk + 16 * t;
  // A segment past K (K's partial last chunk) reads the row's last 16 bytes instead: its
  // activation bytes are zeros, so it adds nothing (and a NaN there is the row's own).
  const uint8_t* last16 = row_base + K - 16;
  const auto load = [&](int c) { return ld_stream16_ordered(std::min(pw + std::min(c, cn - 1) * kChunk, last16)); };

  uint4 w[G * kWgU];
  const auto load_weights = [&] {
    if (cn > 0) {
#pragma unroll
      for (int u = 0; u < G * kWgU; ++u) w[u] = load(u);
    }
  };

  // B: slots 0..cn-1 the chunks (zeros past K), cn..cpad-1 zeros (the loop's padding
  // multiplies them with weights it already had). 16 bytes at 16 tt of a row: word q goes
  // to column group q % 2, K half q / 2.
  uint8_t* xs = wsm;
  // Item i: word group tt of chunk s of activation row m, rows fastest, so that a warp's 8
  // rows x 4 words land on 128 consecutive bytes (chunks fastest put a warp's 8 chunks
  // 256 NT bytes apart: 8-way bank conflicts). Copied by cp.async, which holds no
  // registers: when the copy went through registers, its stores waited on the scoreboard
  // ptxas gives every global load, the weights' included, so the copy's latency came
  // after the weights' instead of beside it (s17a). At M <= 8 the weights' loads go out
  // first, above that the copy's (s17c, against the other order: up to 6% faster at
  // M <= 8 and up to 14% above, with one point of each 0.5-1% behind).
  constexpr bool kCopyFirst = NH > 1;
  const uint32_t xsa = smem_addr(xs);
  if constexpr (!kCopyFirst) load_weights();
  wg_copy_x<NH, kThreads>(xsa, p, M, K, c0, cn, cpad);
  if constexpr (kCopyFirst) load_weights();
  cp_async_wait_all();
  fence_proxy_async_smem();
  __syncthreads();

  const uint32_t xb = smem_addr(xs);
  float acc[4 * NT] = {};
  wg_stream<NT, G>(acc, w, xb, cpad, cn, load);

  float* partials = reinterpret_cast<float*>(wsm + wg_x_slots(cps) * NH * 512);
  wg_put_partials<NH, kRows>(partials, acc, t, rl, M);
  wg_finish_tile<OutT, kRows, kThreads>(p, cluster, partials, nc, rank, tile);
}

// convert 8 (kRowsWgmma, M = 1, sm_90a): convert 7's division (whole weight rows a block,
// no split of K between blocks, blocks refilled by the hardware as they end) with convert
// 4's MMAs (no conversion: the weight is the wgmma's register operand, a lane's 16-byte
// load the whole A fragment as it lies).
// - Fragments: convert 4 gives a warp's 8 lane groups 8 weight rows, 32 rows a warpgroup:
//   too few blocks to fill the GPU without a K split. Here a block (one warpgroup) takes
//   RB rows (8: two a warp; 4: one a warp; 2, 1: WPR = 4 / RB warps a row), and the 64
//   logical rows of its MMA are those rows cut into SPR slices of K a step: slice s of a
//   row is bytes 64 s + 16 t of each step of 64 SPR bytes, lane (g, t)'s, and B (the
//   activation in shared memory) holds each slice in its own column: words {0, 2} of a
//   lane's segment meet column s, words {1, 3} column SPR + s (n = 2 SPR: 8 to 64). Only
//   those entries of D are used: the tensor cores do n times the needed work, which the
//   loads hide at M = 1. A warp's load is 512 contiguous bytes of one row (256 of two at
//   RB 8).
// - Every group runs kWgU MMAs (B zero past K): a data-dependent count made ptxas wait
//   for each MMA before the next (s42c).
// - Pipeline: as convert 4, G groups of kWgU steps a lane in flight, each group's MMAs
//   back to back from zero, then added to fp32 (the MMA's accumulator keeps fewer bits).
template <int RB>
struct RowsWgmma {
  static constexpr int kLanesRow = RB == 8 ? 4 : 8;  // lane groups of a warp on one row
  static constexpr int kWarpsRow = RB >= 4 ? 1 : 4 / RB;
  static constexpr int kSlices = kLanesRow * kWarpsRow;  // SPR
  static constexpr int kStep = 64 * kSlices, kCols = 2 * kSlices, kNT = kCols / 8;
  // Shared memory: whole groups of steps, and 2 KB past them (compute-sanitizer takes a
  // wgmma's B read as 2 KB from its start).
  static constexpr int64_t smem(int64_t K) {
    return (K + int64_t(kStep) * kWgU - 1) / (int64_t(kStep) * kWgU) * (int64_t(kStep) * kWgU) + 2048;
  }
};

template <typename OutT, int RB, int G>
__global__ void __launch_bounds__(128, 1) skinny_gemm_rows_wgmma_kernel(const SkinnyGemmParams p) {
  using C = RowsWgmma<RB>;
  constexpr int SPR = C::kSlices, NT = C::kNT, kStep = C::kStep;
  extern __shared__ __align__(128) uint8_t wsm[];
  __shared__ float part[4];
  const int64_t K = p.K, N = p.N;
  const int steps = int((K + kStep - 1) / kStep);  // the launcher bounds K
  const int spad = (steps + kWgU - 1) / kWgU * kWgU;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, warp = threadIdx.x >> 5;
  const int slice = RB == 8 ? g % 4 : 8 * (warp % C::kWarpsRow) + g;
  const int rl = RB == 8 ? 2 * warp + g / 4 : warp / C::kWarpsRow;  // the lane's row in the block
  const int64_t row = int64_t(blockIdx.x) * RB + rl;
  const auto* row_base = static_cast<const uint8_t*>(p.b) + std::min(row, N - 1) * p.ldb;
  pdl_enter();
  const uint8_t* pw = row_base + 64 * slice + 16 * t;
  // A segment past K reads the row's last 16 bytes instead: its activation bytes are
  // zeros, so it adds nothing (and a NaN there is the row's own).
  const uint8_t* last16 = row_base + K - 16;
  const auto load = [&](int c) { return ld_stream16_ordered(std::min(pw + int64_t(c) * kStep, last16)); };

  uint4 w[G * kWgU];
#pragma unroll
  for (int u = 0; u < G * kWgU; ++u) w[u] = load(std::min(u, steps - 1));

  // B: step c's 2 SPR columns x 32 bytes of K (two 16-byte halves of NT 8-column groups of
  // 128 bytes). x's 16 bytes at 16 i are lane t = i % 4 of slice s = i / 4 % SPR of step
  // i / (4 SPR); word q goes to column s + SPR (q % 2), K half q / 2. Zeros past K.
  const uint32_t xsa = smem_addr(wsm);
  const auto* a = static_cast<const uint8_t*>(p.a);
  for (int i = threadIdx.x; i < spad * 4 * SPR; i += 128) {
    const int64_t off = int64_t(16) * i;
    const bool valid = off < K;
    const uint8_t* src = valid ? a + off : a;
    const int c = i / (4 * SPR), s = i / 4 % SPR, tt = i % 4;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int col = s + SPR * (q & 1);
      cp_async4_zfill(xsa + c * (2 * SPR * 32) + ((q >> 1) * NT + (col >> 3)) * 128 + (col & 7) * 16 + 4 * tt,
                      src + 4 * q, valid);
    }
  }
  cp_async_wait_all();
  fence_proxy_async_smem();
  __syncthreads();

  float acc[4 * NT] = {};
  wg_stream<NT, G>(acc, w, xsa, spad, steps, load);

  // D's element i of this lane is logical row g + 8 (i / 2 % 2), column 8 (i / 4) + 2 t +
  // i % 2; the lane's slice sits in column `slice` (words 0, 2) or SPR + slice (1, 3).
  float v = 0.0f;
#pragma unroll
  for (int i = 0; i < 4 * NT; ++i) {
    if (8 * (i / 4) + 2 * t + i % 2 == slice + SPR * (i / 2 % 2)) v += acc[i];
  }
#pragma unroll
  for (int o = 2 * C::kLanesRow; o > 0; o /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);  // the row's lanes
  int r = rl;
  if constexpr (C::kWarpsRow > 1) {
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (threadIdx.x >= RB) return;
    r = threadIdx.x;
    v = 0.0f;
#pragma unroll
    for (int q = 0; q < C::kWarpsRow; ++q) v += part[r * C::kWarpsRow + q];
  } else if (lane % (4 * C::kLanesRow) != 0) {
    return;
  }
  const int64_t n = int64_t(blockIdx.x) * RB + r;
  if (n < N) {
    float y = v * (*p.scale_a * p.scale_b[p.scale_b_per_channel ? n : 0]);
    if (p.bias) y += to_float(static_cast<const OutT*>(p.bias)[n]);
    static_cast<OutT*>(p.out)[n] = from_float<OutT>(y);
  }
}

// convert 5 (kWgmmaRing, M <= 32): convert 4's MMAs (the same fragments, B layout and
// order of sums), with two changes for weights that do not fit one wave of tiles:
// - Persistent clusters: a cluster takes tiles cluster, cluster + clusters, ... of 64
//   rows, each block the same share of K for all of them, so a block copies its share of
//   the activation once, not once a tile (at M = 32 that copy is half the weight bytes a
//   block reads, through 4-byte cp.async).
// - The weights stream through a ring of S slots in shared memory (cp.async), S - 1
//   groups of kWgU chunks a lane in flight whatever the registers hold; the loads run on
//   across tile boundaries and cluster barriers. A lane copies and reads only its own 16
//   bytes a chunk (a warp's 512 contiguous bytes: no bank conflicts), so the slot needs no
//   barrier, only the lane's own wait. Chunks past the block's share are zeros (the
//   activation there is zero too).
// A tile's partials alternate between two buffers, and a block sums a tile's partials at
// the end of the next tile, so the cluster barrier between writing and reading them is
// split (arrive after writing, wait before reading) and the next tile's MMAs run in
// between. A block writes a buffer again two tiles after, once every block has arrived
// at the barrier that follows its reads of it.
__host__ __device__ constexpr int64_t wg_ring_bytes(int slots) { return int64_t{slots} * kWgU * 256 * 16; }
__host__ __device__ constexpr int64_t wg_partial_bytes(int nh) { return (nh > 2 ? nh : 2) * 8 * kWgRows * 4; }
__host__ __device__ constexpr int64_t wg_ring_smem_bytes(int slots, int64_t cps, int nh) {
  return wg_x_slots(cps) * nh * 512 + wg_ring_bytes(slots) + 2 * wg_partial_bytes(nh);
}

template <typename OutT, int NH, int S>
__global__ void __launch_bounds__(256, 1)
    skinny_gemm_wgmma_ring_kernel(SkinnyGemmParams p, int64_t cps, int64_t tiles) {
  pdl_enter();
  static_assert(S >= 2 && S <= 8, "ring slots");
  constexpr int kRows = 64, kThreads = 256, NT = 2 * NH;
  extern __shared__ __align__(128) uint8_t wsm[];
  cg::cluster_group cluster = cg::this_cluster();
  const KShare ks = k_share(cluster, p.K, cps);
  const int nc = ks.nc, rank = ks.rank, cn = ks.cn;
  const int64_t M = p.M, N = p.N, K = p.K, c0 = ks.c0;
  const int gpt = int(wg_x_slots(cps) / kWgU);  // groups a tile: the same in every block of the cluster
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int rl = (threadIdx.x >> 5) * 8 + g;  // the lane's row in the tile
  const int64_t clusters = gridDim.x / nc, first = blockIdx.x / nc;
  const int my_tiles = first < tiles ? int((tiles - first + clusters - 1) / clusters) : 0;
  const int groups = my_tiles * gpt;

  const uint32_t xb = smem_addr(wsm);
  const uint32_t ring = xb + uint32_t(wg_x_slots(cps) * NH * 512);
  float* partials = reinterpret_cast<float*>(wsm + wg_x_slots(cps) * NH * 512 + wg_ring_bytes(S));
  constexpr int kPartial = int(wg_partial_bytes(NH) / 4);  // floats a buffer
  const uint32_t mine = ring + threadIdx.x * 16;  // + (slot * kWgU + u) * kThreads * 16

  // The copies of group q (tile q / gpt of this cluster, chunks kWgU (q % gpt) on), one
  // cp.async group, empty past the last. A segment past K reads the row's last 16 bytes
  // (convert 4's rule: its activation bytes are zeros).
  int fill_q = 0, fill_gg = 0;
  int64_t fill_tile = first;
  const auto fill = [&] {
    if (fill_q < groups) {
      const auto* base = static_cast<const uint8_t*>(p.b) + std::min(fill_tile * kRows + rl, N - 1) * p.ldb;
      const uint8_t* pw = base + c0 * kChunk + 16 * t;
      const uint8_t* last16 = base + K - 16;
      const uint32_t dst = mine + uint32_t(fill_q % S) * (kWgU * kThreads * 16);
#pragma unroll
      for (int u = 0; u < kWgU; ++u) {
        const int c = fill_gg * kWgU + u;
        cp_async16_zfill(dst + u * (kThreads * 16), std::min(pw + c * kChunk, last16), c < cn);
      }
      if (++fill_gg == gpt) fill_gg = 0, fill_tile += clusters;
    }
    ++fill_q;
    cp_async_commit();
  };

  // Committed before the loop: group 0, the activation, groups 1 .. S - 2; waiting until S - 2
  // are left in flight leaves group 0 and the activation landed.
  fill();
  wg_copy_x<NH, kThreads>(xb, p, M, K, c0, cn, int(wg_x_slots(cps)));
  cp_async_commit();
#pragma unroll
  for (int s = 1; s < S - 1; ++s) fill();
  cp_async_wait<S - 2>();
  fence_proxy_async_smem();
  __syncthreads();

  float acc[4 * NT] = {}, part[4 * NT];
  int gg = 0, it = 0;
  int64_t tile = first;
  for (int q = 0; q < groups; ++q) {
    if (q > 0) cp_async_wait<S - 2>();  // this lane's copies of group q have landed
    fill();  // group q + S - 1, into the slot group q - 1 was read from (its MMAs are done)
    const uint32_t slot = mine + uint32_t(q % S) * (kWgU * kThreads * 16);
    uint4 w[kWgU];
#pragma unroll
    for (int u = 0; u < kWgU; ++u) w[u] = lds16(slot + u * (kThreads * 16));
#pragma unroll
    for (int u = 0; u < kWgU; ++u) {
      const uint64_t desc = wgmma_desc(xb + (gg * kWgU + u) * (NT * 256), NT * 128, 128);
      if (u == 0) {
        wgmma_fence();
        wgmma_e4m3<NT, 0>(part, w[u], desc);
      } else {
        wgmma_e4m3<NT, 1>(part, w[u], desc);
      }
    }
    wgmma_commit();
    wgmma_wait_all();
#pragma unroll
    for (int i = 0; i < 4 * NT; ++i) acc[i] += part[i];
    if (++gg == gpt) {
      // The previous tile's sums, one tile late: its barrier was passed long ago by the
      // other blocks, so the wait costs nothing, and this tile's MMAs ran meanwhile.
      if (it > 0) {
        cluster_wait();
        wg_sum_partials<OutT, kRows, kThreads>(p, cluster, partials + ((it - 1) & 1) * kPartial, nc, rank,
                                               tile - clusters);
      }
      wg_put_partials<NH, kRows>(partials + (it & 1) * kPartial, acc, t, rl, M);
      cluster_arrive();
#pragma unroll
      for (int i = 0; i < 4 * NT; ++i) acc[i] = 0.0f;
      gg = 0, ++it, tile += clusters;
    }
  }
  cp_async_wait_all();  // the empty groups past the end
  if (it > 0) {
    cluster_wait();
    wg_sum_partials<OutT, kRows, kThreads>(p, cluster, partials + ((it - 1) & 1) * kPartial, nc, rank,
                                           tile - clusters);
    cluster_arrive();  // keep this block's partials alive until all have read them
    cluster_wait();
  }
}

}  // namespace
