// The skinny FP8 GEMM's convert 6: both wgmma operands in shared memory, copied there by
// the tensor memory accelerator from a producer warpgroup. See skinny_gemm.cu.
#pragma once

#include "skinny_gemm_wgmma.cuh"
#include "tma.cuh"

namespace {

// convert 6 (kTma, M <= 32, sm_90a): the weight as wgmma's shared-memory operand, copied by
// the tensor memory accelerator (tma.cuh), the design of cuBLAS's kernels for these shapes
// (Nsight Compute, s18e). Convert 4 and 5 hold the weight as the register operand: every
// 16 weight bytes cost a load instruction in the warps that multiply, and each m64 MMA
// covers 32 distinct rows (the activation twice in B). Here one thread of a producer
// warpgroup issues the copies of [64 C rows x 128 K bytes] weight boxes and [NN x 128]
// activation boxes, kTmaP boxes a stage, into a ring of kTmaS stages, and C consumer
// warpgroups (one by default, two by config; launch) each multiply 64 distinct rows
// (m64nNNk32, both operands in shared memory, 128-byte swizzle), releasing each stage
// through an mbarrier: no consumer instruction is spent on loads. The activation streams
// with the weight (no whole-K copy up front). K is split over the blocks of a cluster (up
// to 4 by default, 8 by config; launch_tma) and the partials summed through distributed
// shared memory in rank order (wg_sum_partials, or by weight row: wg_sum_rows), as convert
// 4 does; without a split each consumer thread stores its own sums (TmaEpilogue). The fp8
// accumulator's sums move into fp32 registers once a stage (256 K bytes). Tails: the
// copies read zeros past N, M and K, so any N, M <= 32 and K % 16 == 0 (the tensor map's
// stride rule; vector_path) work.
// The probe's measurements at 2 x 2 x 4 (consumers x boxes x stages) against _scaled_mm
// (s25a, M 32): 13312 x 16384 56.31 us against 55.50, 16384 x 6656 29.29 against 29.00,
// 2304 x 16384 13.76 against 15.40.
// C consumer warpgroups (64 weight rows each) and the producer's: 128 (C + 1) threads.
constexpr int kTmaP = 2, kTmaS = 4;
__host__ __device__ constexpr int tma_stage_bytes(int nn, int c) { return (64 * c + nn) * kTmaPanel * kTmaP; }
// The ring (1024-byte aligned: the swizzle's pattern repeats every 1024 bytes), its full
// and empty barriers, the block's fp32 partials [32][64 C], and the alignment's slack.
__host__ __device__ constexpr int tma_smem_bytes(int nn, int c) {
  return kTmaS * tma_stage_bytes(nn, c) + 2 * kTmaS * 8 + kMaxM * 64 * c * 4 + 1024 + 16;  // 16: kTmaPush's barrier
}

// convert 6's epilogues: the cluster's partials summed by element (wg_sum_partials) or by
// weight row (wg_sum_rows), or, without a K split, each consumer thread's sums scaled and
// stored from its registers (kTmaDirect: no partials, no block barrier; the blocks may
// then be persistent, each taking tiles blockIdx.x, + gridDim.x, ..., its producer
// running into the next tile's stages while the consumers store).
// With a K split, kTmaPush: each rank's consumer threads add the sums of the ranks before
// (in its partials, stored there by st.async and counted on an mbarrier) to their own and
// store the total into the next rank's, the last rank storing the tile as kTmaDirect: no
// cluster barrier at the tile's end, and no thread waits on a rank after its own.
// At a split of 2, kTmaSwap: each rank sends the other the half of its sums the other
// stores (st.async) and stores its own half, so both ranks finish the tile at once, where
// the chain's last rank stores all of it after the first has sent it all; the order of
// the sums stays (0 + p0) + p1, as the chain's.
enum TmaEpilogue { kTmaByElement = 0, kTmaByRow = 1, kTmaDirect = 2, kTmaPush = 3, kTmaSwap = 4 };  // config warps_per_tile - 1

template <typename OutT, int NN, int C, int kEpi>
__global__ void __launch_bounds__(128 * (C + 1), 1)
    skinny_gemm_tma_kernel(const __grid_constant__ CUtensorMap tw, const __grid_constant__ CUtensorMap tx,
                           SkinnyGemmParams p, int pps) {
  constexpr int kTmaRows = 64 * C, kTmaThreads = 128 * (C + 1);
  constexpr int kW = kTmaRows * kTmaPanel, kX = NN * kTmaPanel;  // bytes a box
  constexpr int kStage = tma_stage_bytes(NN, C);
  extern __shared__ uint8_t tsm[];
  cg::cluster_group cluster = cg::this_cluster();
  const int nc = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const uint32_t raw = smem_addr(tsm), base = (raw + 1023) & ~1023u;
  const uint32_t full = base + kTmaS * kStage, empty = full + kTmaS * 8;
  float* partials = reinterpret_cast<float*>(tsm + (empty + kTmaS * 8 - raw));
  const int panels = int((p.K + kTmaPanel - 1) / kTmaPanel);
  const int p0 = rank * pps, np = std::max(0, std::min(pps, panels - p0));
  const int nstages = (np + kTmaP - 1) / kTmaP;
  // Tiles blockIdx.x / nc, + gridDim.x / nc, ...: one unless the launch is persistent
  // (kTmaDirect only: the other epilogues end with block barriers).
  const int64_t tile0 = blockIdx.x / nc, tstep = kEpi == kTmaDirect ? gridDim.x : 1;  // direct: nc = 1
  const int64_t tend = kEpi == kTmaDirect ? (p.N + kTmaRows - 1) / kTmaRows : tile0 + 1;
  // Warp-uniform in the compiler's eyes too (else ptxas serialises the MMAs: C7520).
  const int wg = __shfl_sync(0xFFFFFFFFu, int(threadIdx.x / 128), 0);
  pdl_enter();

  // kTmaPush / kTmaSwap: the barrier the other rank's sums arrive on, after the partials.
  const uint32_t recv = smem_addr(partials) + kMaxM * 64 * C * 4;
  constexpr bool kSends = kEpi == kTmaPush || kEpi == kTmaSwap;
  // Outputs staged through shared memory (M > 8: NN >= 16), a warp's [NN][16] in its own
  // part of the partials: for kTmaSwap the slots its lanes received the peer's sums in
  // (32 H floats), else 64 NN bytes a warp (kTmaPush's slots; kTmaDirect has no other use).
  // Each row of the warp's tile is then one 32-byte sector of out, stored by two lanes 16
  // bytes each, where each thread's two-byte stores touched four rows' 16 bytes apiece.
  // Against those stores in one process (s39c, IK_GEMM_STAGE=0 at 72e0bd1, us, M 16 / 32):
  // 4096 x 4096 6.86 / 7.15 against 7.08 / 7.52 (_scaled_mm 7.28 / 7.33), 6144 x 4096
  // 8.70 / 8.86 against 8.93 / 9.25, 7168 x 8192 16.74 / 17.61 against 17.10 / 18.05,
  // 16384 x 6656 28.06 / 28.54 against 28.27 / 28.96; level at M = 1 (the same kernels)
  // and where the partials are summed by element (split 4: 2304 x 16384, 1024 x 8192).
  constexpr bool kStaged = (kEpi == kTmaDirect || kSends) && NN >= 16;
  constexpr int kStageStride = kEpi == kTmaSwap ? 32 * (NN / 4) * 4 : 64 * NN;
  if (kSends && threadIdx.x == 0) mbar_init(recv, 1);
  mbar_ring_init(full, empty, kTmaS, 4 * C);  // empty: lane 0 of every consumer warp
  // kTmaPush / kTmaSwap: every rank's barrier is set (fenced in mbar_ring_init) before another rank
  // stores to it. Only in a cluster: there the wait is BAR.SYNC 0, not the cluster's.
  if (kSends && nc > 1) cluster_arrive_relaxed();

  if (wg == 0) {
    if (threadIdx.x == 0) {
      int i = 0;  // stages issued over this block's tiles: the ring's position
      for (int64_t tile = tile0; tile < tend; tile += tstep) {
        const int row0 = int(tile * kTmaRows);
        for (int s = 0; s < nstages; ++s, ++i) {
          const int slot = i % kTmaS;
          if (i >= kTmaS) mbar_wait(empty + 8 * slot, ((i / kTmaS) + 1) & 1);
          // Always kTmaP boxes: a split's panels are a multiple of kTmaP (the launcher
          // rounds), so only the last split's last stage reaches past K, where they are zeros.
          mbar_arrive_expect_tx(full + 8 * slot, kTmaP * (kW + kX));
          const uint32_t st = base + slot * kStage;
#pragma unroll
          for (int b = 0; b < kTmaP; ++b) {
            const int kc = (p0 + s * kTmaP + b) * kTmaPanel;
            tma_load_2d(st + b * kW, &tw, kc, row0, full + 8 * slot);
            tma_load_2d(st + kTmaP * kW + b * kX, &tx, kc, 0, full + 8 * slot);
          }
        }
      }
    }
    __syncwarp();
    if (kSends && nc > 1) cluster_wait();
  } else {
    const int c = wg - 1;
    // d[4j + e]: weight row 16 w + g + 8 (e / 2) of this warpgroup's 64, activation row
    // 8 j + 2 t + e % 2 (wgmma.cuh's D layout).
    const int lane = threadIdx.x & 31, w = (threadIdx.x / 32) & 3, g = lane / 4, t = lane % 4;
    int i = 0;
    for (int64_t tile = tile0; tile < tend; tile += tstep) {
      // kTmaDirect: this thread's two weight rows' scale and bias, loaded under the K loop.
      float sr[2] = {}, br[2] = {};
      if constexpr (kEpi == kTmaDirect || kSends) {
        const float sa = *p.scale_a;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t n = tile * kTmaRows + 64 * c + 16 * w + g + 8 * h;
          if (n < p.N) {
            sr[h] = sa * p.scale_b[p.scale_b_per_channel ? n : 0];
            if (p.bias) br[h] = to_float(static_cast<const OutT*>(p.bias)[n]);
          }
        }
      }
      float acc[NN / 2] = {}, d[NN / 2];
      for (int s = 0; s < nstages; ++s, ++i) {
        const int slot = i % kTmaS;
        mbar_wait(full + 8 * slot, (i / kTmaS) & 1);
        const uint32_t st = base + slot * kStage;
        const uint32_t wa = st + c * 64 * kTmaPanel, xa = st + kTmaP * kW;
        wgmma_fence();
        wgmma_e4m3_ss<NN, 0>(d, desc_sw128(wa), desc_sw128(xa));
#pragma unroll
        for (int j = 1; j < 4 * kTmaP; ++j) {
          const int b = j / 4, kk = j % 4;  // box, and 32-byte k step in its swizzle row
          wgmma_e4m3_ss<NN, 1>(d, desc_sw128(wa + b * kW + 32 * kk), desc_sw128(xa + b * kX + 32 * kk));
        }
        wgmma_commit();
        wgmma_wait_all();
        if ((threadIdx.x & 31) == 0) mbar_arrive(empty + 8 * slot);
#pragma unroll
        for (int j = 0; j < NN / 2; ++j) acc[j] += d[j];
      }
      constexpr int H = NN / 4;  // kTmaSwap: the sums a thread sends, and keeps
      if constexpr (kEpi == kTmaSwap) {
        // Rank 0 keeps acc[0, H) and sends acc[H, 2H) into rank 1's partials; rank 1 the
        // other way round. Each then adds what it received in the chain's order.
        const uint32_t slot = smem_addr(partials) + (threadIdx.x - 128) * H * 4;
        const uint32_t ra = cluster_map(slot, rank ^ 1), rb = cluster_map(recv, rank ^ 1);
        if (nc > 1) cluster_wait();
        if (threadIdx.x == 128) mbar_arrive_expect_tx(recv, 128 * C * H * 4);
        if (rank == 0) {  // uniform: both branches' loops stay unrolled (registers, not local memory)
          if constexpr (H % 4 == 0) {
#pragma unroll
            for (int j = 0; j < H; j += 4) st_async_v4(ra + 4 * j, acc[H + j], acc[H + j + 1], acc[H + j + 2], acc[H + j + 3], rb);
          } else {
#pragma unroll
            for (int j = 0; j < H; j += 2) st_async_v2(ra + 4 * j, acc[H + j], acc[H + j + 1], rb);
          }
        } else {
          if constexpr (H % 4 == 0) {
#pragma unroll
            for (int j = 0; j < H; j += 4) st_async_v4(ra + 4 * j, acc[j], acc[j + 1], acc[j + 2], acc[j + 3], rb);
          } else {
#pragma unroll
            for (int j = 0; j < H; j += 2) st_async_v2(ra + 4 * j, acc[j], acc[j + 1], rb);
          }
        }
        mbar_wait(recv, 0);
        const float* got = partials + (threadIdx.x - 128) * H;
        if (rank == 0) {
#pragma unroll
          for (int j = 0; j < H; ++j) acc[j] = (0.0f + acc[j]) + got[j];
        } else {
#pragma unroll
          for (int j = 0; j < H; ++j) acc[H + j] = (0.0f + got[j]) + acc[H + j];
        }
      }
      if constexpr (kEpi == kTmaPush) {
        // A chain over the ranks, in rank order as the sums by element (0 + p0 + p1 + ...):
        // rank q > 0 waits for ranks 0..q-1's sum at partials[(threadIdx.x - 128) * NN / 2],
        // adds its own, and stores the total into rank q + 1's (st.async), or, the last,
        // scales and stores the tile.
        const uint32_t slot = smem_addr(partials) + (threadIdx.x - 128) * (NN / 2) * 4;
        if (nc > 1) cluster_wait();
        if (rank == 0) {
#pragma unroll
          for (int j = 0; j < NN / 2; ++j) acc[j] = 0.0f + acc[j];
        } else {
          if (threadIdx.x == 128) mbar_arrive_expect_tx(recv, 128 * C * (NN / 2) * 4);
          mbar_wait(recv, 0);
          const float* prev = partials + (threadIdx.x - 128) * (NN / 2);
#pragma unroll
          for (int j = 0; j < NN / 2; ++j) acc[j] = prev[j] + acc[j];
        }
        if (rank + 1 < nc) {
          const uint32_t ra = cluster_map(slot, rank + 1), rb = cluster_map(recv, rank + 1);
#pragma unroll
          for (int j = 0; j < NN / 2; j += 4) st_async_v4(ra + 4 * j, acc[j], acc[j + 1], acc[j + 2], acc[j + 3], rb);
          continue;  // one tile a block: the loop ends
        }
      }
      // kStaged: the warp's outputs go through shared memory (below); else each thread
      // stores its own.
      OutT* stage = reinterpret_cast<OutT*>(reinterpret_cast<uint8_t*>(partials) + ((threadIdx.x - 128) / 32) * kStageStride);
      if constexpr (kStaged) __syncwarp();  // every lane has read its received sums there
#pragma unroll
      for (int j = 0; j < NN / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = 64 * c + 16 * w + g + 8 * (e / 2), m = 8 * j + 2 * t + (e % 2);
          if constexpr (kEpi == kTmaDirect || kSends) {
            // As the sums over ranks: 0 + x (-0 becomes +0), times the scale, plus the bias.
            const int64_t n = tile * kTmaRows + r;
            const bool mine = kEpi != kTmaSwap || ((4 * j + e < H) == (rank == 0));
            auto y = [&] {
              float v = (kSends ? acc[4 * j + e] : 0.0f + acc[4 * j + e]) * sr[e / 2];
              return from_float<OutT>(p.bias ? v + br[e / 2] : v);
            };
            if constexpr (kStaged) {
              if (mine) stage[m * 16 + g + 8 * (e / 2)] = y();
            } else if (mine && m < p.M && n < p.N) {
              static_cast<OutT*>(p.out)[m * p.ldo + n] = y();
            }
          } else {
            if (m < p.M) partials[m * kTmaRows + r] = acc[4 * j + e];
          }
        }
      }
      if constexpr (kStaged) {
        // The warp's [NN][16] tile, row m's 16 weight rows one 32-byte sector of out: two
        // lanes a row, 16 bytes each, where four rows took each two-byte store before.
        __syncwarp();
        const int64_t nw = tile * kTmaRows + 64 * c + 16 * w;
        const bool vec = p.ldo % 8 == 0 && (reinterpret_cast<uintptr_t>(p.out) & 15) == 0;
#pragma unroll
        for (int v = lane; v < 2 * NN; v += 32) {
          const int m = v / 2, half = v % 2;
          const bool mine = kEpi != kTmaSwap || ((4 * (m / 8) + 2 * half + m % 2 < H) == (rank == 0));
          const int64_t n0 = nw + 8 * half;
          if (!mine || m >= p.M || n0 >= p.N) continue;
          OutT* o = static_cast<OutT*>(p.out) + m * p.ldo + n0;
          const OutT* src = stage + m * 16 + 8 * half;
          if (vec && n0 + 8 <= p.N) {
            *reinterpret_cast<uint4*>(o) = *reinterpret_cast<const uint4*>(src);
          } else {
            for (int q = 0; q < 8 && n0 + q < p.N; ++q) o[q] = src[q];
          }
        }
        __syncwarp();  // the next tile (a persistent block) writes the stage again
      }
    }
  }
  if constexpr (kEpi != kTmaDirect && !kSends) {
    wg_finish_tile<OutT, kTmaRows, kTmaThreads, kEpi == kTmaByRow>(p, cluster, partials, nc, rank, tile0);
  }
}

}  // namespace
