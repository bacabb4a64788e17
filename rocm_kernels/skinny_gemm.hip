// FP8 GEMM for decode batch sizes on AMD CDNA GPUs (gfx942 MI300X, gfx90a MI200):
//   out[m, n] = sum_k a[m, k] * b[n, k] * scale_a * scale_b[n or 0] (+ bias[n]),
// a [M, K] and b [N, K] float8_e4m3fnuz (ROCm's fp8), products summed in fp32. Torch-free:
// cuda_kernels/skinny_gemm_torch.cpp checks the tensors and calls the launcher below.
//
// Why this shape of kernel: at M <= 32 the product is memory bound; the weight (N*K
// bytes) is read once and the work is to keep enough of it in flight on every CU.
//
// - A block owns 16 * NW weight rows (NW n-tiles of 16) and one slice of 32 activation
//   rows, and splits K among its waves (up to 16). Per 64-byte chunk of K, lane
//   (r = lane % 16, g = lane / 16) loads 16 bytes at byte 16g of weight row r of each
//   n-tile and of activation row r of each 16-row m-tile (M is padded to the MFMA's 16):
//   one global_load_dwordx4 each, every row's 64 bytes one contiguous run. The weight is
//   the MFMA's B operand (columns n), the activation its A operand (rows m); in both, lane
//   (r, g) feeds k-slots starting at 8g (fp8, K = 32) or 4g (f16, K = 16) of its row, so
//   handing the MFMAs consecutive pieces of the 16 loaded bytes maps every byte of the
//   chunk to one k-slot, identically for A and B: a permutation of K that leaves each dot
//   product unchanged, with no LDS staging or lane shuffles.
// - gfx942: v_mfma_f32_16x16x32_fp8_fp8 takes the fnuz bytes as they are (MI300's fp8 is
//   fnuz), two per chunk and tile pair. gfx90a has no fp8: each fnuz pair becomes an f16
//   pair by integer operations (value / 128, exact, common/fp8.h), one packed multiply by
//   128 makes it the exact value (and every fp8 subnormal an f16 normal), and
//   v_mfma_f32_16x16x16f16 runs four per chunk. The NaN 0x80 is restored on a rare
//   branch, so it propagates as on the CPU.
// - Split-K: the waves' fp32 partials meet in LDS and one thread per output sums them in
//   wave order, scales, adds the bias, rounds and stores. One block per output tile, no
//   workspace, no atomics: deterministic and graph capturable. No cross-block split: a
//   small N leaves CUs idle (N = 2304 fills 144 of MI300X's 304 CUs at NW = 1).
// - Tails: rows past N and activation rows past M are clamped to the last real row (valid
//   memory; their outputs are never stored). K % 64 != 0 leaves a last chunk whose
//   segments past K load zero bytes (+0 in fnuz). Rows not 16-byte aligned, or K % 16 != 0,
//   take a byte kernel (a wave per weight row): correct for any layout, not fast.
//
// Checked, never run: no AMD GPU here. tests/test_rocm_isa.py reads this file's assembly.
#include <hip/hip_runtime.h>

#include <algorithm>
#include <cstdint>

#include "block_reduce_hip.h"
#include "fp8.h"
#include "gpu_launchers.h"
#include "vec_io_hip.h"

#if defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__)
#define IK_MFMA_FP8 1
#elif defined(__gfx90a__)
#define IK_MFMA_F16 1
#endif

namespace {

using inference_kernels::DType;
using inference_kernels::SkinnyGemmParams;
using namespace inference_kernels::rocm;

constexpr int kChunk = 64;      // K bytes per step: 4 lane groups x 16 bytes per row
constexpr int kMaxM = 32;       // activation rows per launch slice: two 16-row m-tiles
constexpr int kMaxWaves = 16;   // waves per block (K splits)
constexpr int kLdsBytes = 32768;  // the partials' LDS, at most half a CU's 64 KB

typedef uint32_t U32x4 __attribute__((ext_vector_type(4)));
typedef long I64x2 __attribute__((ext_vector_type(2)));
typedef float F32x4 __attribute__((ext_vector_type(4)));
typedef _Float16 F16x2 __attribute__((ext_vector_type(2)));
typedef _Float16 F16x4 __attribute__((ext_vector_type(4)));

struct Geometry {
  int64_t nchunks;  // ceil(K / 64)
  int waves;        // K splits per block
};

// 16 bytes of a row at p (16-byte aligned), or zeros when the segment lies past K
// (avail <= 0; K % 16 == 0, so a segment is all inside or all outside). The weight is read
// once: a non-temporal load.
template <bool STREAM>
__device__ __forceinline__ U32x4 load16(const uint8_t* p, int64_t avail) {
  if (avail <= 0) return U32x4{0u, 0u, 0u, 0u};
  const auto* v = reinterpret_cast<const U32x4*>(p);
  return STREAM ? __builtin_nontemporal_load(v) : *v;
}

#if defined(IK_MFMA_F16)
// 16 fnuz bytes as 16 exact f16 values, four MFMA operands: h[q] holds bytes 4q .. 4q + 3.
struct F16x16 {
  F16x4 h[4];
};

__device__ __forceinline__ F16x16 to_f16(const U32x4& v) {
  uint32_t f[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = inference_kernels::fp8_fnuz_x2_to_f16x2_div128(v[i]);
    f[2 * i + 1] = inference_kernels::fp8_fnuz_x2_to_f16x2_div128(v[i] >> 16);
  }
  const uint32_t nan = inference_kernels::fp8_fnuz_x4_nan_bits(v[0]) |
                       inference_kernels::fp8_fnuz_x4_nan_bits(v[1]) |
                       inference_kernels::fp8_fnuz_x4_nan_bits(v[2]) |
                       inference_kernels::fp8_fnuz_x4_nan_bits(v[3]);
  if (__builtin_expect(nan != 0, 0)) {
#pragma unroll
    for (int j = 0; j < 8; ++j) f[j] = inference_kernels::fp8_fnuz_f16x2_restore_nan(f[j]);
  }
  F16x16 r;
  const F16x2 k128 = {_Float16(128.0f), _Float16(128.0f)};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const F16x2 lo = __builtin_bit_cast(F16x2, f[2 * q]) * k128;
    const F16x2 hi = __builtin_bit_cast(F16x2, f[2 * q + 1]) * k128;
    r.h[q] = F16x4{lo[0], lo[1], hi[0], hi[1]};
  }
  return r;
}
#endif

// acc[nw][mt] (D = A B: rows m of the activation, columns n of the weight) += one chunk.
template <int NW, int MT>
__device__ __forceinline__ void mfma_chunk(F32x4 (&acc)[NW][MT], const U32x4 (&w)[NW],
                                           const U32x4 (&x)[MT]) {
#if defined(IK_MFMA_FP8)
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // bytes 8h .. 8h + 7 of each lane's 16
#pragma unroll
    for (int nw = 0; nw < NW; ++nw) {
      const long wb = __builtin_bit_cast(I64x2, w[nw])[h];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const long xb = __builtin_bit_cast(I64x2, x[mt])[h];
        acc[nw][mt] = __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(xb, wb, acc[nw][mt], 0, 0, 0);
      }
    }
  }
#elif defined(IK_MFMA_F16)
  F16x16 xf[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) xf[mt] = to_f16(x[mt]);
#pragma unroll
  for (int nw = 0; nw < NW; ++nw) {
    const F16x16 wf = to_f16(w[nw]);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        acc[nw][mt] = __builtin_amdgcn_mfma_f32_16x16x16f16(xf[mt].h[q], wf.h[q], acc[nw][mt], 0, 0, 0);
      }
    }
  }
#else
  // The host pass and archs without MFMA: the launcher never runs this kernel there.
  (void)acc;
  (void)w;
  (void)x;
#endif
}

// Blocks of 1024 threads (16 waves) keep each wave at 128 VGPRs + AGPRs at most.
template <typename OutT, int NW, int MT>
__global__ void __launch_bounds__(kMaxWaves * kWave) skinny_gemm_kernel(SkinnyGemmParams p, Geometry geo) {
  // Per wave, its fp32 partials: [NW * MT * 4 registers][64 lanes] (conflict-free).
  extern __shared__ float partials[];
  constexpr int E = NW * MT * 4;
  // Chunks per load batch: 4 weight loads (4 KB a wave) in flight per lane.
  constexpr int U = 4 / NW;
  const int lane = threadIdx.x % kWave, wave = threadIdx.x / kWave;
  const int r = lane % 16, g = lane / 16;
  const int64_t n0 = int64_t(blockIdx.x) * 16 * NW;
  const int64_t m0 = int64_t(blockIdx.y) * kMaxM;
  const int64_t M = p.M, N = p.N, K = p.K;

  F32x4 acc[NW][MT];
#pragma unroll
  for (int nw = 0; nw < NW; ++nw) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) acc[nw][mt] = F32x4{0.0f, 0.0f, 0.0f, 0.0f};
  }
  {
    const int64_t c0 = wave * geo.nchunks / geo.waves, c1 = (wave + 1) * geo.nchunks / geo.waves;
    const auto* b = static_cast<const uint8_t*>(p.b);
    const auto* a = static_cast<const uint8_t*>(p.a);
    const uint8_t* wr[NW];
#pragma unroll
    for (int nw = 0; nw < NW; ++nw) wr[nw] = b + std::min(n0 + nw * 16 + r, N - 1) * p.ldb + 16 * g;
    const uint8_t* xr[MT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) xr[mt] = a + std::min(m0 + mt * 16 + r, M - 1) * p.lda + 16 * g;

    // Chunks wholly inside K run unchecked, U at a time; the rest one by one.
    const int64_t full = std::max(c0, std::min(c1, K / kChunk));
    int64_t c = c0;
    for (; c + U <= full; c += U) {
      U32x4 w[U][NW], x[U][MT];
#pragma unroll
      for (int u = 0; u < U; ++u) {
#pragma unroll
        for (int nw = 0; nw < NW; ++nw) w[u][nw] = load16<true>(wr[nw] + (c + u) * kChunk, 16);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) x[u][mt] = load16<false>(xr[mt] + (c + u) * kChunk, 16);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) mfma_chunk<NW, MT>(acc, w[u], x[u]);
    }
    for (; c < c1; ++c) {
      const int64_t off = c * kChunk, avail = K - off - 16 * g;
      U32x4 w[NW], x[MT];
#pragma unroll
      for (int nw = 0; nw < NW; ++nw) w[nw] = load16<true>(wr[nw] + off, avail);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) x[mt] = load16<false>(xr[mt] + off, avail);
      mfma_chunk<NW, MT>(acc, w, x);
    }
  }

  float* mine = partials + wave * E * kWave;
#pragma unroll
  for (int nw = 0; nw < NW; ++nw) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) mine[((nw * MT + mt) * 4 + i) * kWave + lane] = acc[nw][mt][i];
    }
  }
  __syncthreads();

  // Output (e, l): register e = (nw * MT + mt) * 4 + i of lane l holds D row 4 (l / 16) + i
  // (activation row) and column l % 16 (weight row) of tile (nw, mt); summed over the
  // waves in a fixed order.
  const float sa = *p.scale_a;
  for (int j = threadIdx.x; j < E * kWave; j += blockDim.x) {
    const int e = j / kWave, l = j % kWave;
    const int nw = e / (MT * 4), mt = (e / 4) % MT, i = e % 4;
    const int64_t n = n0 + nw * 16 + l % 16;
    const int64_t m = m0 + mt * 16 + 4 * (l / 16) + i;
    if (n >= N || m >= M) continue;
    float sum = 0.0f;
    for (int w = 0; w < geo.waves; ++w) sum += partials[(w * E + e) * kWave + l];
    float y = sum * (sa * p.scale_b[p.scale_b_per_channel ? n : 0]);
    if (p.bias) y += to_float(static_cast<const OutT*>(p.bias)[n]);
    static_cast<OutT*>(p.out)[m * p.ldo + n] = from_float<OutT>(y);
  }
}

// Any layout (rows not 16-byte aligned, K % 16 != 0): a wave per weight row, lanes
// striding K with byte loads, fp32 sums reduced over the 64 lanes. Correct, not fast.
template <typename OutT>
__global__ void __launch_bounds__(256) skinny_gemm_bytes_kernel(SkinnyGemmParams p) {
  const int lane = threadIdx.x % kWave;
  const int64_t n = int64_t(blockIdx.x) * (blockDim.x / kWave) + threadIdx.x / kWave;
  if (n >= p.N) return;
  const auto* b = static_cast<const uint8_t*>(p.b) + n * p.ldb;
  const float scale = *p.scale_a * p.scale_b[p.scale_b_per_channel ? n : 0];
  const float bias = p.bias ? to_float(static_cast<const OutT*>(p.bias)[n]) : 0.0f;
  for (int64_t m = blockIdx.y; m < p.M; m += gridDim.y) {
    const auto* a = static_cast<const uint8_t*>(p.a) + m * p.lda;
    float sum = 0.0f;
    for (int64_t k = lane; k < p.K; k += kWave) {
      sum += inference_kernels::fp8_fnuz_to_float(a[k]) * inference_kernels::fp8_fnuz_to_float(b[k]);
    }
    sum = wave_reduce<inference_kernels::Sum>(sum);
    if (lane == 0) static_cast<OutT*>(p.out)[m * p.ldo + n] = from_float<OutT>(sum * scale + bias);
  }
}

int cu_count() {
  static int counts[64] = {};
  int dev = 0;
  if (hipGetDevice(&dev) != hipSuccess || dev < 0 || dev >= 64) return 304;
  if (!counts[dev]) {
    int n = 0;
    if (hipDeviceGetAttribute(&n, hipDeviceAttributeMultiprocessorCount, dev) != hipSuccess) n = 0;
    counts[dev] = n > 0 ? n : 304;
  }
  return counts[dev];
}

template <typename OutT, int NW, int MT>
int launch(const SkinnyGemmParams& p, hipStream_t stream) {
  constexpr int E = NW * MT * 4;
  constexpr int kMaxLdsWaves = std::min(kMaxWaves, int(kLdsBytes / (E * kWave * sizeof(float))));
  Geometry geo{};
  geo.nchunks = (p.K + kChunk - 1) / kChunk;
  // At least 4 chunks (a load batch at NW = 1) per wave; the caller's count where given
  // (config's warps_per_tile, clamped to what the LDS holds).
  const int64_t auto_waves = std::clamp<int64_t>(geo.nchunks / 4, 1, kMaxLdsWaves);
  geo.waves = p.warps_per_tile > 0 ? std::min(p.warps_per_tile, kMaxLdsWaves) : int(auto_waves);
  const int64_t blocks = (p.N + 16 * NW - 1) / (16 * NW);
  const int64_t m_slices = (p.M + kMaxM - 1) / kMaxM;
  if (blocks > INT32_MAX || m_slices > 65535) return hipErrorInvalidConfiguration;
  const size_t lds = size_t(geo.waves) * E * kWave * sizeof(float);
  skinny_gemm_kernel<OutT, NW, MT>
      <<<dim3(unsigned(blocks), unsigned(m_slices)), geo.waves * kWave, lds, stream>>>(p, geo);
  return hipSuccess;
}

template <typename OutT, int MT>
int launch_nw(const SkinnyGemmParams& p, hipStream_t stream) {
  // Two n-tiles per block (the activation chunk shared by 32 weight rows) only where
  // that still gives every CU a block; config's tiles_per_block forces 1 or 2.
  const bool two = p.tiles_per_block > 0 ? p.tiles_per_block >= 2 : (p.N + 31) / 32 >= cu_count();
  return two ? launch<OutT, 2, MT>(p, stream) : launch<OutT, 1, MT>(p, stream);
}

template <typename OutT>
int launch_out(const SkinnyGemmParams& p, hipStream_t stream) {
  const bool vec = p.K % 16 == 0 && p.lda % 16 == 0 && p.ldb % 16 == 0 && aligned(p.a, 16) &&
                   aligned(p.b, 16);
  if (!vec) {
    constexpr int kWaves = 4;
    const int64_t blocks = (p.N + kWaves - 1) / kWaves;
    if (blocks > INT32_MAX) return hipErrorInvalidConfiguration;
    const dim3 grid(unsigned(blocks), unsigned(std::min<int64_t>(p.M, 65535)));
    skinny_gemm_bytes_kernel<OutT><<<grid, kWaves * kWave, 0, stream>>>(p);
    return hipSuccess;
  }
  // m-tiles of 16 activation rows: M 1-16 one, 17-32 (and M > 32, in slices of 32) two.
  return p.M > 16 ? launch_nw<OutT, 2>(p, stream) : launch_nw<OutT, 1>(p, stream);
}

}  // namespace

namespace inference_kernels {

// config's cluster and convert (CUDA's) mean nothing here and are ignored.
int skinny_gemm_fp8_launch(const SkinnyGemmParams& p, void* stream) {
  if (p.M <= 0 || p.N <= 0) return hipSuccess;
  const auto s = static_cast<hipStream_t>(stream);
  int err = hipErrorInvalidValue;
  switch (p.out_dtype) {
    case DType::kBFloat16: err = launch_out<BFloat16>(p, s); break;
    case DType::kFloat16: err = launch_out<Half>(p, s); break;
    default: break;
  }
  return err != hipSuccess ? err : hipGetLastError();
}

}  // namespace inference_kernels
