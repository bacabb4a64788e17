// GGUF Q4_K / Q6_K mat-vec on AMD CDNA GPUs (gfx942, gfx90a): out [m, n] = x [m, k] @
// dequantize(q).T for m = 1..8 (decode). Torch-free, the launcher ABI of gpu_launchers.h;
// cuda_kernels/q4k_torch.cpp checks the tensors (a ROCm torch serves its c10/cuda API).
// The weight is dequantised in registers as it streams past and never written anywhere.
//
// Work split: a wave (64 lanes) owns R consecutive weight rows; 4 lanes share each
// 256-weight block, so a wave step covers 16 blocks (4096 weights) of its R rows and
// every lane holds 64 weights of each. A workgroup is 4 waves: 4 groups of R rows, or,
// when N is too small to put enough waves on an MI300X's 1216 SIMDs, 2 or 1 groups whose
// waves split K (`split` waves per group, partial sums added through LDS once at the
// end). No other barrier, no atomics: deterministic and graph-capturable.
//
// Memory: weight bytes move in 16-byte global_load_dwordx4, marked non-temporal (each
// byte is used once), so the caches keep x, which every wave re-reads: a lane loads
// the x values of its 64 K positions once per step and uses each for all R rows, and
// each weight register for all M rows of x. R is 2 at M = 1 and 1 otherwise (more rows
// spill: the x vectors of a step and R x M accumulators share the register budget, see
// kWavesPerSimd), and 1 for small N (more waves in flight).
//
// Not measured (no AMD GPU here). Expected limits: at M = 1 about 3 VALU instructions a
// weight against the ~4 an MI300X CU can spend per weight at full HBM bandwidth; from
// M ~ 3 on, x re-read from L1/L2 (M x 4 bytes a weight at R = 1) and the M FMAs a weight
// bound the kernel, as they do the CUDA one (BENCHMARKS.md); x staged in LDS as 16-bit
// values with more rows per wave is the next step there.
//
// Arithmetic (fp32 FMAs on the levels, as the CUDA kernel; x used as given): levels
// become floats through v_cvt_f32_ubyte{0..3}, one instruction a weight, from words
// whose bytes are masked to one level each (Q4_K high nibbles are read as 16 q and
// their scale divided by 16, exactly). Per lane and sub-block the order matches
// cuda_kernels/q4k.cu (sum x q over the sub-block's weights in K order, then
// acc += (d sc) * sum - (dmin m) * sum x); Q4_K drops CUDA's 16 + q mantissa offset, so
// no 16 * sum x is subtracted back. Lanes' partial sums meet in a 64-lane __shfl_xor
// butterfly, in a different order than CUDA's 32-lane one; tests/test_q4k_rocm_emu.py
// runs this order on the CPU against the fp64 reference.
#include <hip/hip_runtime.h>

#include <cstdint>

#include "block_reduce_hip.h"
#include "ggml_blocks.h"
#include "gpu_launchers.h"
#include "vec_io_hip.h"

namespace {

using inference_kernels::DType;
using inference_kernels::KQuant;
using inference_kernels::KQuantGemvParams;
using inference_kernels::ggml::BlockQ4K;
using inference_kernels::ggml::BlockQ6K;
using inference_kernels::ggml::kQK;
using namespace inference_kernels::rocm;

constexpr int kWaves = 4;                                // waves per workgroup
constexpr int kThreads = kWaves * kWave;
constexpr int kLanesPerBlock = 4;                        // lanes sharing one 256-weight block
constexpr int kBlocksPerStep = kWave / kLanesPerBlock;  // 16 blocks per wave step
// Waves the launcher aims for before it spends fewer rows per wave or splits K:
// 2 per SIMD of an MI300X (304 CUs x 4 SIMDs).
constexpr int64_t kTargetWaves = 304 * 4 * 2;

// 16 bytes at a 4-byte aligned address (global_load_dwordx4 needs only dword alignment).
typedef uint32_t U32x4 __attribute__((ext_vector_type(4), aligned(4)));
typedef uint32_t U32x2 __attribute__((ext_vector_type(2), aligned(4)));
typedef float F32x4 __attribute__((ext_vector_type(4), aligned(16)));

// Through the global address space: a pointer rebuilt from an integer (Q6_K's
// aligned-down addresses) would otherwise become a flat load.
#define IK_GLOBAL __attribute__((address_space(1)))

__device__ __forceinline__ U32x4 ld_weight16(const uint8_t* p) {
  return __builtin_nontemporal_load((const IK_GLOBAL U32x4*)(p));
}

__device__ __forceinline__ uint32_t ld_weight4(const uint8_t* p) {
  return __builtin_nontemporal_load((const IK_GLOBAL uint32_t*)(p));
}

// Four consecutive x values (4-element aligned, as q4k_torch.cpp guarantees) as floats.
__device__ __forceinline__ void load_x4(const float* p, float (&v)[4]) {
  const F32x4 t = *reinterpret_cast<const F32x4*>(p);
  v[0] = t.x;
  v[1] = t.y;
  v[2] = t.z;
  v[3] = t.w;
}

__device__ __forceinline__ void load_x4(const Half* p, float (&v)[4]) {
  typedef Half H4 __attribute__((ext_vector_type(4), aligned(8)));
  const H4 t = *reinterpret_cast<const H4*>(p);
  v[0] = static_cast<float>(t.x);
  v[1] = static_cast<float>(t.y);
  v[2] = static_cast<float>(t.z);
  v[3] = static_cast<float>(t.w);
}

__device__ __forceinline__ void load_x4(const BFloat16* p, float (&v)[4]) {
  typedef uint32_t W2 __attribute__((ext_vector_type(2), aligned(8)));
  const W2 t = *reinterpret_cast<const W2*>(p);
  v[0] = __builtin_bit_cast(float, t.x << 16);
  v[1] = __builtin_bit_cast(float, t.x & 0xFFFF0000u);
  v[2] = __builtin_bit_cast(float, t.y << 16);
  v[3] = __builtin_bit_cast(float, t.y & 0xFFFF0000u);
}

__device__ __forceinline__ uint32_t word(const U32x4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Byte i of v as a float: v_cvt_f32_ubyte<i>.
__device__ __forceinline__ float byte_float(uint32_t v, int i) {
  return static_cast<float>((v >> (8 * i)) & 0xFFu);
}

__device__ __forceinline__ float half_bits_to_float(uint32_t bits) {
  return static_cast<float>(__builtin_bit_cast(Half, static_cast<uint16_t>(bits)));
}

// The AMDGPU scheduler hoists every x load of a fully unrolled step to the top (all
// 16 M vectors of them), which at M > 2 needs more than the 128-VGPR budget and spills.
// A scheduling barrier every G groups of 4 weights bounds what is in flight to G M x
// vectors; the other waves on the SIMD hide the latency, and the weight loads are
// issued before the first barrier.
// The occupancy each M is compiled for, the most that compiles without spills (read in
// tests/test_rocm_isa.py): 4 waves per SIMD (128 VGPRs) up to M = 3, 3 (168) up to 5,
// then 2 (256): M x vectors in flight and M accumulators per row outgrow 128 VGPRs.
template <int M>
constexpr int kWavesPerSimd = M <= 3 ? 4 : (M <= 5 ? 3 : 2);

template <int M>
constexpr int kGroupsPerFence = M <= 2 ? 4 : (M <= 4 ? 2 : 1);

__device__ __forceinline__ void schedule_fence() { __builtin_amdgcn_sched_barrier(0); }

// ---- the end of a wave's rows: sum the lanes, then the K-split waves; one lane stores ----

template <typename T, int M, int R>
__device__ __forceinline__ void reduce_store(const KQuantGemvParams& p, int64_t row0, int split,
                                             float (&acc)[R][M]) {
  __shared__ float partial[kWaves][R * M];
  const int lane = threadIdx.x % kWave, wave = threadIdx.x / kWave;
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = wave_reduce<Sum>(acc[r][m]);
  }
  if (split > 1) {  // uniform over the workgroup: every wave reaches the barrier
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int m = 0; m < M; ++m) partial[wave][r * M + m] = acc[r][m];
      }
    }
    __syncthreads();
    if (wave % split != 0) return;
    for (int s = 1; s < split; ++s) {  // the K slices in order
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int m = 0; m < M; ++m) acc[r][m] += partial[wave + s][r * M + m];
      }
    }
  }
  if (lane != 0) return;
  T* out = static_cast<T*>(p.out);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (row0 + r >= p.n) break;
#pragma unroll
    for (int m = 0; m < M; ++m) out[m * p.n + row0 + r] = from_float<T>(acc[r][m]);
  }
}

// ---- Q4_K ------------------------------------------------------------------------------

// Lane (block b, chunk c = lane % 4): weights 64c + l (sub-block 2c, low nibble of
// qs[32c + l]) and 64c + 32 + l (sub-block 2c + 1, high nibble), l = 0..31.
template <typename T, int M, int R>
__global__ void __launch_bounds__(kThreads) __attribute__((amdgpu_waves_per_eu(kWavesPerSimd<M>)))
q4k_gemv_kernel(const KQuantGemvParams p, int split) {
  constexpr int kBytes = sizeof(BlockQ4K);
  const int lane = threadIdx.x % kWave, wave = threadIdx.x / kWave;
  const int slice = wave % split;
  // Waves past N compute on the last row (clamped) and store nothing: they must still
  // reach reduce_store's barrier.
  const int64_t row0 = (int64_t(blockIdx.x) * (kWaves / split) + wave / split) * R;
  const int64_t nb = p.k / kQK;
  const int c = lane % kLanesPerBlock;
  const uint8_t* rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    rows[r] = static_cast<const uint8_t*>(p.q) + (row0 + r < p.n ? row0 + r : p.n - 1) * nb * kBytes;
  const T* x = static_cast<const T*>(p.x);

  float acc[R][M] = {};
  for (int64_t b = slice * kBlocksPerStep + lane / kLanesPerBlock; b < nb;
       b += kBlocksPerStep * split) {
    U32x4 head[R], lo[R], hi[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint8_t* blk = rows[r] + b * kBytes;
      head[r] = ld_weight16(blk);  // d, dmin, scales[12]
      lo[r] = ld_weight16(blk + 16 + 32 * c);
      hi[r] = ld_weight16(blk + 32 + 32 * c);
    }
    const int64_t k0 = b * kQK + 64 * c;
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // sub-block 2c (low nibbles), then 2c + 1
      // Low nibbles as q, high nibbles as 16 q (no shift): both exact in fp32.
      const uint32_t mask = half ? 0xF0F0F0F0u : 0x0F0F0F0Fu;
      float s[R][M] = {}, xs[M] = {};  // sum x q, sum x over the sub-block
#pragma unroll
      for (int w = 0; w < 8; ++w) {  // qs bytes 4w..4w+3 of the lane's 32
        float f[R][4];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const uint32_t v = word(w < 4 ? lo[r] : hi[r], w % 4) & mask;
#pragma unroll
          for (int i = 0; i < 4; ++i) f[r][i] = byte_float(v, i);
        }
#pragma unroll
        for (int m = 0; m < M; ++m) {
          float xv[4];
          load_x4(x + m * p.x_stride + k0 + 32 * half + 4 * w, xv);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            xs[m] += xv[i];
#pragma unroll
            for (int r = 0; r < R; ++r) s[r][m] = fmaf(f[r][i], xv[i], s[r][m]);
          }
        }
        if ((w + 1) % kGroupsPerFence<M> == 0) schedule_fence();
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        // Scale and min of sub-block j = 2c + half (ggml's get_scale_min_k4, four at a
        // time: byte j % 4 of these words is sub-block j's).
        const uint32_t s0 = head[r].y, s1 = head[r].z, s2 = head[r].w;
        const uint32_t scw = c < 2 ? s0 & 0x3F3F3F3Fu : (s2 & 0x0F0F0F0Fu) | ((s0 >> 2) & 0x30303030u);
        const uint32_t mnw = c < 2 ? s1 & 0x3F3F3F3Fu
                                   : ((s2 >> 4) & 0x0F0F0F0Fu) | ((s1 >> 2) & 0x30303030u);
        const int at = 16 * (c & 1) + 8 * half;
        const float d = half_bits_to_float(head[r].x), dmin = half_bits_to_float(head[r].x >> 16);
        const float ds = d * static_cast<float>((scw >> at) & 0xFF) * (half ? 0.0625f : 1.0f);
        const float dm = dmin * static_cast<float>((mnw >> at) & 0xFF);
#pragma unroll
        for (int m = 0; m < M; ++m) {
          acc[r][m] = fmaf(ds, s[r][m], acc[r][m]);  // weight = (d sc) q - (dmin m)
          acc[r][m] = fmaf(-dm, xs[m], acc[r][m]);
        }
      }
    }
  }
  reduce_store<T, M, R>(p, row0, split, acc);
}

// ---- Q6_K ------------------------------------------------------------------------------

// NW words from `a`, 2-byte aligned: the aligned words covering them (one more when the
// range starts 2 bytes into a word), funnel-shifted into place (v_alignbit_b32). Every
// range this is used for has a word of its block after it, so the extra word, read
// unconditionally, stays inside the block; the word before an unaligned range is inside
// the previous block or, for a view 2 bytes into its storage, inside that storage.
__device__ __forceinline__ void ld_unaligned16(const uint8_t* base, uint32_t shift, uint32_t (&w)[4]) {
  const U32x4 v = ld_weight16(base);
  const uint32_t e = ld_weight4(base + 16);
  w[0] = __builtin_amdgcn_alignbit(v.y, v.x, shift);
  w[1] = __builtin_amdgcn_alignbit(v.z, v.y, shift);
  w[2] = __builtin_amdgcn_alignbit(v.w, v.z, shift);
  w[3] = __builtin_amdgcn_alignbit(e, v.w, shift);
}

// Lane (block b, h = (lane / 2) % 2, g = lane % 2): weights 128h + 32s + 16g + i for
// s = 0..3, i = 0..15, whose low 4 bits are in ql[64h + 32(s % 2) + 16g + i] (nibble
// s / 2), top 2 bits in qh[32h + 16g + i] (bits 2s), scale scales[8h + 2s + g].
template <typename T, int M, int R>
__global__ void __launch_bounds__(kThreads) __attribute__((amdgpu_waves_per_eu(kWavesPerSimd<M>)))
q6k_gemv_kernel(const KQuantGemvParams p, int split) {
  constexpr int kBytes = sizeof(BlockQ6K);
  const int lane = threadIdx.x % kWave, wave = threadIdx.x / kWave;
  const int slice = wave % split;
  const int64_t row0 = (int64_t(blockIdx.x) * (kWaves / split) + wave / split) * R;
  const int64_t nb = p.k / kQK;
  const int h = (lane >> 1) & 1, g = lane & 1;
  int64_t b = slice * kBlocksPerStep + lane / kLanesPerBlock;
  // A step moves 16 * split blocks (3360 * split bytes, a multiple of 4) on, so whether
  // a lane's blocks in a row start 4-aligned never changes: the aligned-down address
  // and the shift are set once per row, and every range the lane reads (block offsets
  // 64h + 16g, +32, 128 + 32h + 16g, 192 + 8h: multiples of 4) shares them.
  const uint8_t* blk[R];
  uint32_t shift[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(static_cast<const uint8_t*>(p.q) +
        (row0 + r < p.n ? row0 + r : p.n - 1) * nb * kBytes + b * kBytes);
    blk[r] = reinterpret_cast<const uint8_t*>(a & ~uintptr_t(3));
    shift[r] = static_cast<uint32_t>(a & 2) * 8;
  }
  const int ofs_ql = 64 * h + 16 * g, ofs_qh = 128 + 32 * h + 16 * g, ofs_sc = 192 + 8 * h;
  const int64_t stride = int64_t(kBlocksPerStep) * split * kBytes;
  const T* x = static_cast<const T*>(p.x);

  float acc[R][M] = {};
  for (; b < nb; b += kBlocksPerStep * split) {
    uint32_t qa[R][4], qb[R][4], qh[R][4];
    float ds[R][4];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      ld_unaligned16(blk[r] + ofs_ql, shift[r], qa[r]);
      ld_unaligned16(blk[r] + ofs_ql + 32, shift[r], qb[r]);
      ld_unaligned16(blk[r] + ofs_qh, shift[r], qh[r]);
      // scales[8h .. 8h + 7]: the range ends 2 or 10 bytes before the block does, so the
      // third word is read only when shifted.
      const uint8_t* sp = blk[r] + ofs_sc;
      const uint32_t w0 = ld_weight4(sp), w1 = ld_weight4(sp + 4), w2 = shift[r] ? ld_weight4(sp + 8) : 0u;
      const uint32_t sc0 = __builtin_amdgcn_alignbit(w1, w0, shift[r]);
      const uint32_t sc1 = __builtin_amdgcn_alignbit(w2, w1, shift[r]);
      // d sits 208 bytes into the block: 208 from the aligned-down address plus the shift.
      const float d = half_bits_to_float(*(const IK_GLOBAL uint16_t*)(blk[r] + 208 + shift[r] / 8));
      blk[r] += stride;
#pragma unroll
      for (int s = 0; s < 4; ++s) {  // scale byte g + 2s of the 8
        const uint32_t sw = s < 2 ? sc0 : sc1;
        ds[r][s] = d * static_cast<float>(static_cast<int8_t>((sw >> (8 * (g + 2 * (s % 2)))) & 0xFF));
      }
    }
    const int64_t k0 = b * kQK + 128 * h + 16 * g;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      float part[R][M] = {};  // sum (q - 32) x over the lane's 16 weights of sub-block s
#pragma unroll
      for (int w = 0; w < 4; ++w) {  // bytes 4w..4w+3 of each range: i = 4w..4w+3
        float f[R][4];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const uint32_t l = s % 2 ? qb[r][w] : qa[r][w];
          const uint32_t lo4 = (s < 2 ? l : l >> 4) & 0x0F0F0F0Fu;
          const uint32_t hi2 = s == 0 ? qh[r][w] << 4 : s == 1 ? qh[r][w] << 2
                             : s == 2 ? qh[r][w] : qh[r][w] >> 2;
          const uint32_t q6 = lo4 | (hi2 & 0x30303030u);
#pragma unroll
          for (int i = 0; i < 4; ++i) f[r][i] = byte_float(q6, i) - 32.0f;  // exact
        }
#pragma unroll
        for (int m = 0; m < M; ++m) {
          float xv[4];
          load_x4(x + m * p.x_stride + k0 + 32 * s + 4 * w, xv);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
#pragma unroll
            for (int r = 0; r < R; ++r) part[r][m] = fmaf(f[r][i], xv[i], part[r][m]);
          }
        }
        if ((w + 1) % kGroupsPerFence<M> == 0) schedule_fence();
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int m = 0; m < M; ++m) acc[r][m] = fmaf(ds[r][s], part[r][m], acc[r][m]);
      }
    }
  }
  reduce_store<T, M, R>(p, row0, split, acc);
}

// ---- launch ----------------------------------------------------------------------------

template <typename T, int M, int R>
int launch_rows(const KQuantGemvParams& p, int split, hipStream_t stream) {
  const int64_t rows_per_group = int64_t(kWaves / split) * R;
  const int64_t groups = (p.n + rows_per_group - 1) / rows_per_group;
  if (groups * kThreads > UINT32_MAX) return hipErrorInvalidConfiguration;  // x work-items
  const dim3 grid(static_cast<unsigned>(groups));
  if (p.format == KQuant::kQ4K) {
    q4k_gemv_kernel<T, M, R><<<grid, kThreads, 0, stream>>>(p, split);
  } else {
    q6k_gemv_kernel<T, M, R><<<grid, kThreads, 0, stream>>>(p, split);
  }
  return hipGetLastError();
}

// Rows per wave: more rows reuse each x value a lane loads and converts; fewer cost
// fewer registers (R x M accumulators, R rows of weights in flight) and give small N
// more waves. Below kTargetWaves, R halves first, then waves split K (2 or 4 per row
// group) while each still gets a step of blocks.
template <typename T, int M>
int launch_m(const KQuantGemvParams& p, hipStream_t stream) {
  constexpr int kR = M == 1 ? 2 : 1;
  int r = kR;
  while (r > 1 && (p.n + r - 1) / r < kTargetWaves) r /= 2;
  const int64_t waves = (p.n + r - 1) / r, nb = p.k / kQK;
  int split = 1;
  while (split < kWaves && waves * split < kTargetWaves && nb > int64_t(kBlocksPerStep) * split)
    split *= 2;
  if (r >= 2) return launch_rows<T, M, (kR >= 2 ? 2 : 1)>(p, split, stream);
  return launch_rows<T, M, 1>(p, split, stream);
}

template <typename T>
int launch_dtype(const KQuantGemvParams& p, hipStream_t stream) {
  switch (p.m) {
    case 1: return launch_m<T, 1>(p, stream);
    case 2: return launch_m<T, 2>(p, stream);
    case 3: return launch_m<T, 3>(p, stream);
    case 4: return launch_m<T, 4>(p, stream);
    case 5: return launch_m<T, 5>(p, stream);
    case 6: return launch_m<T, 6>(p, stream);
    case 7: return launch_m<T, 7>(p, stream);
    case 8: return launch_m<T, 8>(p, stream);
    default: return hipErrorInvalidValue;  // the wrapper refuses first
  }
}

}  // namespace

namespace inference_kernels {

int kquant_gemv_launch(const KQuantGemvParams& p, void* stream) {
  if (p.n <= 0) return hipSuccess;
  if (p.k <= 0 || p.k % kQK != 0) return hipErrorInvalidValue;
  const auto s = static_cast<hipStream_t>(stream);
  switch (p.dtype) {
    case DType::kFloat32: return launch_dtype<float>(p, s);
    case DType::kFloat16: return launch_dtype<Half>(p, s);
    case DType::kBFloat16: return launch_dtype<BFloat16>(p, s);
    case DType::kFloat8E4M3: break;  // not an input dtype
  }
  return hipErrorInvalidValue;
}

}  // namespace inference_kernels
