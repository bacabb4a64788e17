// GGUF Q4_K / Q6_K mat-vec on NVIDIA GPUs: out [m, n] = x [m, k] @ dequantize(q).T for
// m = 1..8 (decode). Torch-free; q4k_torch.cpp checks the tensors. The weight is
// dequantised in registers as it streams past and never written anywhere.
//
// Arithmetic: fp32 FMAs on the unpacked levels, not ggml's int8 route (x quantised to
// q8_1 by a second kernel, then dp4a). The op is memory-bound at m = 1 (4.5 or 6.56
// bits per weight against ~1 FMA), so the int8 route would buy issue slots we do not
// need there, and it costs an extra launch (~2 us inside a graph, a quarter of the
// 7.8 us floor of a 14336x4096 Q4_K weight) and ~0.5% error per output from rounding x
// to 8 bits; here x is used as given and everything accumulates in fp32. The price is
// paid at larger m: each weight costs m FMAs plus ~2.5 shared instructions, so from
// m ~ 3 on the SM's issue rate, not HBM, is the limit (see the benchmark).
//
// Unpacking without integer-to-float conversions: a 4-bit level q becomes the float
// 16 + q by placing its bits in the mantissa of 16.0 (one PRMT per weight, after two
// shift+mask ops per 8 weights); Q6_K's 6-bit q becomes 2^23 + q (PRMT) and q - 32
// after one exact FADD. For Q4_K the offset 16 is removed per sub-block instead:
// sum(x (16 + q)) - 16 sum(x) = sum(x q), with sum(x) needed anyway for the min term
// (weight = d*sc*q - dmin*m). That subtraction loses ~2 bits of the 24 of the partial
// sum, far below fp32's test budget (1e-5 relative).
//
// Work split: each warp owns R consecutive weight rows and walks their full K; its 32
// lanes split the K axis, 4 lanes per 256-weight block (8 blocks per step). A Q4_K lane
// reads 32 bytes of qs (64 weights, two sub-blocks) with two 16-byte loads plus the
// block's 16-byte header (d, dmin, 12 scale bytes; the 4 lanes of a block share that
// transaction). Q6_K blocks are 210 bytes, so only 2-byte aligned: a Q6_K lane reads
// its three 16-byte ranges (ql, ql, qh: 64 weights) as aligned 4-byte words, shifted
// into place when the block is not 4-aligned. Weight loads bypass L1
// (L1::no_allocate: each byte is used once), so L1 keeps x, which every row on the
// SM re-reads: each lane loads the x values of its 64 K positions once per step and
// uses them for all R rows. Lanes' partial sums meet in a butterfly of shuffles.
// No shared memory, no block-wide barrier, no atomics: any N (rows past N are
// clamped on load and not stored), deterministic, and CUDA-graph capturable.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ggml_blocks.h"
#include "gpu_launchers.h"
#include "vec_io.cuh"

namespace {

using inference_kernels::DType;
using inference_kernels::KQuant;
using inference_kernels::KQuantGemvParams;
using inference_kernels::cuda::from_float;
using inference_kernels::ggml::BlockQ4K;
using inference_kernels::ggml::BlockQ6K;
using inference_kernels::ggml::kQK;

constexpr int kWarps = 4;                              // warps per CTA
constexpr int kLanesPerBlock = 4;                      // lanes sharing one 256-weight block
constexpr int kBlocksPerStep = 32 / kLanesPerBlock;    // blocks a warp covers per step
// Below this many warps in the grid (~16 per SM of an H200) the launcher halves R.
constexpr int64_t kMinWarps = 2048;

// ---- loads ---------------------------------------------------------------------------

__device__ __forceinline__ uint4 ld_stream16(const uint8_t* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

__device__ __forceinline__ uint32_t ld_u32(const uint8_t* p) {
  return __ldg(reinterpret_cast<const unsigned int*>(p));
}

// NW * 4 bytes starting 2 bytes into the aligned word at `base` when shift == 16 (or at
// base itself when shift == 0), as NW words: the aligned words covering them,
// funnel-shifted into place. The extra word after the range is read only when shifted,
// so the read never passes the range's last byte. An unaligned range's first word
// starts 2 bytes before it: inside the previous block, or, for a tensor starting 2
// bytes into a word (a view: fresh allocations are aligned), inside its storage.
template <int NW>
__device__ __forceinline__ void ld_unaligned(const uint8_t* base, uint32_t shift, uint32_t (&w)[NW]) {
  uint32_t v[NW + 1];
#pragma unroll
  for (int i = 0; i < NW; ++i) v[i] = ld_u32(base + 4 * i);
  v[NW] = shift ? ld_u32(base + 4 * NW) : 0u;
#pragma unroll
  for (int i = 0; i < NW; ++i) w[i] = __funnelshift_r(v[i], v[i + 1], shift);
}

// Four consecutive elements of x (4-element aligned) as floats, through L1.
__device__ __forceinline__ void load_x4(const float* p, float (&v)[4]) {
  const float4 t = __ldg(reinterpret_cast<const float4*>(p));
  v[0] = t.x;
  v[1] = t.y;
  v[2] = t.z;
  v[3] = t.w;
}

__device__ __forceinline__ void load_x4(const __nv_bfloat16* p, float (&v)[4]) {
  const uint2 t = __ldg(reinterpret_cast<const uint2*>(p));
  v[0] = __uint_as_float(t.x << 16);
  v[1] = __uint_as_float(t.x & 0xFFFF0000u);
  v[2] = __uint_as_float(t.y << 16);
  v[3] = __uint_as_float(t.y & 0xFFFF0000u);
}

__device__ __forceinline__ void load_x4(const __half* p, float (&v)[4]) {
  const uint2 t = __ldg(reinterpret_cast<const uint2*>(p));
  const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&t.x));
  const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&t.y));
  v[0] = a.x;
  v[1] = a.y;
  v[2] = b.x;
  v[3] = b.y;
}

// (a & mask) | bits in one LOP3 (the compiler emits two for two immediates).
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t mask, uint32_t bits) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(mask), "r"(bits));
  return d;
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

__device__ __forceinline__ float half_bits_to_float(uint32_t bits) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
}

// ---- the end of a warp's rows: sum the lanes, lane 0 stores -----------------------------

template <typename T, int M, int R>
__device__ __forceinline__ void store_rows(const KQuantGemvParams& p, int64_t row0, int lane,
                                           float (&acc)[R][M]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float v = acc[r][m];
#pragma unroll
      for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
      acc[r][m] = v;
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
__global__ void __launch_bounds__(kWarps * 32) q4k_gemv_kernel(const KQuantGemvParams p) {
  constexpr int kBytes = sizeof(BlockQ4K);
  const int lane = threadIdx.x & 31;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * R;
  if (row0 >= p.n) return;  // the whole warp: nothing below waits for other warps
  const int64_t nb = p.k / kQK;
  const int c = lane % kLanesPerBlock;
  const uint8_t* rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    rows[r] = static_cast<const uint8_t*>(p.q) + (row0 + r < p.n ? row0 + r : p.n - 1) * nb * kBytes;
  const T* x = static_cast<const T*>(p.x);

  float acc[R][M] = {};
  for (int64_t b = lane / kLanesPerBlock; b < nb; b += kBlocksPerStep) {
    uint4 head[R], lo[R], hi[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint8_t* blk = rows[r] + b * kBytes;
      head[r] = ld_stream16(blk);  // d, dmin, scales[12]
      lo[r] = ld_stream16(blk + 16 + 32 * c);
      hi[r] = ld_stream16(blk + 32 + 32 * c);
    }
    const int64_t k0 = b * kQK + 64 * c;
    float sl[R][M] = {}, sh[R][M] = {};  // sum x (16 + q) over each sub-block
    float xl[M] = {}, xh[M] = {};        // sum x
#pragma unroll
    for (int w = 0; w < 8; ++w) {  // qs bytes 4w..4w+3 of the chunk
      float fl[R][4], fh[R][4];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint32_t v = word(w < 4 ? lo[r] : hi[r], w % 4);
        // Each byte becomes 0x80 | q << 3: bits 16..23 of the float 16 + q.
        const uint32_t a = and_or(v << 3, 0x78787878u, 0x80808080u);
        const uint32_t e = and_or(v >> 1, 0x78787878u, 0x80808080u);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          fl[r][i] = __uint_as_float(__byte_perm(a, 0x41000000u, 0x7054u | (i << 8)));
          fh[r][i] = __uint_as_float(__byte_perm(e, 0x41000000u, 0x7054u | (i << 8)));
        }
      }
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float xa[4], xb[4];
        load_x4(x + m * p.x_stride + k0 + 4 * w, xa);
        load_x4(x + m * p.x_stride + k0 + 32 + 4 * w, xb);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          xl[m] += xa[i];
          xh[m] += xb[i];
#pragma unroll
          for (int r = 0; r < R; ++r) {
            sl[r][m] = fmaf(fl[r][i], xa[i], sl[r][m]);
            sh[r][m] = fmaf(fh[r][i], xb[i], sh[r][m]);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      // Scales and mins of sub-blocks 2c and 2c+1 (ggml's get_scale_min_k4, four at a
      // time: bytes j of these words are sub-block j's, or j + 4's for c >= 2).
      const uint32_t s0 = head[r].y, s1 = head[r].z, s2 = head[r].w;
      const uint32_t scw = c < 2 ? s0 & 0x3F3F3F3Fu
                                 : (s2 & 0x0F0F0F0Fu) | ((s0 >> 2) & 0x30303030u);
      const uint32_t mnw = c < 2 ? s1 & 0x3F3F3F3Fu
                                 : ((s2 >> 4) & 0x0F0F0F0Fu) | ((s1 >> 2) & 0x30303030u);
      const int at = 16 * (c & 1);
      const float d = half_bits_to_float(head[r].x), dmin = half_bits_to_float(head[r].x >> 16);
      const float ds0 = d * static_cast<float>((scw >> at) & 0xFF);
      const float ds1 = d * static_cast<float>((scw >> (at + 8)) & 0xFF);
      const float dm0 = dmin * static_cast<float>((mnw >> at) & 0xFF);
      const float dm1 = dmin * static_cast<float>((mnw >> (at + 8)) & 0xFF);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        // sum x q = sum x (16 + q) - 16 sum x; weight = ds q - dm.
        float a = acc[r][m];
        a = fmaf(ds0, fmaf(-16.0f, xl[m], sl[r][m]), a);
        a = fmaf(-dm0, xl[m], a);
        a = fmaf(ds1, fmaf(-16.0f, xh[m], sh[r][m]), a);
        a = fmaf(-dm1, xh[m], a);
        acc[r][m] = a;
      }
    }
  }
  store_rows<T, M, R>(p, row0, lane, acc);
}

// ---- Q6_K ------------------------------------------------------------------------------

// Lane (block b, h = (lane / 2) % 2, g = lane % 2): weights 128h + 32s + 16g + i for
// s = 0..3, i = 0..15, whose low 4 bits are in ql[64h + 32(s % 2) + 16g + i] (nibble
// s / 2), top 2 bits in qh[32h + 16g + i] (bits 2s), scale scales[8h + 2s + g].
template <typename T, int M, int R>
__global__ void __launch_bounds__(kWarps * 32) q6k_gemv_kernel(const KQuantGemvParams p) {
  constexpr int kBytes = sizeof(BlockQ6K);
  const int lane = threadIdx.x & 31;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * R;
  if (row0 >= p.n) return;
  const int64_t nb = p.k / kQK;
  const int h = (lane >> 1) & 1, g = lane & 1;
  // A warp step moves 8 blocks (1680 bytes, a multiple of 4) on, so whether a lane's
  // blocks in a row are 4-aligned never changes: the lane's aligned-down block address
  // and shift are set once per row. Every range the lane reads (at block offsets
  // 64h + 16g, +32, 128 + 32h + 16g, 192 + 8h: all multiples of 4) shares them.
  const uint8_t* blk[R];
  uint32_t shift[R];
  int64_t b = lane / kLanesPerBlock;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(static_cast<const uint8_t*>(p.q) +
        (row0 + r < p.n ? row0 + r : p.n - 1) * nb * kBytes + b * kBytes);
    blk[r] = reinterpret_cast<const uint8_t*>(a & ~uintptr_t(3));
    shift[r] = static_cast<uint32_t>(a & 2) * 8;
  }
  const int ofs_ql = 64 * h + 16 * g, ofs_qh = 128 + 32 * h + 16 * g, ofs_sc = 192 + 8 * h;
  const T* x = static_cast<const T*>(p.x);
  // Scale bytes g, g + 2, g + 4, g + 6 of the 8 at scales[8h].
  const uint32_t scale_sel = 0x6420u + 0x1111u * g;

  float acc[R][M] = {};
  for (; b < nb; b += kBlocksPerStep) {
    uint32_t qa[R][4], qb[R][4], qh[R][4];
    float ds[R][4];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      ld_unaligned(blk[r] + ofs_ql, shift[r], qa[r]);
      ld_unaligned(blk[r] + ofs_ql + 32, shift[r], qb[r]);
      ld_unaligned(blk[r] + ofs_qh, shift[r], qh[r]);
      uint32_t sc[2];
      ld_unaligned(blk[r] + ofs_sc, shift[r], sc);
      const uint32_t s4 = __byte_perm(sc[0], sc[1], scale_sel);
      // d sits 208 bytes into the block, 2-aligned: 208 from the aligned-down address
      // plus the shift's 2 bytes.
      const float d = half_bits_to_float(
          __ldg(reinterpret_cast<const unsigned short*>(blk[r] + 208 + shift[r] / 8)));
      blk[r] += kBlocksPerStep * kBytes;
#pragma unroll
      for (int s = 0; s < 4; ++s)
        ds[r][s] = d * static_cast<float>(static_cast<int8_t>((s4 >> (8 * s)) & 0xFF));
    }
    const int64_t k0 = b * kQK + 128 * h + 16 * g;
    float part[R][M][4] = {};  // per s: sum (q - 32) x
#pragma unroll
    for (int w = 0; w < 4; ++w) {  // bytes 4w..4w+3 of each range: i = 4w..4w+3
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        float f[R][4];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const uint32_t l = s % 2 ? qb[r][w] : qa[r][w];
          const uint32_t lo4 = (s < 2 ? l : l >> 4) & 0x0F0F0F0Fu;
          const uint32_t hi2 = s == 0 ? qh[r][w] << 4 : s == 1 ? qh[r][w] << 2
                             : s == 2 ? qh[r][w] : qh[r][w] >> 2;
          const uint32_t q6 = lo4 | (hi2 & 0x30303030u);
          // 2^23 + q, exactly; minus 2^23 + 32 is q - 32, exactly.
#pragma unroll
          for (int i = 0; i < 4; ++i)
            f[r][i] = __uint_as_float(__byte_perm(q6, 0x4B000000u, 0x7440u | i)) - 8388640.0f;
        }
#pragma unroll
        for (int m = 0; m < M; ++m) {
          float xv[4];
          load_x4(x + m * p.x_stride + k0 + 32 * s + 4 * w, xv);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
#pragma unroll
            for (int r = 0; r < R; ++r) part[r][m][s] = fmaf(f[r][i], xv[i], part[r][m][s]);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int m = 0; m < M; ++m) {
#pragma unroll
        for (int s = 0; s < 4; ++s) acc[r][m] = fmaf(ds[r][s], part[r][m][s], acc[r][m]);
      }
    }
  }
  store_rows<T, M, R>(p, row0, lane, acc);
}

// ---- launch ----------------------------------------------------------------------------

template <typename T, int M, int R>
void launch_rows(const KQuantGemvParams& p, cudaStream_t stream) {
  constexpr int64_t kRowsPerCta = kWarps * R;
  const dim3 grid(static_cast<unsigned>((p.n + kRowsPerCta - 1) / kRowsPerCta));
  if (p.format == KQuant::kQ4K) {
    q4k_gemv_kernel<T, M, R><<<grid, kWarps * 32, 0, stream>>>(p);
  } else {
    q6k_gemv_kernel<T, M, R><<<grid, kWarps * 32, 0, stream>>>(p);
  }
}

// Rows per warp: more rows reuse each x value a lane loads and converts, fewer cost
// fewer registers (m x R accumulators, R rows of loads in flight) and give small N
// more warps to hide memory latency with. Q6_K lanes hold 48 bytes of a row (Q4_K:
// 48 too, but Q6_K's per-s partial sums are 4 per row and m), so it takes half the rows.
template <typename T, int M>
void launch_m(const KQuantGemvParams& p, cudaStream_t stream) {
  constexpr int kR = M <= 2 ? 4 : (M <= 4 ? 2 : 1);
  const int r = p.format == KQuant::kQ4K ? kR : kR / 2;
  if (r >= 4 && p.n / 4 >= kMinWarps) {
    launch_rows<T, M, (kR >= 4 ? 4 : 1)>(p, stream);
  } else if (r >= 2 && p.n / 2 >= kMinWarps / 2) {
    launch_rows<T, M, (kR >= 2 ? 2 : 1)>(p, stream);
  } else {
    launch_rows<T, M, 1>(p, stream);
  }
}

template <typename T>
int launch_dtype(const KQuantGemvParams& p, cudaStream_t stream) {
  switch (p.m) {
    case 1: launch_m<T, 1>(p, stream); break;
    case 2: launch_m<T, 2>(p, stream); break;
    case 3: launch_m<T, 3>(p, stream); break;
    case 4: launch_m<T, 4>(p, stream); break;
    case 5: launch_m<T, 5>(p, stream); break;
    case 6: launch_m<T, 6>(p, stream); break;
    case 7: launch_m<T, 7>(p, stream); break;
    case 8: launch_m<T, 8>(p, stream); break;
    default: return cudaErrorInvalidValue;  // the wrapper refuses first
  }
  return cudaGetLastError();
}

}  // namespace

namespace inference_kernels {

int kquant_gemv_launch(const KQuantGemvParams& p, void* stream) {
  if (p.n <= 0) return cudaSuccess;
  if (p.k <= 0 || p.k % kQK != 0 || (p.n + 3) / 4 > INT32_MAX) return cudaErrorInvalidValue;
  const auto s = static_cast<cudaStream_t>(stream);
  switch (p.dtype) {
    case DType::kFloat32: return launch_dtype<float>(p, s);
    case DType::kFloat16: return launch_dtype<__half>(p, s);
    case DType::kBFloat16: return launch_dtype<__nv_bfloat16>(p, s);
    case DType::kFloat8E4M3: break;  // not an input dtype
  }
  return cudaErrorInvalidValue;
}

}  // namespace inference_kernels
