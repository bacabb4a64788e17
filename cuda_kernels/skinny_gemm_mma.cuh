// The skinny FP8 GEMM's converts 1-3: the weight converted to f16 and multiplied by
// mma.sync (HMMA, fp32 sums), K split over a block's warps and a cluster's blocks, the
// activation converted per warp (1, 2) or once by a pre-pass (3). See skinny_gemm.cu.
#pragma once

#include "skinny_gemm_common.cuh"

namespace {

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
  pdl_enter();
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
  pdl_enter();
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
  // kF16Copy streams its first weight chunks before it waits for the pre-pass (ring_loop):
  // the pre-pass began only after the kernel before it had ended (launch.cuh), and the
  // weights are not its output.
  if constexpr (CVT != kF16Copy) pdl_enter();
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
  if constexpr (CVT == kF16Copy) {
    __syncwarp();
    pdl_enter();  // the blocks without a tile have not waited yet; for the others, a no-op
  }
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

}  // namespace
