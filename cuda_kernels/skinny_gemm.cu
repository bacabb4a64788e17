// FP8 GEMM for decode batch sizes on NVIDIA GPUs (built for sm_90):
//   out[m, n] = sum_k a[m, k] * b[n, k] * scale_a * scale_b[n or 0] (+ bias[n]),
// a [M, K] fp8 activations (M <= 32 per launch slice), b [N, K] fp8 weights (nn.Linear's
// layout). Torch-free; skinny_gemm_torch.cpp checks the tensors.
//
// Why this shape of kernel: at M <= 32 the product is memory bound. The weight is read
// once (N*K bytes) and the activation (M*K bytes) and the output are tiny, so the time
// floor is N*K / HBM bandwidth and the work is to keep enough weight bytes in flight on
// every SM, evenly, from the first cycle to the last.
//
// - A warp owns 32 weight rows (two 16-row m-tiles of mma.m16n8k16 on f16 operands: the
//   weight is the 16-row operand, the activation rows the 8-column one, D^T = B A^T) and
//   a contiguous range of K. Per 64-byte chunk of K, lane (g = lane / 4, t = lane % 4)
//   loads 16 bytes of weight rows g and g + 8 of each m-tile and of activation row g of
//   each n-tile, all at byte 16t: one 16-byte load each, every row's 64 bytes whole
//   32-byte sectors. The MMA sees the chunk's K in a permuted order (mma_chunk), the same
//   for both operands, so the sums are unchanged and no shuffle is needed.
// - sm_90 has no fp8 mma.sync: the fp8 bytes become f16 first (exactly), the weight
//   through the conversion instruction (F2FP, 2 bytes each), and the MMAs are
//   HMMA.16816.F32 (fp32 accumulation). A weight byte is converted once; the activation
//   is needed by every warp, which is what grows with M. Two ways, per M:
//   * convert 1 (the default where convert_for picks neither 3 nor 4), or 2: each
//     warp converts its activation fragments itself (at M <= 8 a few percent of its
//     instructions). Weight loads skip L1
//     (L1::no_allocate) and are unrolled U chunks deep in registers; activation loads go
//     through L1, where the warps of a block that share a K range reuse them.
//   * convert 3 (the default at M > 8 for weights under 64 MiB with K past 8192):
//     converting per warp with integer operations (convert 2) cost, at M = 32, 144
//     integer instructions per chunk (182 of 257 issued; scripts/sass_mix.py), and
//     with the fragments of four n-tiles in registers only one chunk of weight fit in
//     flight per warp, so each
//     warp's load latency and arithmetic ran in series. Instead a pre-pass writes an f16
//     copy of a (a16_offset's fragment order, L2-resident: 2 KB per row per 1K of K) that
//     the warps load as ready B fragments, and the weight streams through a per-warp
//     cp.async ring in shared memory (ring_loop: 3 chunks in flight whatever the register
//     use). The GEMM is launched as a programmatic dependent of the pre-pass: it starts
//     streaming weights while the copy is written. 140 instructions per chunk at M = 32.
// - Split-K: the warps of a block split K (their fp32 partials meet in shared memory),
//   and so do the blocks of a thread-block cluster (up to 8; the partials are read
//   through distributed shared memory). No atomics, no counters: deterministic and
//   CUDA-graph capturable (the f16 copy is a workspace from the caller's allocator). The
//   launcher sizes the split so that about 16 warps per SM stream weights and the whole
//   grid is resident at once.
// - convert 4 (M <= 32, sm_90a): no conversion, Hopper's fp8 warpgroup MMA with the weight
//   as the register operand (skinny_gemm_wgmma_kernel); 5 the same in persistent clusters.
// - convert 6 (M <= 32, sm_90a; the default at N >= 1024, convert_for): the same MMAs with
//   both operands in shared memory, copied there by the tensor memory accelerator from a
//   producer warpgroup (skinny_gemm_tma_kernel). The paths above serve the rest.
// - convert 7 (M <= 2; the default at M = 1 for N >= 1024, K >= 4096 up to 40 MiB of weight
//   where convert 8's rule does not apply, and for K of 8-16 KB up to 64 MiB; at M = 2 for
//   N >= 1024, K of 8-16 KB up to 64 MiB): no tensor cores and no K split between blocks,
//   whole weight rows a block (skinny_gemm_rows_kernel), so no block waits for another's
//   partial sums at the end; where a row is one pass of K, persistent blocks with the next
//   row in flight (skinny_gemm_rows_persist_kernel).
// - convert 8 (M = 1, sm_90a; the default where its blocks fill the GPU in one balanced
//   wave, or take several: rows_wgmma_rows): convert 7's division with convert 4's MMAs,
//   the MMA's 64 logical rows a block's few weight rows cut into slices of K
//   (skinny_gemm_rows_wgmma_kernel).
// - Tails: rows past N and activation rows past M are clamped to the last real row
//   (valid memory; their outputs are never stored) or, in the f16 copy, zeros. K % 64 != 0
//   leaves a last chunk that loads zeros past K. Rows that are not 16-byte aligned, or
//   K % 16 != 0, take a byte-load kernel: correct for any layout, not fast.
//
// Files: skinny_gemm_common.cuh (constants, loads, conversions), skinny_gemm_mma.cuh
// (converts 1-3), skinny_gemm_rows.cuh (convert 7, any-layout bytes), skinny_gemm_wgmma.cuh
// (4, 5, 8), skinny_gemm_tma.cuh (6); this file chooses among them and launches.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "gpu_launchers.h"
#include "device_info.cuh"
#include "launch.cuh"
#include "ptx.cuh"
#include "vec_io.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

#include "skinny_gemm_common.cuh"
#include "skinny_gemm_mma.cuh"
#include "skinny_gemm_rows.cuh"
#include "skinny_gemm_wgmma.cuh"
#include "skinny_gemm_tma.cuh"

namespace {

namespace cg = cooperative_groups;
using namespace inference_kernels;
using namespace inference_kernels::cuda;

template <typename OutT, int NT>
auto kernel_for(int convert) {
  return convert == kF16Copy ? skinny_gemm_kernel<OutT, NT, kF16Copy>
         : convert == kIntOps ? skinny_gemm_kernel<OutT, NT, kIntOps>
                              : skinny_gemm_kernel<OutT, NT, kCvt>;
}

// n-tiles of 8 activation rows: M 1-8, 9-16, 17-24, 25-32 (and M > 32 in slices of 32).
int n_tiles(int64_t M) { return M >= kMaxM ? 4 : int((M + 7) / 8); }

// The 16-byte-load kernel takes rows that are 16-byte aligned with K % 16 == 0.
bool vector_path(const SkinnyGemmParams& p) {
  return p.K % 16 == 0 && p.lda % 16 == 0 && p.ldb % 16 == 0 && aligned(p.a, 16) && aligned(p.b, 16);
}

// convert 5: the smallest K split (cluster) whose shared memory fits a block with the
// caller's ring slots (warps_per_tile), or 3; 0 if none up to 8 does.
int ring_min_cluster(const SkinnyGemmParams& p) {
  const int smem_per_block = device_attribute_once<cudaDevAttrMaxSharedMemoryPerBlockOptin>();
  const int64_t nchunks = (p.K + kChunk - 1) / kChunk;
  const int slots = p.warps_per_tile > 0 ? p.warps_per_tile : 3;
  for (int nc = 1; nc <= kMaxCluster; ++nc) {
    if (wg_ring_smem_bytes(slots, (nchunks + nc - 1) / nc, n_tiles(p.M)) <= smem_per_block) return nc;
  }
  return 0;
}

// convert 4's shared memory a block for a K split of nc (the activation's share of K).
int64_t wgmma_smem(const SkinnyGemmParams& p, int nc) {
  const int64_t nchunks = (p.K + kChunk - 1) / kChunk;
  return wg_smem_bytes((nchunks + nc - 1) / nc, n_tiles(p.M));
}

// The smallest K split (1..8) whose shared memory fits a block, 0 if none (1 for operands
// the byte kernel takes).
int wgmma_min_cluster(const SkinnyGemmParams& p) {
  if (!vector_path(p)) return 1;
  const int smem_per_block = device_attribute_once<cudaDevAttrMaxSharedMemoryPerBlockOptin>();
  for (int c = 1; c <= kMaxCluster; ++c) {
    if (wgmma_smem(p, c) <= smem_per_block) return c;
  }
  return 0;
}

// convert 6: the operands it takes (M <= 32, rows 16-byte aligned, K % 16 == 0, sizes
// that the tensor maps' 32-bit coordinates reach) on a device with the tensor-map encoder.
bool tma_ready(const SkinnyGemmParams& p) {
  return p.M <= kMaxM && vector_path(p) && p.N <= INT32_MAX && p.K <= INT32_MAX &&
         device_attribute_once<cudaDevAttrComputeCapabilityMajor>() == 9 && tensor_map_encoder() != nullptr;
}

// The activation's conversion: the caller's, else (H200, bench_skinny_gemm.py --paths and
// --tune, BENCHMARKS.md, thirteenth and fourteenth sessions, 10 weights of 2 to 56 MiB and
// 3 of 104 to 416):
// - convert 6 (the TMA-fed MMAs) at M <= 32 and N >= 1024 (smaller N not measured), where
//   the caller left tiles_per_block and warps_per_tile to the launcher. Against the rules
//   below (s25b/s25d, --tune, all 11 weights, M 1 / 8 / 16 / 32) it won or tied at 43 of
//   44 points, by up to 1.4x at M 32 (4096 x 14336 20.92 against 29.17 us, 13312 x 16384
//   59.99 against 72.39, 2304 x 16384 15.31 against 22.37), and lost at 4096 x 4096 M 1
//   (8.13 against 7.86; at a K split of 2, 7.77). The rules below stand for the rest
//   (M > 32 slices, N < 1024, other devices, the caller's splits).
// - with IK_SKINNY_GEMM_RING=1 only, convert 5 (4's MMAs, persistent, the weights through a
//   shared-memory ring) at N >= 2048 up to 16 MiB at every M, and at M 17-32 with K >= 8192
//   or past 64 MiB (the last so a chain of large GEMMs stays on convert 5; see use_ring)
//   (twenty-third session, s23d, 11 weights at M 1 / 8 / 16 / 17 / 24 / 32, us against the
//   default before it): 2304 x 16384 at M 24 / 32 17.65 / 18.81 against 18.36 / 22.10;
//   13312 x 16384 62.93 / 64.39 / 68.76 at M 17 / 24 / 32 against 64.67 / 65.76 / 73.21;
//   4096 x 14336 22.76 / 24.58 / 25.50 against 26.59 / 26.85 / 28.81; 7168 x 8192 22.13 /
//   23.33 / 24.52 against 23.71 / 24.16 / 25.94; 4096 x 4096 at M 8 / 16 / 17 / 24 / 32
//   7.90 / 8.68 / 9.30 / 9.64 / 10.69 against 8.31 / 9.02 / 10.16 / 10.78 / 12.04. Elsewhere
//   it lost or tied (at N < 2048 by up to 5%). Off by default: see use_ring.
// - the fp8 warpgroup MMA (4), for N >= 512 (smaller N not measured) where it won or tied:
//   * M <= 16 and N x K <= 16 MiB. 4096 x 4096 at M 1 / 8 / 16 (s13d): 8.29 / 9.12 /
//     10.72 us against 9.28 / 9.48 / 13.54 for the better of 1 and 3; 1024 x 8192 6.72 /
//     7.47 / 8.39 against 7.75 / 7.90 / 9.72; 512 x 8192 5.80 / 6.12 / 6.69 against 6.14
//     / 6.33 / 7.86 (s13e).
//   * M <= 16 up to 36 MiB (s14b, with wgmma_groups' choice; us at M 1 / 8 / 16 against
//     the better of 1 and 3): 2304 x 16384 13.77 / 15.18 / 18.00 against 15.48 / 15.87
//     / 18.64; 6144 x 4096 10.58 / 11.17 / 12.97 against 11.40 / 11.91 / 13.81; 8192 x
//     3584 10.85 / 11.83 / 14.06 against 11.50 / 11.87 / 14.05. (With one group a lane,
//     s13h, it lost at 6144 x 4096 M 8: 12.22 against 11.94.)
//   * M <= 8 up to 64 MiB with K <= 8192 and N <= K, one group a lane past 36 MiB (s17i,
//     us at M 1 / 2 / 4 / 8 against convert 1): 7168 x 8192 18.68 / 18.62 / 18.77 / 19.68
//     against 20.90 / 21.04 / 21.08 / 21.09; 6144 x 8192 16.77 / 16.77 / 17.21 / 18.13
//     against 18.36 / 18.56 / 18.59 / 18.57; 5120 x 8192 14.38 / 14.36 / 14.25 / 14.75
//     against 15.33 / 15.41 / 15.45 / 15.55. Taller than wide it lost: 8192 x 7168 18.51-
//     20.64 against 18.06-18.22 (the rule N <= K is fitted to these four weights). Before
//     the activation's copy went to cp.async it won at M = 1 only (s14b). From 56 MiB at
//     K past 8192 it lost at M 1 too (4096 x 14336 20.0 against 19.0, s14a / s13f).
//   * M 17-32 up to 16 MiB (s14h, M 17 / 24 / 32): 4096 x 4096 11.76 / 12.36 / 13.67
//     against 14.23 / 14.60 / 16.24; 1024 x 8192 8.25 / 8.39 / 9.44 against 10.70 /
//     10.97 / 12.17; 1280 x 8192 8.78 / 8.93 / 9.97 against 11.13 / 11.46 / 12.60.
//   * M 17-24 up to 36 MiB, and M 25-32 there at K <= 8192, since the activation's copy
//     went to cp.async (s17c, M 17 / 24 / 32 against the default then, convert 1 or 3):
//     6144 x 4096 12.99 / 14.65 / 14.71 against 14.57 / 14.77 / 16.48; 8192 x 3584 14.10
//     / 14.71 / 16.04 against 14.57 / 14.75 / 16.08; 2304 x 16384 16.95 / 17.90 at M 17 /
//     24 against 20.14 / 20.46, but 26.83 against 22.27 at M 32. Past 36 MiB it lost
//     (7168 x 8192 33.1-35.5 against 23.6-25.9).
// - M > 8 and weights under 64 MiB with K past 8192 (past 36 MiB, or M > 24), or M > 16
//   at 4096 x 4096 where convert 4 cannot run (N >= 4096 and N x K <= 16 MiB): the f16
//   copy (3). 2304 x 16384 at M 32: 22.45 against 30.53 with the instruction; 4096 x
//   4096 at M 32: 16.30 against 19.24. Elsewhere below 64 MiB the instruction wins (8192 x 3584 at M 32: 16.44
//   against 22.13; 1280 x 8192 12.60 against 13.24), as it does past 64 MiB (13312 x
//   16384 at M 16 / 32, twelfth session: 59.2 / 72.9 us against 74.2 / 85.1 with the copy).
// - else the conversion instruction in every warp (1).
// The integer conversion (2) lost everywhere and reads an fp8 NaN as 480: caller's only.
// The weight sizes the rules below (convert_for, wgmma_groups) turn on.
constexpr int64_t kMiB = int64_t{1} << 20, kSmallWeight = 16 * kMiB, kMidWeight = 36 * kMiB,
                  kLargeWeight = 64 * kMiB;

// convert 5 where ring_wins (below) only with IK_SKINNY_GEMM_RING=1 (read at each launch;
// before convert 6's rule, which is faster wherever this one applies: an experiment switch).
// Alone it is faster up to 16 MiB and at M 17-32 with K >= 8192, but convert 1 after it
// runs 28-37% slower (as after cuDNN's decode attention, or up to 44% after a copy; not after
// convert 1 or 4; not the shared/L1 split: a carveout hint changed nothing), so at M 17-32
// it also takes the weights past 64 MiB, where convert 1 would follow it: the decode MLP
// then ties the default (twenty-fourth session, s24c/s24g/s24i; profile_mlp_chain.py --state).
bool use_ring() {
  const char* v = std::getenv("IK_SKINNY_GEMM_RING");
  return v && v[0] == '1';
}

// convert 7 at M = 1 where convert 6 ran (N >= 1024), K >= 4096 and up to 40 MiB of
// weight: no K split, so no reduction waiting at the end for the last block of a tile
// (s41g, us, against convert 6 in the same run: 2304 x 16384 11.37 / 11.90, 6144 x 4096
// 8.25 / 8.78, 4096 x 4096 6.36 / 6.72, 1280 x 8192 4.58 / 6.04, 1024 x 8192 4.11 /
// 5.90). Past 40 MiB the split streams as well and it is level or behind (s41f / s41g:
// 13312 x 16384 52.61 / 52.09 and 52.58 / 53.14, 16384 x 6656 27.72 / 26.81 and 27.73 /
// 27.23, 4096 x 14336 16.46 / 16.27; ahead at 7168 x 8192, 15.96 / 16.32, one run).
// convert 7's persistent blocks (launch_rows) where convert 8 ran before too: a row is one
// pass past 8 KB, up to 64 MiB of weight (4096 x 14336: 16.03 / 15.98 us against convert
// 8's 16.15 / 16.17, s46e / s46f; not measured past 64 MiB).
// At M = 2 (the second row of a in shared memory in the persistent blocks) where K is 8-16
// KB up to 64 MiB: H100, s55a / s55b (two passes) / s55c, us, against convert 6: 2304 x
// 16384 14.55-14.64 against 15.39-15.46, 1280 x 8192 5.89-5.93 against 6.60-6.63, 1024 x
// 8192 5.03-5.06 against 6.16-6.19, 7168 x 8192 21.16-21.24 against 21.51-21.60, 4096 x
// 14336 level (21.45-21.46 against 21.52-21.53). Convert 6 stays where K < 8192 (6144 x
// 4096 11.06-11.13 against 10.63-10.69, 4096 x 4096, 28672 x 4096, 8192 x 3584, 16384 x 6656 2-10%
// behind) and past 64 MiB (13312 x 16384: 72.25-72.71 against 72.81-73.15, not in the rule).
bool rows_persist_wins(const SkinnyGemmParams& p) {
  return p.M <= kSkinnyGemmRowsMaxM && p.N >= 1024 && p.K > 8192 && p.K <= 16384 && p.N * p.K <= 64 * kMiB && vector_path(p) &&
         !p.tiles_per_block && !p.warps_per_tile && !p.cluster;
}

bool rows_wins(const SkinnyGemmParams& p) {
  const bool m1 = p.M == 1 && p.K >= 4096 && p.N * p.K <= 40 * kMiB;
  const bool m2 = p.M == 2 && p.K >= 8192 && p.K <= 16384 && p.N * p.K <= 64 * kMiB;
  return (m1 || m2) && p.N >= 1024 && vector_path(p) && !p.tiles_per_block && !p.warps_per_tile && !p.cluster;
}

// Convert 8's rows a block at M = 1 where it is the default, 0 where it is not (one group
// in flight either way):
// - 8 where those blocks fill the GPU in one wave, at least 3.5 an SM and the SMs within
//   a tenth of each other in blocks: its one-shot blocks then end together. s42d / s42e
//   (us, against the default before it, convert 7 or 6): 6144 x 4096 7.68 / 7.64 against
//   8.24 / 8.27, 4096 x 4096 5.81 / 5.80 against 6.32 / 6.30, 7168 x 8192 15.54 / 15.60
//   against 16.35 / 16.10, 4096 x 14336 16.25 / 16.29 against 16.35 / 16.31.
// - 4 where 8 would take more than one wave (K >= 3584): many waves of small blocks,
//   refilled as they end. s42d / s42e: 13312 x 16384 51.68 / 51.22 against 53.54 /
//   53.16, 16384 x 6656 26.84 / 26.83 against 27.25 / 27.42, 28672 x 4096 28.40 / 28.48
//   against 29.77 / 29.90, 8192 x 3584 9.20 / 9.19 against 9.42 / 9.38.
// - Elsewhere convert 8 lost: SMs apart in blocks (2304 x 16384, 2.2 blocks of 8 an SM:
//   12.61 / 12.44 against 11.45 / 11.46; 4 rows a block 11.63 / 11.59) or too few blocks
//   an SM to keep loads in flight (1024 x 8192, 128 blocks: 5.83 against 4.17).
int rows_wgmma_rows(const SkinnyGemmParams& p) {
  if (p.M != 1 || p.K < 3584 || p.K > kSkinnyGemmRowsWgmmaMaxK || !vector_path(p) || p.tiles_per_block ||
      p.warps_per_tile || p.cluster || device_attribute_once<cudaDevAttrComputeCapabilityMajor>() != 9) {
    return 0;
  }
  constexpr auto kernel = skinny_gemm_rows_wgmma_kernel<__nv_bfloat16, 8, 1>;  // both out types: same registers
  const int64_t sms = sm_count(), blocks = (p.N + 7) / 8;
  const int smem_per_sm = device_attribute_once<cudaDevAttrMaxSharedMemoryPerMultiprocessor>();
  // 1 KB a block of shared memory the system reserves
  const int64_t per_sm = std::min<int64_t>(resident_blocks_once<kernel, 128>() / sms,
                                           smem_per_sm / (RowsWgmma<8>::smem(p.K) + 1024));
  if (blocks > per_sm * sms) return 4;
  const int64_t most = (blocks + sms - 1) / sms;  // blocks on the busiest SM
  return p.K >= 4096 && 2 * blocks >= 7 * sms && 10 * blocks >= 9 * most * sms ? 8 : 0;
}

int convert_for(const SkinnyGemmParams& p, int nt) {
  if (p.convert > 0) return p.convert;
  const int64_t bytes = p.N * p.K;
  const bool small = bytes <= kSmallWeight, mid = bytes <= kMidWeight;  // small: the f16 copy's rule
  const bool sm90a = p.N >= 512 && vector_path(p) && device_attribute_once<cudaDevAttrComputeCapabilityMajor>() == 9;
  // Only where the caller left the work split to the launcher (the fields mean other things there).
  const bool ring_wins = p.N >= 2048 && (small || (nt > 2 && (p.K >= 8192 || bytes > kLargeWeight)));
  if (ring_wins && p.M <= kMaxM && sm90a && !p.tiles_per_block && !p.warps_per_tile && !p.cluster && use_ring() &&
      ring_min_cluster(p) > 0) {
    return kWgmmaRing;
  }
  if (rows_persist_wins(p)) return kRows;
  if (rows_wgmma_rows(p)) return kRowsWgmma;
  if (rows_wins(p)) return kRows;
  if (p.N >= 1024 && !p.tiles_per_block && !p.warps_per_tile && tma_ready(p)) return kTma;
  const bool wgmma_wins = (nt == 1 && bytes <= kLargeWeight && p.K <= 8192 && p.N <= p.K) ||
                          (p.M <= kMaxM && (small || (mid && (nt <= 3 || p.K <= 8192))));
  if (wgmma_wins && sm90a && wgmma_min_cluster(p) > 0) {
    return kWgmma;
  }
  const bool copy = bytes < kLargeWeight && (p.K > 8192 || (nt >= 3 && small && p.N >= 4096));
  return nt >= 2 && copy ? kF16Copy : kCvt;
}

// convert 4's groups of chunks in flight a lane: the caller's (config warps_per_tile),
// else two past 16 MiB at K <= 8192 or M > 8. s14a (--tune, us, one group against two):
// 6144 x 4096 at M 1 / 8 / 16 10.73 / 12.27 / 13.71 against 10.57 / 11.18 / 13.02;
// 8192 x 3584 11.38 / 12.37 / 14.20 against 10.89 / 11.71 / 13.97; 7168 x 8192 20.06 /
// 21.55 / 24.30 against 19.67 / 20.57 / 22.89; 2304 x 16384 at M 16 18.39 against 17.95.
// One group won below 16 MiB (1280 x 8192 6.81 / 7.17 / 8.11 against 7.09 / 7.77 /
// 8.70; 4096 x 4096 at M 1 8.17 against 8.49) and at K past 8192 for M <= 8 (2304 x
// 16384 13.56 / 15.08 against 14.34 / 15.53).
// Past 36 MiB at M <= 8 one group (s17i, one against two at M 1 / 8): 5120 x 8192 14.38
// / 14.75 against 15.19 / 16.65; 6144 x 8192 16.77 / 18.13 against 17.16 / 18.08; 7168 x
// 8192 18.68 / 19.68 against 18.68 / 19.92.
int wgmma_groups(const SkinnyGemmParams& p, int nt) {
  if (p.warps_per_tile > 0) return p.warps_per_tile;
  const int64_t bytes = p.N * p.K;
  if (bytes > kMidWeight && nt == 1) return 1;
  return bytes > kSmallWeight && (p.K <= 8192 || nt == 2) ? 2 : 1;
}

// Resident blocks of `threads` per SM for this kernel (registers and shared memory).
template <typename Kernel>
int blocks_per_sm(Kernel kernel, int threads, size_t smem) {
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem) != cudaSuccess) n = 1;
  return std::max(n, 1);
}

// A launch of `blocks` x `threads` in clusters of (nc, 1, 1): attr (one element) holds
// the cluster's dimensions.
cudaLaunchConfig_t cluster_launch(int64_t blocks, int threads, size_t smem, cudaStream_t stream, int nc,
                                  cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(blocks), 1, 1);
  cfg.blockDim = dim3(unsigned(threads), 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(nc);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

// Thread-block clusters of `nc` blocks resident on the whole GPU at once: clusters live
// inside one GPC, so this can be less than (SMs x blocks per SM) / nc. 0 if not known.
template <typename Kernel>
int clusters_resident(Kernel kernel, int threads, size_t smem, int nc) {
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg = cluster_launch(nc, threads, smem, nullptr, nc, attr);
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
    (void)cudaGetLastError();
    n = 0;
  }
  return n;
}

// convert 4: the K split (cluster) is the largest up to 8 whose clusters are all resident
// at once (a second wave would stream alone; clusters live inside one GPC, so fewer fit
// than SMs x blocks per SM / nc), else the smallest whose activation copy fits in shared
// memory; the caller's `cluster` where given. Resident clusters are asked once per device,
// split and blocks per SM (registers and shared memory).
template <typename OutT, int NH, int WGS, int G = 1>
int launch_wgmma(const SkinnyGemmParams& p, cudaStream_t stream) {
  constexpr auto kernel = skinny_gemm_wgmma_kernel<OutT, NH, WGS, G>;
  constexpr int kThreads = 128 * WGS;
  const int smem_per_block = device_attribute_once<cudaDevAttrMaxSharedMemoryPerBlockOptin>();
  const int min_nc = wgmma_min_cluster(p);
  if (!smem_per_block || !min_nc || (p.cluster > 0 && p.cluster < min_nc)) return cudaErrorInvalidValue;
  const cudaError_t e = max_dynamic_smem_once<kernel>(smem_per_block);
  if (e != cudaSuccess) return e;
  const int64_t tiles = (p.N + 32 * WGS - 1) / (32 * WGS);
  int nc = p.cluster;
  if (nc <= 0) {
    nc = min_nc;
    const int64_t regs_per_sm = std::max<int64_t>(1, resident_blocks_once<kernel, kThreads>() / sm_count());
    const int smem_per_sm = device_attribute_once<cudaDevAttrMaxSharedMemoryPerMultiprocessor>();
    static int resident[kDeviceSlots][kMaxCluster + 1][kMaxCluster + 1] = {};  // [device][nc][blocks per SM]
    const int dev = device_slot();
    const bool cached = dev >= 0;
    for (int c = kMaxCluster; c > min_nc; --c) {
      const int64_t smem = wgmma_smem(p, c);
      // 1 KB a block of shared memory the system reserves
      const int per_sm = int(std::min<int64_t>({regs_per_sm, smem_per_sm / (smem + 1024), kMaxCluster}));
      if (per_sm <= 0) continue;
      int n = cached ? resident[dev][c][per_sm] : 0;
      if (!n) {
        n = clusters_resident(kernel, kThreads, size_t(smem), c);
        n = n > 0 ? n : -1;
        if (cached) resident[dev][c][per_sm] = n;
      }
      if (tiles <= n) {
        nc = c;
        break;
      }
    }
  }
  const int64_t smem = wgmma_smem(p, nc);
  if (tiles * nc > INT32_MAX) return cudaErrorInvalidValue;
  const int64_t nchunks = (p.K + kChunk - 1) / kChunk;
  return launch_kernel({dim3(unsigned(tiles * nc)), dim3(kThreads), size_t(smem), stream, unsigned(nc), false}, kernel, p,
                       (nchunks + nc - 1) / nc);
}

// convert 5: clusters of nc blocks with ring slots S resident at once (0: its shared memory
// does not fit a block), asked once per device, S, nc and blocks per SM.
template <typename OutT, int NH, int S>
int ring_clusters(const SkinnyGemmParams& p, int nc) {
  constexpr auto kernel = skinny_gemm_wgmma_ring_kernel<OutT, NH, S>;
  const int smem_per_block = device_attribute_once<cudaDevAttrMaxSharedMemoryPerBlockOptin>();
  const int64_t nchunks = (p.K + kChunk - 1) / kChunk;
  const int64_t smem = wg_ring_smem_bytes(S, (nchunks + nc - 1) / nc, NH);
  if (smem > smem_per_block || max_dynamic_smem_once<kernel>(smem_per_block) != cudaSuccess) return 0;
  const int64_t regs_per_sm = std::max<int64_t>(1, resident_blocks_once<kernel, 256>() / sm_count());
  const int smem_per_sm = device_attribute_once<cudaDevAttrMaxSharedMemoryPerMultiprocessor>();
  const int per_sm = int(std::min<int64_t>({regs_per_sm, smem_per_sm / (smem + 1024), kMaxCluster}));
  if (per_sm <= 0) return 0;
  static int resident[kDeviceSlots][kMaxCluster + 1][kMaxCluster + 1] = {};  // [device][nc][blocks per SM]
  const int dev = device_slot();
  int n = dev >= 0 ? resident[dev][nc][per_sm] : 0;
  if (!n) {
    n = clusters_resident(kernel, 256, size_t(smem), nc);
    n = n > 0 ? n : -1;
    if (dev >= 0) resident[dev][nc][per_sm] = n;
  }
  return std::max(n, 0);
}

template <typename OutT, int NH, int S>
int launch_ring_with(const SkinnyGemmParams& p, int nc, int clusters, cudaStream_t stream) {
  constexpr auto kernel = skinny_gemm_wgmma_ring_kernel<OutT, NH, S>;
  const int64_t tiles = (p.N + kWgRows - 1) / kWgRows, nchunks = (p.K + kChunk - 1) / kChunk;
  const int64_t cps = (nchunks + nc - 1) / nc;
  return launch_kernel({dim3(unsigned(std::min<int64_t>(tiles, clusters) * nc)), dim3(256),
                        size_t(wg_ring_smem_bytes(S, cps, NH)), stream, unsigned(nc), false},
                       kernel, p, cps, tiles);
}

// convert 5's K split (cluster) and ring slots: the caller's where given (warps_per_tile:
// slots, 3 or 4), else the pair whose blocks take the fewest steps: rounds of tiles
// (tiles / resident clusters, rounded up) x (groups of chunks a tile + one for the tile's
// end); on a tie, 4 slots before 3, then fewer rounds.
template <typename OutT, int NH>
int launch_ring(const SkinnyGemmParams& p, cudaStream_t stream) {
  const int64_t tiles = (p.N + kWgRows - 1) / kWgRows, nchunks = (p.K + kChunk - 1) / kChunk;
  int best_nc = 0, best_s = 0, best_n = 0;
  int64_t best_cost = 0, best_rounds = 0;
  for (int s = 4; s >= 3; --s) {
    if (p.warps_per_tile > 0 && p.warps_per_tile != s) continue;
    for (int nc = 1; nc <= kMaxCluster; ++nc) {
      if (p.cluster > 0 && p.cluster != nc) continue;
      const int n = s == 4 ? ring_clusters<OutT, NH, 4>(p, nc) : ring_clusters<OutT, NH, 3>(p, nc);
      if (n <= 0) continue;
      const int64_t rounds = (tiles + n - 1) / n, cost = rounds * (wg_x_slots((nchunks + nc - 1) / nc) / kWgU + 1);
      if (!best_nc || cost < best_cost || (cost == best_cost && s == best_s && rounds < best_rounds)) {
        best_nc = nc, best_s = s, best_n = n, best_cost = cost, best_rounds = rounds;
      }
    }
  }
  if (!best_nc) return cudaErrorInvalidValue;  // no split fits (the wrapper says so first)
  return best_s == 4 ? launch_ring_with<OutT, NH, 4>(p, best_nc, best_n, stream)
                     : launch_ring_with<OutT, NH, 3>(p, best_nc, best_n, stream);
}

// convert 6: clusters of nc blocks resident at once (as many an SM as the ring leaves room for),
// asked once per device and nc; 0 if unknown.
template <typename OutT, int NN, int C>
int tma_clusters(int nc) {
  static int resident[kDeviceSlots][kMaxCluster + 1] = {};
  const int dev = device_slot();
  int n = dev >= 0 ? resident[dev][nc] : 0;
  if (!n) {
    n = clusters_resident(skinny_gemm_tma_kernel<OutT, NN, C, kTmaByElement>, 128 * (C + 1), size_t(tma_smem_bytes(NN, C)), nc);
    n = n > 0 ? n : -1;
    if (dev >= 0) resident[dev][nc] = n;
  }
  return std::max(n, 0);
}

// convert 6's K split (cluster): the caller's, else the one that fills about half the
// block slots (SMs x blocks an SM / 2 / tiles, rounded), at most 4 and at most one a stage
// of K, shrunk until every cluster is resident at once (clusters live inside one GPC).
// Each block takes a whole number of stages. Half, not all: at 1 to 8 splits over 8
// weights (s25d, two consumers, one block an SM, M 1 / 16 / 32) the fastest split put 48
// to 112 blocks on the 132 SMs, most 56 to 80 (2304 x 16384: 4; 4096 x 4096 and 4096 x
// 14336: 2; 1024 x 8192: 8; N >= 6144 at K <= 8192: 1 or 2), while filling them (2304 x
// 16384 at 7: 17.71 against 13.08 us at 4, M 1; s25c) ran up to 1.4x slower; with one
// consumer (two blocks an SM, s25g, M 8 / 32) 4096 x 4096 and 4096 x 14336 ran fastest at
// 2 (128 blocks), N >= 6144 at 1, and 1024 x 8192 and 1280 x 8192 at 4 (s25j: 6 and 8 up
// to 1.16x slower at M 32), hence the cap. Half the slots' rings keep enough bytes in
// flight; why more clusters cost so much is not measured (a GPC holding whole clusters only
// partly is the likely part).
constexpr int kTmaMaxSplit = 4;
template <typename OutT, int NN, int C>
int launch_tma(const SkinnyGemmParams& p, cudaStream_t stream) {
  constexpr auto by_element = skinny_gemm_tma_kernel<OutT, NN, C, kTmaByElement>;
  constexpr auto by_row = skinny_gemm_tma_kernel<OutT, NN, C, kTmaByRow>;
  constexpr auto direct = skinny_gemm_tma_kernel<OutT, NN, C, kTmaDirect>;
  constexpr int smem = tma_smem_bytes(NN, C), kTmaRows = 64 * C, kTmaThreads = 128 * (C + 1);
  if (!tma_ready(p)) return cudaErrorInvalidValue;
  constexpr auto push = skinny_gemm_tma_kernel<OutT, NN, C, kTmaPush>;
  constexpr auto swap = skinny_gemm_tma_kernel<OutT, NN, C, kTmaSwap>;
  cudaError_t e = max_dynamic_smem_once<by_element>(smem);
  if (e == cudaSuccess) e = max_dynamic_smem_once<by_row>(smem);
  if (e == cudaSuccess) e = max_dynamic_smem_once<direct>(smem);
  if (e == cudaSuccess) e = max_dynamic_smem_once<push>(smem);
  if (e == cudaSuccess) e = max_dynamic_smem_once<swap>(smem);
  if (e != cudaSuccess) return e;
  CUtensorMap tw, tx;
  // L2 promotion (the sectors L2 fetches around a request) off from 32 MiB of weight, else
  // 256 bytes (s26h, M 1 / 32, us, 256 against none): 13312 x 16384 56.15 / 57.51 against
  // 53.13 / 56.69, 16384 x 6656 28.70 / 30.71 against 27.37 / 30.22, 28672 x 4096 32.44 /
  // 35.69 against 30.39 / 35.26, 2304 x 16384 12.65 / 14.18 against 12.24 / 13.74; below,
  // 1024 x 8192 6.07 / 6.69 against 6.27 / 6.95, 6144 x 4096 9.06 / 10.50 against 9.13 /
  // 10.61 (128-byte promotion measured as none).
  const auto promo = p.N * p.K >= (int64_t{32} << 20) ? CU_TENSOR_MAP_L2_PROMOTION_NONE
                                                     : CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  if (!tensor_map_2d(&tw, p.b, p.N, p.K, p.ldb, kTmaRows, promo) ||
      !tensor_map_2d(&tx, p.a, p.M, p.K, p.lda, NN, promo)) {
    return cudaErrorInvalidValue;
  }
  const int64_t tiles = (p.N + kTmaRows - 1) / kTmaRows, panels = (p.K + kTmaPanel - 1) / kTmaPanel;
  const int64_t stages = (panels + kTmaP - 1) / kTmaP;
  int nc = p.warps_per_tile == kTmaDirect + 1 ? 1 : p.cluster;
  if (nc <= 0) {
    const int smem_per_sm = device_attribute_once<cudaDevAttrMaxSharedMemoryPerMultiprocessor>();
    const int64_t slots = int64_t(sm_count()) * std::max(1, smem_per_sm / (smem + 1024));  // 1 KB: the system's
    nc = int(std::clamp<int64_t>((slots / 2 + tiles / 2) / tiles, 1, std::min<int64_t>(kTmaMaxSplit, stages)));
    // Unsplit tiles that leave SMs idle, with K long enough that half a tile is still 256 KB
    // of weight: a split of 2 at M <= 16, pushed (s28a, us, M 1 / 8 / 16 / 32, split 2
    // against 1): 7168 x 8192 15.97 / 16.18 / 16.89 / 18.02 against 16.62 / 16.87 / 17.14 /
    // 17.63; with less K a tile (6144 x 4096, 8192 x 3584) it lost 2-8% at every M.
    if (nc == 1 && tiles < sm_count() && p.K >= 8192 && p.M <= 16) nc = std::min<int64_t>(2, stages);
    for (; nc > 1; --nc) {
      if (tiles <= tma_clusters<OutT, NN, C>(nc)) break;
    }
    const int64_t per = (stages + nc - 1) / nc;
    nc = int((stages + per - 1) / per);  // no block without K
  }
  const int64_t pps = (stages + nc - 1) / nc * kTmaP;  // panels a split
  if (tiles * nc > INT32_MAX) return cudaErrorInvalidValue;
  // The epilogue (warps_per_tile 1-5 force one; 4 without a split runs 3, 5 runs 4 at
  // splits other than 2): without a K split direct, in persistent blocks (as many as are
  // resident at once; more tiles than that only at 28672 x 4096 among the benchmark's
  // weights); at a split of 2 swapped; at larger splits pushed rank to rank at M <= 8,
  // else the partials by element.
  // Direct against the partials summed by weight row in one process (s27c, us, M 1 / 32):
  // 6144 x 4096 8.72 / 9.21 against 9.19 / 9.80, 8192 x 3584 9.37 / 9.87 against 9.91 /
  // 10.34, 28672 x 4096 28.91 / 31.73 against 30.88 / 33.33 (one tile a block: 29.89 /
  // 31.95), 13312 x 16384 52.12 / 54.31 against 52.78 / 55.03: 1-7% faster on all six
  // unsplit weights at M 1 / 8 / 16 / 32. Pushed against by element (s27e, s27f, M 1 / 32):
  // at a split of 2 (the launcher's at 4096 x 4096 and 4096 x 14336) 6.58 / 7.53 against
  // 7.43 / 8.50 and 16.16 / 17.61 against 16.99 / 18.64, faster at every M and weight; at a
  // split of 4 (2304 x 16384, 1280 x 8192, 1024 x 8192) 4-7% faster at M 1 and 8 (2304 x
  // 16384: 11.85 against 12.31), 2-11% slower at M 16 and 32 (three hops of 16 or 32 sums
  // a thread). By row (wg_sum_rows) lost to by element at splits of 4 at every M (s27a).
  // Swapped against pushed at a split of 2 (s29a, M 1 / 16 / 32): 4096 x 4096 6.64 / 6.92 /
  // 7.40 against 6.67 / 7.17 / 7.73, 4096 x 14336 16.00 / 16.63 / 17.27 against 16.01 /
  // 16.79 / 17.57; over all 11 weights level at M 1, 0.4-3.6% faster at M 16, 0-5.5% at M 32
  // (half the sums a thread waits for, where the chain's last rank waits for all of them).
  int epi = p.warps_per_tile ? p.warps_per_tile - 1
            : nc == 1 ? kTmaDirect : nc == 2 ? kTmaSwap : p.M <= 8 ? kTmaPush : kTmaByElement;
  if (epi == kTmaSwap && nc != 2) epi = kTmaPush;
  if (epi == kTmaPush && nc == 1) epi = kTmaDirect;
  int64_t blocks = tiles * nc;
  if (epi == kTmaDirect) blocks = std::min(tiles, std::max<int64_t>(1, resident_blocks_once<direct, kTmaThreads, smem>()));
  return launch_kernel({dim3(unsigned(blocks)), dim3(kTmaThreads), size_t(smem), stream, unsigned(nc), false},
                       epi == kTmaSwap ? swap : epi == kTmaPush ? push : epi == kTmaDirect ? direct : epi == kTmaByRow ? by_row : by_element,
                       tw, tx, p, int(pps));
}

template <typename OutT, int NT>
int launch(const SkinnyGemmParams& p, cudaStream_t stream) {
  const int convert = convert_for(p, NT);
  if (convert == kTma) {
    if (p.M > kMaxM) return cudaErrorInvalidValue;  // the wrapper says so first
    // tiles_per_block: consumer warpgroups a block (64 weight rows each); else one (two
    // blocks an SM). One against two (s25g, M 8 / 32, us, each at the launcher's split):
    // 6144 x 4096 9.31 / 10.52 against 10.19 / 12.13; 28672 x 4096 32.81 / 35.77 against
    // 33.79 / 37.90; 8192 x 3584 10.04 / 11.15 against 10.54 / 12.42; 7168 x 8192 17.63 /
    // 19.19 against 18.53 / 20.78; 13312 x 16384 56.25 / 57.58 against 56.59 / 58.32; at a
    // split of 2, 4096 x 4096 7.48 / 8.51 against 8.12 / 9.82. At a split of 4 (s25j, M 1 /
    // 16 / 32): 1280 x 8192 6.30 / 6.48 / 6.97 against 6.70 / 6.80 / 8.08; 1024 x 8192 6.12
    // / 6.27 / 6.74 against 6.09 / 6.13 / 7.12; 2304 x 16384 12.77 / 13.29 / 14.27 against
    // 12.55 / 13.29 / 14.23.
    const bool one = p.tiles_per_block != 2;
    return one ? launch_tma<OutT, 8 * NT, 1>(p, stream) : launch_tma<OutT, 8 * NT, 2>(p, stream);
  }
  if (convert == kWgmmaRing) {
    if (p.M > kMaxM) return cudaErrorInvalidValue;  // the wrapper says so first
    return launch_ring<OutT, NT>(p, stream);
  }
  if (convert == kWgmma) {
    // tiles_per_block: warpgroups a block (32 weight rows each), 2 unless given
    const bool one = p.tiles_per_block == 1;
    if (p.M > kMaxM) return cudaErrorInvalidValue;  // the wrapper says so first
    if constexpr (NT <= 2) {
      if (wgmma_groups(p, NT) == 2) {
        return one ? launch_wgmma<OutT, NT, 1, 2>(p, stream) : launch_wgmma<OutT, NT, 2, 2>(p, stream);
      }
    }
    // M > 16: one group (two would hold 64 weight registers beside 48-64 accumulators)
    return one ? launch_wgmma<OutT, NT, 1>(p, stream) : launch_wgmma<OutT, NT, 2>(p, stream);
  }
  if (convert != kCvt && convert != kIntOps && convert != kF16Copy) return cudaErrorInvalidValue;
  if (convert == kF16Copy && !p.workspace) return cudaErrorInvalidValue;  // the caller's workspace
  const auto kernel = kernel_for<OutT, NT>(convert);
  const size_t kWarpSmem = convert == kF16Copy ? warp_smem_bytes<NT, kF16Copy>() : warp_smem_bytes<NT, kCvt>();
  if (kMaxBlockWarps * kWarpSmem > 48 * 1024) {
    // Past the default 48 KB of dynamic shared memory (the ring: 64 KB for 8 warps).
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               int(kMaxBlockWarps * kWarpSmem));
    if (e != cudaSuccess) return e;
  }
  Geometry geo{};
  geo.tiles = (p.N + kTileRows - 1) / kTileRows;
  geo.nchunks = (p.K + kChunk - 1) / kChunk;
  const int sms = sm_count();
  // Resident blocks of `warps` warps per SM (registers, shared memory), asked once.
  static int resident_cache[4][kMaxBlockWarps + 1] = {};
  const auto resident = [&](int warps) {
    int& n = resident_cache[convert][warps];
    if (!n) n = blocks_per_sm(kernel, warps * 32, size_t(warps) * kWarpSmem);
    return n;
  };
  const int occ_warps = std::min(64, resident(kMaxBlockWarps) * kMaxBlockWarps);
  // Blocks of `warps` warps resident at once in clusters of `nc`: for the f16-copy path,
  // which picks clusters of up to 8 for big weights, counted in whole clusters (asked
  // once); the other paths keep their SMs x blocks-per-SM estimate.
  static int cluster_cache[kMaxBlockWarps + 1][kMaxCluster + 1] = {};
  const auto fits = [&](int warps, int nc) -> int64_t {
    if (nc <= 1 || convert != kF16Copy) return int64_t(sms) * resident(warps);
    int& n = cluster_cache[warps][nc];  // 0: not asked yet; -1: none fit (or unknown)
    if (!n) {
      n = clusters_resident(kernel, warps * 32, size_t(warps) * kWarpSmem, nc);
      if (n <= 0) n = -1;
    }
    return n > 0 ? int64_t(n) * nc : 0;
  };

  // The work split for `rb` tiles per block (the caller's fields where given).
  struct Plan {
    int rb, kw, nc;
    int64_t row_blocks, warps;  // warps: those resident at once
  };
  const auto plan = [&](int rb) {
    rb = int(std::min<int64_t>(rb, geo.tiles));
    const int max_kw = kMaxBlockWarps / rb;
    const int64_t row_blocks = (geo.tiles + rb - 1) / rb;
    // K splits per tile: about 16 streaming warps per SM in all (fewer if registers say
    // so), each split at least 4 chunks (256 bytes of each of its 32 rows).
    const int64_t target = int64_t(sms) * std::min(occ_warps, 16);
    int64_t want = target / (row_blocks * rb);
    want = std::clamp<int64_t>(want, 1, std::max<int64_t>(1, geo.nchunks / 4));
    want = std::min<int64_t>(want, int64_t(max_kw) * kMaxCluster);
    // The caller's split where given; else the fewest cluster blocks that reach `want`
    // with up to max_kw warps each. One wave: with more blocks than fit at once, the last
    // wave would stream alone, so shrink the cluster (re-spreading its share over the
    // warps) until the grid fits; a huge N may never fit, and then runs in waves.
    const auto warps_for = [&](int clusters) {
      return p.warps_per_tile > 0
                 ? p.warps_per_tile
                 : int(std::clamp<int64_t>((want + clusters - 1) / clusters, 1, max_kw));
    };
    int nc = p.cluster;
    if (nc <= 0) {
      const int64_t per_block = p.warps_per_tile > 0 ? p.warps_per_tile : max_kw;
      nc = int(std::clamp<int64_t>((want + per_block - 1) / per_block, 1, kMaxCluster));
      for (; nc > 1; --nc) {
        if (row_blocks * nc <= fits(rb * warps_for(nc), nc)) break;
      }
    }
    const int kw = warps_for(nc);
    const int64_t fit = kw <= max_kw ? fits(rb * kw, nc) : 0;
    return Plan{rb, kw, nc, row_blocks, std::min(row_blocks * nc, fit) * rb * kw};
  };
  // Tiles per block: at M > 8 two tiles share each activation chunk through L1. With the
  // f16 copy (2 bytes a value, read by the warps of every tile) as many tiles as keep at
  // least 80% of the best choice's streaming warps: the warps of a block walk the same K
  // and read each activation chunk from L2 once between them.
  Plan pl{};
  if (p.tiles_per_block > 0 || convert != kF16Copy) {
    if (p.tiles_per_block > kMaxBlockWarps) return cudaErrorInvalidValue;
    pl = plan(p.tiles_per_block > 0 ? p.tiles_per_block : (NT >= 2 ? 2 : 1));
  } else {
    Plan cand[4];
    int64_t best = 0;
    for (int i = 0; i < 4; ++i) {
      cand[i] = plan(kMaxBlockWarps >> i);  // 8, 4, 2, 1 tiles
      best = std::max(best, cand[i].warps);
    }
    pl = cand[3];
    for (int i = 3; i >= 0; --i) {
      if (cand[i].warps * 5 >= best * 4) pl = cand[i];
    }
  }
  const int rb = pl.rb, kw = pl.kw, nc = pl.nc;
  const int64_t row_blocks = pl.row_blocks;
  if (kw > kMaxBlockWarps / rb || nc > kMaxCluster) return cudaErrorInvalidValue;
  const int threads = rb * kw * 32;
  const size_t smem = size_t(rb) * kw * kWarpSmem;
  geo.tiles_per_block = rb;
  geo.warps_per_tile = kw;
  geo.cluster = nc;

  const int64_t m_slices = (p.M + kMaxM - 1) / kMaxM;
  if (m_slices > 65535 || row_blocks * nc > INT32_MAX) return cudaErrorInvalidValue;
  if (convert == kF16Copy) {
    const int64_t rows = a16_rows(p.M), segs = rows * geo.nchunks * (kChunk / 16);
    const int blocks = int(std::clamp<int64_t>((segs + 255) / 256, 1, int64_t(sms) * 4));
    const cudaError_t e = launch_kernel({dim3(unsigned(blocks)), dim3(256), 0, stream, 1, false}, fp8_rows_to_f16_kernel,
                                        static_cast<const uint8_t*>(p.a), p.lda, static_cast<uint8_t*>(p.workspace),
                                        p.M, p.K, rows, geo.nchunks, NT);
    if (e != cudaSuccess) return e;
  }
  // A dependent only after its own pre-pass (convert 3), as before; converts 1 and 2 plainly.
  return launch_kernel({dim3(unsigned(row_blocks * nc), unsigned(m_slices)), dim3(unsigned(threads)), smem, stream,
                        unsigned(nc), convert == kF16Copy},
                       kernel, p, geo);
}

// convert 7: R = tiles_per_block rows a block (1, 2, 4; else 2), V = warps_per_tile
// segments of every row a thread keeps in flight (1, 2, 4; else by K, below).
// IK_SKINNY_GEMM_ROWS_F32=1 (read at each launch; an experiment switch): every product
// summed in fp32.
bool rows_f32() {
  const char* v = std::getenv("IK_SKINNY_GEMM_ROWS_F32");
  return v && v[0] == '1';
}

template <typename OutT, bool F32, int MR>
int launch_rows_with(const SkinnyGemmParams& p, int r, int v, cudaStream_t stream) {
  const int64_t blocks = (p.N + r - 1) / r;
  if (blocks > INT32_MAX) return cudaErrorInvalidValue;
  auto go = [&](auto kernel) { return int(launch_kernel({dim3(unsigned(blocks)), dim3(kRowsThreads), 0, stream}, kernel, p)); };
  const auto with_v = [&](auto rc) {
    constexpr int R = decltype(rc)::value;
    if (v == 1) return go(skinny_gemm_rows_kernel<OutT, R, 1, F32, MR>);
    if (v == 2) return go(skinny_gemm_rows_kernel<OutT, R, 2, F32, MR>);
    return go(skinny_gemm_rows_kernel<OutT, R, 4, F32, MR>);
  };
  if (r == 1) return with_v(std::integral_constant<int, 1>{});
  if (r == 2) return with_v(std::integral_constant<int, 2>{});
  return with_v(std::integral_constant<int, 4>{});
}

template <typename OutT, int MR>
int launch_rows_persist(const SkinnyGemmParams& p, cudaStream_t stream) {
  constexpr auto kernel = skinny_gemm_rows_persist_kernel<OutT, 4, MR>;
  const int64_t blocks = std::min<int64_t>(p.N, resident_blocks_once<kernel, kRowsThreads>());
  if (blocks < 1) return cudaErrorInvalidConfiguration;
  return launch_kernel({dim3(unsigned(blocks)), dim3(kRowsThreads), 0, stream}, kernel, p);
}

template <typename OutT>
int launch_rows(const SkinnyGemmParams& p, cudaStream_t stream) {
  const int r = p.tiles_per_block ? p.tiles_per_block : 2;
  // One step of K where it fits in 4, 8 or 16 KB a row (a block takes 4 KB a segment).
  const int v = p.warps_per_tile ? p.warps_per_tile : p.K <= 4096 ? 1 : p.K <= 8192 ? 2 : 4;
  if (p.M < 1 || p.M > kSkinnyGemmRowsMaxM || p.cluster > 1 || (r != 1 && r != 2 && r != 4) || (v != 1 && v != 2 && v != 4))
    return cudaErrorInvalidValue;  // the wrapper says so first
  // The launcher's own division where a row is one pass of 4 segments past 8 KB: the
  // persistent blocks. s46h (us, against the one-shot blocks of 2 rows and convert 8):
  // 2304 x 16384 10.78 against 11.39 and 12.37, 4096 x 14336 15.81 against 16.55 and
  // 16.05. At K <= 8192 they lost (s46e, 6144 x 4096: 9.7 against convert 8's 7.6).
  if (!p.tiles_per_block && !p.warps_per_tile && v == 4 && p.K > 8192 && p.K <= int64_t(kRowsThreads) * 16 * 4 &&
      !rows_f32()) {
    return p.M == 1 ? launch_rows_persist<OutT, 1>(p, stream) : launch_rows_persist<OutT, 2>(p, stream);
  }
  if (rows_f32())
    return p.M == 1 ? launch_rows_with<OutT, true, 1>(p, r, v, stream) : launch_rows_with<OutT, true, 2>(p, r, v, stream);
  return p.M == 1 ? launch_rows_with<OutT, false, 1>(p, r, v, stream) : launch_rows_with<OutT, false, 2>(p, r, v, stream);
}

// convert 8: RB = tiles_per_block weight rows a block (1, 2, 4, 8; else rows_wgmma_rows's,
// or 8 where that is 0), G = warps_per_tile groups of kWgU steps a lane keeps in flight
// (1, 2; else 1).
template <typename OutT>
int launch_rows_wgmma(const SkinnyGemmParams& p, cudaStream_t stream) {
  SkinnyGemmParams q = p;  // the rule's rows a block whatever groups the caller asked for
  q.warps_per_tile = q.cluster = 0;
  const int auto_rb = p.tiles_per_block ? 0 : rows_wgmma_rows(q);
  const int rb = p.tiles_per_block ? p.tiles_per_block : auto_rb ? auto_rb : 8;
  const int g = p.warps_per_tile ? p.warps_per_tile : 1;
  if (p.M != 1 || p.cluster > 1 || (rb != 1 && rb != 2 && rb != 4 && rb != 8) || (g != 1 && g != 2) ||
      p.K > kSkinnyGemmRowsWgmmaMaxK || device_attribute_once<cudaDevAttrComputeCapabilityMajor>() != 9)
    return cudaErrorInvalidValue;  // the wrapper says so first
  const int64_t blocks = (p.N + rb - 1) / rb;
  if (blocks > INT32_MAX) return cudaErrorInvalidValue;
  const auto go = [&](auto rc, auto gc) {
    using C = RowsWgmma<decltype(rc)::value>;
    constexpr auto kernel = skinny_gemm_rows_wgmma_kernel<OutT, decltype(rc)::value, decltype(gc)::value>;
    const int64_t smem = C::smem(p.K);
    if (smem > 48 * 1024) {
      const cudaError_t e = max_dynamic_smem_once<kernel>(int(C::smem(kSkinnyGemmRowsWgmmaMaxK)));
      if (e != cudaSuccess) return int(e);
    }
    return int(launch_kernel({dim3(unsigned(blocks)), dim3(128), size_t(smem), stream, 1, false}, kernel, p));
  };
  const auto with_g = [&](auto rc) {
    return g == 1 ? go(rc, std::integral_constant<int, 1>{}) : go(rc, std::integral_constant<int, 2>{});
  };
  if (rb == 1) return with_g(std::integral_constant<int, 1>{});
  if (rb == 2) return with_g(std::integral_constant<int, 2>{});
  if (rb == 4) return with_g(std::integral_constant<int, 4>{});
  return with_g(std::integral_constant<int, 8>{});
}

template <typename OutT>
int launch_out(const SkinnyGemmParams& p, cudaStream_t stream) {
  if (!vector_path(p)) {
    constexpr int kWarps = 8;
    const int64_t blocks = (p.N + kWarps - 1) / kWarps;
    if (blocks > INT32_MAX) return cudaErrorInvalidValue;
    const dim3 grid(unsigned(blocks), unsigned(std::min<int64_t>(p.M, 65535)));
    return launch_kernel({grid, dim3(kWarps * 32), 0, stream, 1, false}, skinny_gemm_bytes_kernel<OutT>, p);
  }
  if (convert_for(p, n_tiles(p.M)) == kRows) return launch_rows<OutT>(p, stream);
  if (convert_for(p, n_tiles(p.M)) == kRowsWgmma) return launch_rows_wgmma<OutT>(p, stream);
  switch (n_tiles(p.M)) {
    case 1: return launch<OutT, 1>(p, stream);
    case 2: return launch<OutT, 2>(p, stream);
    case 3: return launch<OutT, 3>(p, stream);
    default: return launch<OutT, 4>(p, stream);
  }
}

}  // namespace

namespace inference_kernels {

int64_t skinny_gemm_fp8_workspace_bytes(const SkinnyGemmParams& p) {
  if (p.M <= 0 || p.N <= 0 || p.K <= 0 || !vector_path(p)) return 0;
  // The f16 copy of a, rows padded with zeros to whole 64-element chunks.
  return convert_for(p, n_tiles(p.M)) == kF16Copy ? 2 * a16_rows(p.M) * ((p.K + kChunk - 1) / kChunk * kChunk)
                                                  : 0;
}

int skinny_gemm_fp8_wgmma_min_cluster(const SkinnyGemmParams& p) {
  return p.convert == kWgmmaRing ? ring_min_cluster(p) : wgmma_min_cluster(p);
}

int skinny_gemm_fp8_launch(const SkinnyGemmParams& p, void* stream) {
  if (p.M <= 0 || p.N <= 0) return cudaSuccess;
  const auto s = static_cast<cudaStream_t>(stream);
  int err = cudaErrorInvalidValue;
  switch (p.out_dtype) {
    case DType::kBFloat16: err = launch_out<__nv_bfloat16>(p, s); break;
    case DType::kFloat16: err = launch_out<__half>(p, s); break;
    default: break;
  }
  return err != cudaSuccess ? err : cudaGetLastError();
}

}  // namespace inference_kernels
