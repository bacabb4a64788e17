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
// - convert 7 (M = 1; the default for N >= 1024, K >= 4096 up to 40 MiB of weight where
//   convert 8's rule does not apply, and for K of 8-16 KB up to 64 MiB): no tensor cores
//   and no K split between blocks, whole weight rows a block (skinny_gemm_rows_kernel), so
//   no block waits for another's partial sums at the end; where a row is one pass of K,
//   persistent blocks with the next row in flight (skinny_gemm_rows_persist_kernel).
// - convert 8 (M = 1, sm_90a; the default where its blocks fill the GPU in one balanced
//   wave, or take several: rows_wgmma_rows): convert 7's division with convert 4's MMAs,
//   the MMA's 64 logical rows a block's few weight rows cut into slices of K
//   (skinny_gemm_rows_wgmma_kernel).
// - Tails: rows past N and activation rows past M are clamped to the last real row
//   (valid memory; their outputs are never stored) or, in the f16 copy, zeros. K % 64 != 0
//   leaves a last chunk that loads zeros past K. Rows that are not 16-byte aligned, or
//   K % 16 != 0, take a byte-load kernel: correct for any layout, not fast.
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
#include "ptx.cuh"
#include "vec_io.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

namespace {

namespace cg = cooperative_groups;
using namespace inference_kernels;
using namespace inference_kernels::cuda;

constexpr int kMT = 2;         // 16-row MMA m-tiles per warp
constexpr int kTileRows = 16 * kMT;  // weight rows per warp
constexpr int kChunk = 64;     // K bytes per step: 4 lanes x 16 bytes per row
constexpr int kMaxM = 32;      // activation rows per launch slice: 4 MMA n-tiles of 8
constexpr int kMaxBlockWarps = 8;
constexpr int kMaxCluster = 8;  // the portable cluster size
// Two blocks of 8 warps per SM at least: caps the registers at 128 a thread.
constexpr int kMinBlocks = 2;

// How the work is cut (see the launcher).
struct Geometry {
  int64_t tiles;    // ceil(N / 32)
  int64_t nchunks;  // ceil(K / 64)
  int tiles_per_block;
  int warps_per_tile;  // K splits inside a block
  int cluster;         // K splits across the blocks of a cluster
};

// 16 bytes of a row at p (16-byte aligned), or zeros when the segment lies past K
// (avail <= 0; K % 16 == 0, so a segment is all inside or all outside).
template <bool STREAM>
__device__ __forceinline__ uint4 load16(const uint8_t* p, int64_t avail) {
  if (avail <= 0) return make_uint4(0, 0, 0, 0);
  return STREAM ? ld_stream16(p) : __ldg(reinterpret_cast<const uint4*>(p));
}

__device__ __forceinline__ float fp8_to_float(uint8_t v) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(v), __NV_E4M3)));
}

// Two e4m3 values (the low and high byte of v) as an f16x2, exactly (F2FP on sm_89+).
__device__ __forceinline__ uint32_t f16x2_from_e4m3x2(uint32_t v) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}

// A 16-byte e4m3 segment as 8 f16x2 words: f[j] holds bytes 2j, 2j + 1.
struct F16x8 {
  uint32_t f[8];
};

// Through the conversion instruction: exact, NaN stays NaN.
__device__ __forceinline__ F16x8 to_f16(const uint4& v) {
  F16x8 r;
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    r.f[2 * i] = f16x2_from_e4m3x2(w[i] & 0xFFFFu);
    r.f[2 * i + 1] = f16x2_from_e4m3x2(w[i] >> 16);
  }
  return r;
}

// Through integer operations (the INT pipe, beside the conversions of the weight), each
// value times 2^-8, exactly: e4m3 and f16 differ by 8 in exponent bias and e4m3's 3
// mantissa bits sit at f16's top 3, so f16 bits = sign | (e4m3 bits & 0x7F) << 7 is the
// value / 256, subnormals included (the epilogue multiplies by 256). An e4m3 NaN (0x7F)
// reads as 480 instead of NaN.
__device__ __forceinline__ uint32_t f16x2_div256_from_e4m3x2(uint32_t v) {
  const uint32_t u = __byte_perm(v, 0u, 0x1404);  // byte 0 -> bits 8-15, byte 1 -> 24-31
  return (u & 0x80008000u) | ((u >> 1) & 0x3F803F80u);
}

__device__ __forceinline__ F16x8 to_f16_div256(const uint4& v) {
  F16x8 r;
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    r.f[2 * i] = f16x2_div256_from_e4m3x2(w[i]);
    r.f[2 * i + 1] = f16x2_div256_from_e4m3x2(w[i] >> 16);
  }
  return r;
}

// How the activation gets to f16 (the weight always takes the conversion instruction):
// per warp through the conversion instruction (kCvt) or integer operations (kIntOps), or
// once, by a pre-pass writing an f16 copy of `a` that the warps load as ready B fragments
// (kF16Copy; that path also streams the weight through a cp.async ring, see the kernel).
enum Convert : int { kCvt = 1, kIntOps = 2, kF16Copy = 3, kWgmma = 4, kWgmmaRing = 5, kTma = 6, kRows = 7, kRowsWgmma = 8 };

// kF16Copy: chunks of weight in each warp's cp.async ring (S - 1 in flight while one is
// computed): 4 x 2 KB per warp, 64 KB for a block of 8 warps, two blocks per SM.
constexpr int kStages = 4;
constexpr int kStageBytes = 4 * kMT * 16 * 32 / 2;  // 2 * kMT segments of 16 bytes x 32 lanes

// Shared memory per warp: its fp32 partials (after the loop), and for kF16Copy its ring
// (before; the partials reuse it).
template <int NT, int CVT>
constexpr int warp_smem_bytes() {
  constexpr int partials = kMT * NT * 4 * 32 * int(sizeof(float));
  constexpr int ring = CVT == kF16Copy ? kStages * kStageBytes : 0;
  return partials > ring ? partials : ring;
}

template <int CVT>
__device__ __forceinline__ F16x8 activation_to_f16(const uint4& v) {
  if constexpr (CVT == kIntOps) {
    return to_f16_div256(v);
  } else {
    return to_f16(v);
  }
}

// One 64-byte chunk of K, converted to f16. Lane (g, t) holds bytes [16t, 16t + 16) of
// weight rows g (lo) and g + 8 (hi) and of activation row g (x), as 8 f16 pairs each.
// The fragments want k = 2t, 2t + 1 in a0/a1/b0 and 2t + 8, 2t + 9 in a2/a3/b1; MMA q
// takes pairs 2q and 2q + 1 of every lane there, which maps each byte of the chunk to
// exactly one k slot of one MMA, identically in A and B: a permutation of K, which
// leaves each dot product as it is.
__device__ __forceinline__ void mma_chunk(float (&d)[4], const F16x8& lo, const F16x8& hi,
                                          const F16x8& x) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    mma_m16n8k16<false>(d, lo.f[2 * q], hi.f[2 * q], lo.f[2 * q + 1], hi.f[2 * q + 1], x.f[2 * q],
            x.f[2 * q + 1]);
  }
}

// The f16 copy of a (kF16Copy) in the order the warps read it: per slice of 32 rows (the
// launch's blockIdx.y), per 64-element chunk of K, per n-tile nt of 8 rows, per lane
// (g, t): the 16 f16 values k = 64c + 16t ... + 15 of row 32 * slice + 8 nt + g (32 bytes).
// A warp's B fragments for a chunk are then nt * 1 KB + 32 * lane from one pointer; rows
// past M (to the n-tile) and k past K (to the chunk) are zeros, so nothing is checked.
// nt_all n-tiles per slice: n_tiles(M). Returns the byte offset of (row m, 16-segment sg).
__host__ __device__ __forceinline__ int64_t a16_offset(int64_t m, int64_t sg, int64_t nchunks, int nt_all) {
  const int64_t slice = m / kMaxM, r = m % kMaxM, c = sg / 4, t = sg % 4;
  return ((slice * nchunks + c) * nt_all + r / 8) * 1024 + ((r % 8) * 4 + t) * 32;
}

// One chunk's weight (16 bytes at off of each lane's rows; zeros past K: avail, see
// load16) against the chunk's f16 activation fragments xf: the chunk past the last whole
// one, in both main loops.
template <int NT>
__device__ __forceinline__ void mma_weight_chunk(float (&acc)[kMT][NT][4], const uint8_t* const (&w_lo)[kMT],
                                                 const uint8_t* const (&w_hi)[kMT], int64_t off,
                                                 int64_t avail, const F16x8 (&xf)[NT]) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    const F16x8 lf = to_f16(load16<true>(w_lo[mt] + off, avail));
    const F16x8 hf = to_f16(load16<true>(w_hi[mt] + off, avail));
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) mma_chunk(acc[mt][nt], lf, hf, xf[nt]);
  }
}

// The kF16Copy main loop over chunks [c0, c1) of K. Weights: each lane copies its own
// 2 * kMT segments of 16 bytes per chunk (cp.async) into lane-private slots of the warp's
// ring (slot s, segment j at ring + (s * 2 kMT + j) * 512; a warp's 32 lanes read 512
// contiguous bytes, conflict-free) and reads back only what it copied, so its own
// wait_group orders everything: no barrier, and the load of chunk c + S - 1 is in flight
// (with c + 1 ... c + S - 2) while chunk c is converted and multiplied, whatever the
// register budget. Activations: 32 bytes a lane per n-tile from the f16 copy (L1/L2-hot),
// the f16 of exactly the 16 fp8 bytes the other paths convert, so the fragments and the
// K permutation of mma_chunk are unchanged. Weight segments past K read zeros.
template <int NT>
__device__ __forceinline__ void ring_loop(float (&acc)[kMT][NT][4], const SkinnyGemmParams& p,
                                          const uint8_t* const (&w_lo)[kMT],
                                          const uint8_t* const (&w_hi)[kMT], const uint8_t* xa,
                                          int64_t c0, int64_t c1, uint32_t ring, int t) {
  constexpr int S = kStages, SEG = 2 * kMT;
  const int64_t K = p.K;
  // Whole chunks through the ring; a last partial one (K % 64 != 0) after it.
  const int64_t ce = std::max(c0, std::min(c1, K / kChunk));
  // The next chunk's segments, advanced as they are issued (chunks go in order).
  const uint8_t* w[SEG];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    w[2 * mt] = w_lo[mt] + c0 * kChunk;
    w[2 * mt + 1] = w_hi[mt] + c0 * kChunk;
  }
  const auto issue = [&](int slot) {
#pragma unroll
    for (int j = 0; j < SEG; ++j) {
      cp_async16(ring + (slot * SEG + j) * 512, w[j]);
      w[j] += kChunk;
    }
  };
  // One commit group per chunk (empty past ce), so wait_group<S - 1> means "chunk c landed".
#pragma unroll
  for (int i = 0; i < S - 1; ++i) {
    if (c0 + i < ce) issue(i);
    cp_async_commit();
  }
  // The weights above need nothing from the pre-pass; the activation copy does.
  pdl_wait_primary();
  const auto activation = [&](int64_t c, F16x8 (&xf)[NT]) {
    const auto* src = reinterpret_cast<const uint4*>(xa + c * (NT * 1024));
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const uint4 v0 = __ldg(src + nt * 64), v1 = __ldg(src + nt * 64 + 1);
      xf[nt] = F16x8{{v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w}};
    }
  };
  int slot = 0;
  for (int64_t c = c0; c < ce; ++c) {
    F16x8 xf[NT];
    activation(c, xf);
    // Refill the slot read one chunk ago: those reads fed the previous chunk's conversions,
    // issued (in order) before this copy, so the copy cannot overwrite unread bytes.
    if (c + S - 1 < ce) issue(slot == 0 ? S - 1 : slot - 1);
    cp_async_commit();
    cp_async_wait<S - 1>();
    const uint32_t at = ring + slot * SEG * 512;
    slot = slot == S - 1 ? 0 : slot + 1;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      const F16x8 lf = to_f16(lds16(at + 2 * mt * 512)), hf = to_f16(lds16(at + (2 * mt + 1) * 512));
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) mma_chunk(acc[mt][nt], lf, hf, xf[nt]);
    }
  }
  cp_async_wait<0>();
  if (ce < c1) {  // the last chunk of K, partial: direct loads, zeros past K
    F16x8 xf[NT];
    activation(ce, xf);
    const int64_t off = ce * kChunk;
    mma_weight_chunk<NT>(acc, w_lo, w_hi, off, K - off - 16 * t, xf);
  }
}

// The pre-pass of kF16Copy: a [M, K] fp8 (row stride lda, K % 16 == 0, 16-byte aligned
// rows) into the f16 copy (a16_offset's layout, zeros in the padding), exactly (NaN stays
// NaN). It lets the GEMM launch at once (programmatic dependent launch): the GEMM streams
// its first weight chunks, then waits for this grid before it reads the copy.
__global__ void __launch_bounds__(256) fp8_rows_to_f16_kernel(const uint8_t* a, int64_t lda, uint8_t* a16,
                                                              int64_t M, int64_t K, int64_t rows,
                                                              int64_t nchunks, int nt_all) {
  pdl_launch_dependents();
  const int64_t segs = nchunks * (kChunk / 16), total = rows * segs;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = i / segs, sg = i % segs;
    F16x8 f{};
    if (m < M && 16 * sg < K) f = to_f16(__ldg(reinterpret_cast<const uint4*>(a + m * lda + 16 * sg)));
    auto* dst = reinterpret_cast<uint4*>(a16 + a16_offset(m, sg, nchunks, nt_all));
    dst[0] = make_uint4(f.f[0], f.f[1], f.f[2], f.f[3]);
    dst[1] = make_uint4(f.f[4], f.f[5], f.f[6], f.f[7]);
  }
}

// Rows of the f16 copy: M padded to its last n-tile (M <= 32) or slice of 32 (M > 32).
int64_t a16_rows(int64_t M) { return M >= kMaxM ? (M + kMaxM - 1) / kMaxM * kMaxM : (M + 7) / 8 * 8; }

template <typename OutT, int NT, int CVT>
__global__ void __launch_bounds__(kMaxBlockWarps * 32, kMinBlocks)
    skinny_gemm_kernel(SkinnyGemmParams p, Geometry geo) {
  // Per warp WF floats: its fp32 partial sums, [MT * NT * 4 registers][32 lanes]
  // (conflict-free), and before them, with kF16Copy, its weight ring.
  extern __shared__ __align__(16) float partials[];
  constexpr int WF = warp_smem_bytes<NT, CVT>() / int(sizeof(float));
  // Chunks per load batch: 4 KB of weight in flight per warp at M <= 16; at M > 16 the
  // activation fragments take the registers (128 a thread for two blocks of 8 warps).
  constexpr int U = NT <= 2 ? 2 : 1;
  constexpr int E = kMT * NT * 4;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int kw = geo.warps_per_tile, nc = geo.cluster;
  const int r = warp / kw, s = warp % kw;
  const int rank = blockIdx.x % nc;  // the block's rank in its (nc, 1, 1) cluster
  const int64_t tile0 = int64_t(blockIdx.x / nc) * geo.tiles_per_block;
  const int64_t tile = tile0 + r;
  const int64_t m0 = int64_t(blockIdx.y) * kMaxM;
  const int64_t M = p.M, N = p.N, K = p.K;

  float acc[kMT][NT][4] = {};
  if (tile < geo.tiles) {
    const int64_t splits = int64_t(kw) * nc, split = int64_t(rank) * kw + s;
    const int64_t c0 = split * geo.nchunks / splits, c1 = (split + 1) * geo.nchunks / splits;
    const auto* b = static_cast<const uint8_t*>(p.b);
    const auto* a = static_cast<const uint8_t*>(p.a);
    const uint8_t* w_lo[kMT];
    const uint8_t* w_hi[kMT];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      const int64_t n = tile * kTileRows + mt * 16 + g;
      w_lo[mt] = b + std::min(n, N - 1) * p.ldb + 16 * t;
      w_hi[mt] = b + std::min(n + 8, N - 1) * p.ldb + 16 * t;
    }
    const uint8_t* x[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) x[nt] = a + std::min(m0 + nt * 8 + g, M - 1) * p.lda + 16 * t;

    if constexpr (CVT == kF16Copy) {
      const auto* xa = static_cast<const uint8_t*>(p.workspace) + int64_t(blockIdx.y) * geo.nchunks * NT * 1024 + 32 * lane;
      ring_loop<NT>(acc, p, w_lo, w_hi, xa, c0, c1, smem_addr(partials + warp * WF) + 16 * lane, t);
    } else {
      // Chunks wholly inside K run unchecked, U at a time; the rest one by one.
      const int64_t full = std::max(c0, std::min(c1, K / kChunk));
      int64_t c = c0;
      for (; c + U <= full; c += U) {
        uint4 lo[U][kMT], hi[U][kMT], xv[U][NT];
#pragma unroll
        for (int u = 0; u < U; ++u) {
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            lo[u][mt] = load16<true>(w_lo[mt] + (c + u) * kChunk, 16);
            hi[u][mt] = load16<true>(w_hi[mt] + (c + u) * kChunk, 16);
          }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) xv[u][nt] = load16<false>(x[nt] + (c + u) * kChunk, 16);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          F16x8 xf[NT];
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) xf[nt] = activation_to_f16<CVT>(xv[u][nt]);
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            const F16x8 lf = to_f16(lo[u][mt]), hf = to_f16(hi[u][mt]);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) mma_chunk(acc[mt][nt], lf, hf, xf[nt]);
          }
        }
      }
      for (; c < c1; ++c) {
        const int64_t off = c * kChunk, avail = K - off - 16 * t;
        F16x8 xf[NT];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) xf[nt] = activation_to_f16<CVT>(load16<false>(x[nt] + off, avail));
        mma_weight_chunk<NT>(acc, w_lo, w_hi, off, avail, xf);
      }
    }
  }

  // kF16Copy: the partials reuse the warp's ring; every lane's copies have landed
  // (ring_loop's last wait), and the other lanes must be done reading it.
  if constexpr (CVT == kF16Copy) __syncwarp();
  float* mine = partials + warp * WF;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) mine[((mt * NT + nt) * 4 + i) * 32 + lane] = acc[mt][nt][i];
    }
  }
  cg::cluster_group cluster = cg::this_cluster();
  if (nc > 1) {
    cluster.sync();  // every block's partials written and visible cluster-wide
  } else {
    __syncthreads();
  }

  // The cluster's blocks share the finishing of their tiles: element i of the block's
  // tiles (tile tr, register e = (mt * NT + nt) * 4 + reg, lane l) is summed over the K
  // splits in a fixed order, scaled, biased, rounded and stored by one thread.
  const float sa = *p.scale_a * (CVT == kIntOps ? 256.0f : 1.0f);
  const int per_block = geo.tiles_per_block * E * 32;
  for (int i = rank * blockDim.x + threadIdx.x; i < per_block; i += blockDim.x * nc) {
    const int tr = i / (E * 32), j = i % (E * 32), e = j / 32, l = j % 32;
    const int mt = e / (NT * 4), nt = (e / 4) % NT, reg = e % 4;
    const int64_t tl = tile0 + tr;
    const int64_t n = tl * kTileRows + mt * 16 + (l >> 2) + (reg >= 2 ? 8 : 0);
    const int64_t m = m0 + nt * 8 + 2 * (l & 3) + (reg & 1);
    if (tl >= geo.tiles || n >= N || m >= M) continue;
    float sum = 0.0f;
    if constexpr (CVT == kF16Copy) {
      // Every partial loaded before any is added: up to 64 loads in flight, so the
      // distributed-shared-memory latency is paid about once, not once per 4 partials.
      // The same order of additions as below (+0 for the splits that do not exist).
      float v[kMaxCluster][kMaxBlockWarps];
#pragma unroll
      for (int q = 0; q < kMaxCluster; ++q) {
        const float* src = q < nc && nc > 1 ? cluster.map_shared_rank(partials, q) : partials;
#pragma unroll
        for (int w = 0; w < kMaxBlockWarps; ++w)
          v[q][w] = q < nc && w < kw ? src[(tr * kw + w) * WF + e * 32 + l] : 0.0f;
      }
#pragma unroll
      for (int q = 0; q < kMaxCluster; ++q) {
#pragma unroll
        for (int w = 0; w < kMaxBlockWarps; ++w) sum += v[q][w];
      }
    } else {
      for (int q = 0; q < nc; ++q) {
        const float* src = nc > 1 ? cluster.map_shared_rank(partials, q) : partials;
        for (int w = 0; w < kw; ++w) sum += src[(tr * kw + w) * WF + e * 32 + l];
      }
    }
    float y = sum * (sa * p.scale_b[p.scale_b_per_channel ? n : 0]);
    if (p.bias) y += to_float(static_cast<const OutT*>(p.bias)[n]);
    static_cast<OutT*>(p.out)[m * p.ldo + n] = from_float<OutT>(y);
  }
  if (nc > 1) cluster.sync();  // keep this block's shared memory alive until all have read it
}

// convert 7 (M = 1): whole weight rows a block, no split of K between blocks. Every split
// of K over blocks ends in a reduction that waits for the block of its tile that finishes
// last; in a read-only model of 2304 x 16384 (benchmarks/q4k_read_probe.cu, s41c-s41e)
// that wait cost 0.7-1.9 us where the blocks met in a cluster and 1.0-1.2 us through a
// global workspace and a ticket, on top of the loads alone (10.5-10.8 us). Blocks of R
// rows x all of K, threads 16 bytes apart with V 16-byte segments of every row in flight
// (and x's, through L1, where the SM's blocks share it), read the same 37 MB in 9.9-10.1
// us: as many blocks as rows / R, refilled by the hardware as they end.
// Arithmetic (tensor cores need 16 rows a warp): x's segment to f16 (exact) and times
// 2^-8 (exact: e4m3's smallest value becomes an f16 subnormal with its bits), so that
// no product of two e4m3 values, at most 448 * 448 / 256, overflows f16; each product is
// exact in f16 down to 2^-24 (below that, products of two near-subnormal values round). F32
// = false: a segment's 8 pairs summed by HFMA2 in f16 (16 values, at most 12544:
// rounding 2^-11 relative to a sum of 8), then in fp32; F32 = true: every product in fp32.
constexpr int kRowsThreads = 256;

__device__ __forceinline__ uint32_t hmul2_u(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint32_t hfma2_u(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ __forceinline__ float2 f16x2_to_float2(uint32_t h) {
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

template <typename OutT, int R, int V, bool F32>
__global__ void __launch_bounds__(kRowsThreads, 1) skinny_gemm_rows_kernel(const SkinnyGemmParams p) {
  __shared__ float part[kRowsThreads / 32][R];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int64_t n0 = int64_t(blockIdx.x) * R;
  const auto* a = static_cast<const uint8_t*>(p.a);
  const uint8_t* brow[R];
#pragma unroll
  for (int r = 0; r < R; ++r) brow[r] = static_cast<const uint8_t*>(p.b) + std::min<int64_t>(n0 + r, p.N - 1) * p.ldb;
  constexpr uint32_t kTwoM8 = 0x1C001C00u;  // 2^-8 in both f16 halves
  float acc[R] = {};
  for (int64_t k0 = int64_t(t) * 16; k0 < p.K; k0 += int64_t(kRowsThreads) * V * 16) {
    uint4 x[V], w[R][V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int64_t off = k0 + int64_t(j) * kRowsThreads * 16;
      x[j] = load16<false>(a + off, p.K - off);
#pragma unroll
      for (int r = 0; r < R; ++r) w[r][j] = load16<true>(brow[r] + off, p.K - off);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) {
      after_loads(x[j]);
#pragma unroll
      for (int r = 0; r < R; ++r) after_loads(w[r][j]);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) {
      F16x8 xs = to_f16(x[j]);
      if constexpr (F32) {
        float2 xf[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) xf[i] = f16x2_to_float2(xs.f[i]);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const F16x8 wf = to_f16(w[r][j]);
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            const float2 v = f16x2_to_float2(wf.f[i]);
            acc[r] = fmaf(v.x, xf[i].x, acc[r]);
            acc[r] = fmaf(v.y, xf[i].y, acc[r]);
          }
        }
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) xs.f[i] = hmul2_u(xs.f[i], kTwoM8);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const F16x8 wf = to_f16(w[r][j]);
          uint32_t h = hmul2_u(wf.f[0], xs.f[0]);
#pragma unroll
          for (int i = 1; i < 8; ++i) h = hfma2_u(wf.f[i], xs.f[i], h);
          const float2 v = f16x2_to_float2(h);
          acc[r] += v.x + v.y;
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float v = acc[r];
#pragma unroll
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    if (lane == 0) part[warp][r] = v;
  }
  __syncthreads();
  if (t < R && n0 + t < p.N) {
    const int64_t n = n0 + t;
    float sum = 0.0f;
#pragma unroll
    for (int q = 0; q < kRowsThreads / 32; ++q) sum += part[q][t];
    float y = (F32 ? sum : sum * 256.0f) * (*p.scale_a * p.scale_b[p.scale_b_per_channel ? n : 0]);
    if (p.bias) y += to_float(static_cast<const OutT*>(p.bias)[n]);
    static_cast<OutT*>(p.out)[n] = from_float<OutT>(y);
  }
}

// convert 7 where a row is one pass of V segments a thread (K <= 4 KB x V) and the launcher
// picks the division: persistent blocks, two an SM, each taking weight rows blockIdx.x, +
// gridDim.x, ..., with the next row's loads in flight during this row's arithmetic; x is
// read once a block and kept as f16. The one-shot blocks above load, then compute, then
// meet at the barrier, then end, and their SM's loads pause meanwhile (2304 x 16384: 11.34
// us against the rows read alone in 9.9-10.1). Two named register stages: no register
// move waits on a load. Deeper (3 or 4 stages) ran slower, 12.9 / 13.5 us: ptxas sank
// the later stages' loads below the arithmetic; so did 3 blocks an SM (12.2) and two rows
// a stage (12.5) (s46e, s46f). One barrier a row: the warps' partial sums alternate
// between two shared arrays by the row's parity. The same sums, in the same order and
// rounding steps, as skinny_gemm_rows_kernel<R = 1, F32 = false>: the same bits.
constexpr int kRowsPersistBlocks = 2;  // blocks an SM

template <typename OutT, int V>
__global__ void __launch_bounds__(kRowsThreads, kRowsPersistBlocks) skinny_gemm_rows_persist_kernel(const SkinnyGemmParams p) {
  __shared__ float part[2][kRowsThreads / 32];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int64_t G = gridDim.x;
  const auto* b = static_cast<const uint8_t*>(p.b);
  constexpr uint32_t kTwoM8 = 0x1C001C00u;  // 2^-8 in both f16 halves
  F16x8 xs[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int64_t off = int64_t(t) * 16 + int64_t(j) * kRowsThreads * 16;
    xs[j] = to_f16(load16<false>(static_cast<const uint8_t*>(p.a) + off, p.K - off));
#pragma unroll
    for (int i = 0; i < 8; ++i) xs[j].f[i] = hmul2_u(xs[j].f[i], kTwoM8);
  }
  const float sa = *p.scale_a;
  // A stage: row n's segments, its scale_b and bias (every thread: no branch before the
  // loads). Past the last row: the last row again (from L2), so that none is conditional.
  const auto load = [&](int64_t n, uint4 (&w)[V], float& f, float& bias) {
    n = std::min(n, p.N - 1);
    f = p.scale_b[p.scale_b_per_channel ? n : 0];
    bias = p.bias ? to_float(static_cast<const OutT*>(p.bias)[n]) : 0.0f;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int64_t off = int64_t(t) * 16 + int64_t(j) * kRowsThreads * 16;
      w[j] = ld_stream16_ordered(b + n * p.ldb + std::min(off, p.K - 16));
    }
  };
  const auto finish = [&](int64_t n, uint4 (&w)[V], float f, float bias, int parity) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      after_loads(w[j]);
      // Segments past K were loaded from the row's last one (no predicate on the loads:
      // ptxas sank a predicated one below the arithmetic) and count as zeros.
      if (int64_t(t) * 16 + int64_t(j) * kRowsThreads * 16 >= p.K) w[j] = make_uint4(0, 0, 0, 0);
    }
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const F16x8 wf = to_f16(w[j]);
      uint32_t h = hmul2_u(wf.f[0], xs[j].f[0]);
#pragma unroll
      for (int i = 1; i < 8; ++i) h = hfma2_u(wf.f[i], xs[j].f[i], h);
      const float2 v = f16x2_to_float2(h);
      acc += v.x + v.y;
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xFFFFFFFFu, acc, o);
    if (lane == 0) part[parity][warp] = acc;
    __syncthreads();
    if (t == 0) {
      float sum = 0.0f;
#pragma unroll
      for (int q = 0; q < kRowsThreads / 32; ++q) sum += part[parity][q];
      float y = __fmul_rn(__fmul_rn(sum, 256.0f), __fmul_rn(sa, f));  // convert 7's steps, no FMA
      if (p.bias) y = __fadd_rn(y, bias);
      static_cast<OutT*>(p.out)[n] = from_float<OutT>(y);
    }
  };
  uint4 wa[V], wb[V];
  float fa = 0.0f, ba = 0.0f, fb = 0.0f, bb = 0.0f;
  int64_t n = blockIdx.x;  // < N: the grid is at most that
  load(n, wa, fa, ba);
  for (;;) {
    load(n + G, wb, fb, bb);
    finish(n, wa, fa, ba, 0);
    if ((n += G) >= p.N) break;
    load(n + G, wa, fa, ba);
    finish(n, wb, fb, bb, 1);
    if ((n += G) >= p.N) break;
  }
}

// Any layout (rows not 16-byte aligned, K % 16 != 0): a warp per weight row, lanes
// striding K with byte loads, fp32 sums reduced by shuffles. Correct, not fast.
template <typename OutT>
__global__ void skinny_gemm_bytes_kernel(SkinnyGemmParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t n = int64_t(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (n >= p.N) return;
  const auto* b = static_cast<const uint8_t*>(p.b) + n * p.ldb;
  const float scale = *p.scale_a * p.scale_b[p.scale_b_per_channel ? n : 0];
  const float bias = p.bias ? to_float(static_cast<const OutT*>(p.bias)[n]) : 0.0f;
  for (int64_t m = blockIdx.y; m < p.M; m += gridDim.y) {
    const auto* a = static_cast<const uint8_t*>(p.a) + m * p.lda;
    float sum = 0.0f;
    for (int64_t k = lane; k < p.K; k += 32) sum += fp8_to_float(a[k]) * fp8_to_float(b[k]);
#pragma unroll
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
    if (lane == 0) static_cast<OutT*>(p.out)[m * p.ldo + n] = from_float<OutT>(sum * scale + bias);
  }
}

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

// G: groups of kWgU chunks a lane keeps in flight (wgmma_groups): with 2, one group's
// loads are on their way while the other's MMAs run (112-122 registers against 72-90).
template <typename OutT, int NH, int WGS, int G = 1>
__global__ void __launch_bounds__(128 * WGS, 1) skinny_gemm_wgmma_kernel(SkinnyGemmParams p, int64_t cps) {
  constexpr int kRows = 32 * WGS, kThreads = 128 * WGS;
  extern __shared__ __align__(128) uint8_t wsm[];
  constexpr int NT = 2 * NH;  // B's 8-column groups: each activation row twice
  cg::cluster_group cluster = cg::this_cluster();
  const int nc = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int64_t M = p.M, N = p.N, K = p.K;
  const int64_t nchunks = (K + kChunk - 1) / kChunk;
  const int64_t c0 = int64_t(rank) * cps;
  const int cn = int(std::max<int64_t>(0, std::min(c0 + cps, nchunks) - c0));  // chunks here
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
  static_assert(S >= 2 && S <= 8, "ring slots");
  constexpr int kRows = 64, kThreads = 256, NT = 2 * NH;
  extern __shared__ __align__(128) uint8_t wsm[];
  cg::cluster_group cluster = cg::this_cluster();
  const int nc = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int64_t M = p.M, N = p.N, K = p.K;
  const int64_t nchunks = (K + kChunk - 1) / kChunk;
  const int64_t c0 = int64_t(rank) * cps;
  const int cn = int(std::max<int64_t>(0, std::min(c0 + cps, nchunks) - c0));  // chunks here
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
bool rows_persist_wins(const SkinnyGemmParams& p) {
  return p.M == 1 && p.N >= 1024 && p.K > 8192 && p.K <= 16384 && p.N * p.K <= 64 * kMiB && vector_path(p) &&
         !p.tiles_per_block && !p.warps_per_tile && !p.cluster;
}

bool rows_wins(const SkinnyGemmParams& p) {
  return p.M == 1 && p.N >= 1024 && p.K >= 4096 && p.N * p.K <= 40 * kMiB && vector_path(p) && !p.tiles_per_block &&
         !p.warps_per_tile && !p.cluster;
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

// Programmatic dependent launch between the pre-pass and the GEMM: on unless
// IK_SKINNY_GEMM_PDL=0 (benchmarks compare; read at each launch).
bool use_pdl() {
  const char* v = std::getenv("IK_SKINNY_GEMM_PDL");
  return !(v && v[0] == '0');
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
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg = cluster_launch(tiles * nc, kThreads, size_t(smem), stream, nc, attr);
  const int64_t nchunks = (p.K + kChunk - 1) / kChunk;
  return cudaLaunchKernelEx(&cfg, kernel, p, (nchunks + nc - 1) / nc);
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
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg = cluster_launch(std::min<int64_t>(tiles, clusters) * nc, 256,
                                                size_t(wg_ring_smem_bytes(S, cps, NH)), stream, nc, attr);
  return cudaLaunchKernelEx(&cfg, kernel, p, cps, tiles);
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
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg = cluster_launch(blocks, kTmaThreads, size_t(smem), stream, nc, attr);
  if (nc == 1) cfg.numAttrs = 0;  // no cluster: a plain launch
  return cudaLaunchKernelEx(&cfg, epi == kTmaSwap ? swap : epi == kTmaPush ? push : epi == kTmaDirect ? direct : epi == kTmaByRow ? by_row : by_element,
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
  const bool pdl = convert == kF16Copy && use_pdl();
  if (convert == kF16Copy) {
    const int64_t rows = a16_rows(p.M), segs = rows * geo.nchunks * (kChunk / 16);
    const int blocks = int(std::clamp<int64_t>((segs + 255) / 256, 1, int64_t(sms) * 4));
    fp8_rows_to_f16_kernel<<<blocks, 256, 0, stream>>>(static_cast<const uint8_t*>(p.a), p.lda,
                                                       static_cast<uint8_t*>(p.workspace), p.M, p.K, rows,
                                                       geo.nchunks, NT);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(row_blocks * nc), unsigned(m_slices), 1);
  cfg.blockDim = dim3(unsigned(threads), 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  unsigned n_attr = 0;
  if (nc > 1) {
    attr[n_attr].id = cudaLaunchAttributeClusterDimension;
    attr[n_attr].val.clusterDim.x = unsigned(nc);
    attr[n_attr].val.clusterDim.y = 1;
    attr[n_attr].val.clusterDim.z = 1;
    ++n_attr;
  }
  if (pdl) {
    attr[n_attr].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n_attr].val.programmaticStreamSerializationAllowed = 1;
    ++n_attr;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n_attr;
  cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, p, geo);
  if (e != cudaSuccess && pdl) {  // a runtime that refuses the dependent launch: a plain one
    (void)cudaGetLastError();
    cfg.numAttrs = n_attr - 1;
    e = cudaLaunchKernelEx(&cfg, kernel, p, geo);
  }
  return e;
}

// convert 7: R = tiles_per_block rows a block (1, 2, 4; else 2), V = warps_per_tile
// segments of every row a thread keeps in flight (1, 2, 4; else by K, below).
// IK_SKINNY_GEMM_ROWS_F32=1 (read at each launch; an experiment switch): every product
// summed in fp32.
bool rows_f32() {
  const char* v = std::getenv("IK_SKINNY_GEMM_ROWS_F32");
  return v && v[0] == '1';
}

template <typename OutT, bool F32>
int launch_rows_with(const SkinnyGemmParams& p, int r, int v, cudaStream_t stream) {
  const int64_t blocks = (p.N + r - 1) / r;
  if (blocks > INT32_MAX) return cudaErrorInvalidValue;
  auto go = [&](auto kernel) {
    kernel<<<unsigned(blocks), kRowsThreads, 0, stream>>>(p);
    return int(cudaSuccess);
  };
  const auto with_v = [&](auto rc) {
    constexpr int R = decltype(rc)::value;
    if (v == 1) return go(skinny_gemm_rows_kernel<OutT, R, 1, F32>);
    if (v == 2) return go(skinny_gemm_rows_kernel<OutT, R, 2, F32>);
    return go(skinny_gemm_rows_kernel<OutT, R, 4, F32>);
  };
  if (r == 1) return with_v(std::integral_constant<int, 1>{});
  if (r == 2) return with_v(std::integral_constant<int, 2>{});
  return with_v(std::integral_constant<int, 4>{});
}

template <typename OutT>
int launch_rows(const SkinnyGemmParams& p, cudaStream_t stream) {
  const int r = p.tiles_per_block ? p.tiles_per_block : 2;
  // One step of K where it fits in 4, 8 or 16 KB a row (a block takes 4 KB a segment).
  const int v = p.warps_per_tile ? p.warps_per_tile : p.K <= 4096 ? 1 : p.K <= 8192 ? 2 : 4;
  if (p.M != 1 || p.cluster > 1 || (r != 1 && r != 2 && r != 4) || (v != 1 && v != 2 && v != 4))
    return cudaErrorInvalidValue;  // the wrapper says so first
  // The launcher's own division where a row is one pass of 4 segments past 8 KB: the
  // persistent blocks. s46h (us, against the one-shot blocks of 2 rows and convert 8):
  // 2304 x 16384 10.78 against 11.39 and 12.37, 4096 x 14336 15.81 against 16.55 and
  // 16.05. At K <= 8192 they lost (s46e, 6144 x 4096: 9.7 against convert 8's 7.6).
  if (!p.tiles_per_block && !p.warps_per_tile && v == 4 && p.K > 8192 && p.K <= int64_t(kRowsThreads) * 16 * 4 &&
      !rows_f32()) {
    constexpr auto kernel = skinny_gemm_rows_persist_kernel<OutT, 4>;
    const int64_t blocks = std::min<int64_t>(p.N, resident_blocks_once<kernel, kRowsThreads>());
    if (blocks < 1) return cudaErrorInvalidConfiguration;
    kernel<<<unsigned(blocks), kRowsThreads, 0, stream>>>(p);
    return cudaSuccess;
  }
  return rows_f32() ? launch_rows_with<OutT, true>(p, r, v, stream) : launch_rows_with<OutT, false>(p, r, v, stream);
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
    kernel<<<unsigned(blocks), 128, size_t(smem), stream>>>(p);
    return int(cudaSuccess);
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
    skinny_gemm_bytes_kernel<OutT><<<grid, kWarps * 32, 0, stream>>>(p);
    return cudaSuccess;
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
