// GGUF Q4_K / Q6_K mat-vec: out[m, n] = sum_k x[m, k] * W[n, k] for M = 1..8 rows of
// x, W held as ggml blocks (common/ggml_blocks.h, the one description of the layout,
// shared with the CPU and CUDA code). Semantics of cpu_kernels/q4k.cpp's gemv: each
// weight dequantised in fp32 as gguf-py does ((d * sc) * q - dmin * m for Q4_K,
// (d * scale) * (q - 32) for Q6_K), products summed in fp32, out in x's dtype.
//
// Decode is memory-bound: every weight byte is read once and used for all M rows of
// x, and x stays fp32 in registers (as llama.cpp's Metal mat-vec; no q8 activation
// quantisation). Each SIMD-group owns kRowsPerSimd rows of W and walks their blocks;
// within a block each of the 32 lanes dequantises 8 of the 256 weights (neighbouring
// lanes read neighbouring bytes), and the lanes' fp32 partials meet in one simd_sum
// per output at the end. Dispatch ceil(N / (kRowsPerSimd * simdgroups)) threadgroups
// of 32 * simdgroups threads; no threadgroup memory, no barriers.
#include <metal_stdlib>

#include "ggml_blocks.h"
using namespace metal;
using namespace inference_kernels::ggml;

constant constexpr uint kRowsPerSimd = 2;  // rows of W (outputs n) per SIMD-group
constant constexpr uint kMaxM = 8;         // rows of x

inline float fp16_bits(uint16_t bits) { return float(as_type<half>(bits)); }

// Q4_K: lane l takes qs bytes 4(l % 8) .. +3 of 64-weight chunk c = l / 8: their low
// nibbles are weights 64c + 4(l % 8) + i (sub-block 2c), their high nibbles the same
// plus 32 (sub-block 2c + 1). q4k_pos says where each weight's nibble is.
struct Q4K {
  typedef BlockQ4K Block;
  static uint weight(uint lane, uint i) {
    return 64 * (lane / 8) + 4 * (lane % 8) + (i % 4) + 32 * (i / 4);
  }
  static void dequantize(device const Block* blk, uint lane, thread float* w) {
    const float d = fp16_bits(blk->d), dmin = fp16_bits(blk->dmin);
    for (uint i = 0; i < 8; ++i) {
      const int e = int(weight(lane, i));
      const ScaleMin sm = scale_min(blk->scales, e / 32);
      const Q4KPos p = q4k_pos(e);
      const int q = (blk->qs[p.qs] >> p.shift) & 0x0F;
      w[i] = (d * float(sm.sc)) * float(q) - dmin * float(sm.m);
    }
  }
};

// Q6_K: lane l takes positions l0 = 2(l % 16), l0 + 1 of the four 32-weight quarters
// of half h = l / 16: weights 128h + 32s + l0 + t, s = 0..3, t = 0..1 (each pair of
// quarters shares ql bytes, all four share the qh byte; q6k_pos says where).
struct Q6K {
  typedef BlockQ6K Block;
  static uint weight(uint lane, uint i) {
    return 128 * (lane / 16) + 32 * (i / 2) + 2 * (lane % 16) + (i % 2);
  }
  static void dequantize(device const Block* blk, uint lane, thread float* w) {
    const float d = fp16_bits(blk->d);
    for (uint i = 0; i < 8; ++i) {
      const int e = int(weight(lane, i));
      const Q6KPos p = q6k_pos(e);
      const int q = ((blk->ql[p.ql] >> p.ql_shift) & 0x0F) | (((blk->qh[p.qh] >> p.qh_shift) & 3) << 4);
      w[i] = (d * float(blk->scales[e / 16])) * float(q - 32);
    }
  }
};

// Buffers: x [M, K] (contiguous), q [N, K / 256 blocks] (contiguous), out [M, N]
// (contiguous), M (1..8), N, K (a multiple of 256).
template <typename F, typename T>
kernel void kquant_gemv(device const T* x [[buffer(0)]],
                        device const typename F::Block* q [[buffer(1)]],
                        device T* out [[buffer(2)]],
                        constant uint& M [[buffer(3)]],
                        constant uint& N [[buffer(4)]],
                        constant uint& K [[buffer(5)]],
                        uint tg [[threadgroup_position_in_grid]],
                        uint lane [[thread_index_in_simdgroup]],
                        uint simd [[simdgroup_index_in_threadgroup]],
                        uint nsimd [[simdgroups_per_threadgroup]]) {
  const uint nb = K / uint(kQK);
  const uint n0 = (tg * nsimd + simd) * kRowsPerSimd;
  if (n0 >= N) {
    return;  // the whole SIMD-group: no collective is left waiting
  }
  float acc[kRowsPerSimd][kMaxM];
  for (uint r = 0; r < kRowsPerSimd; ++r) {
    for (uint m = 0; m < kMaxM; ++m) {
      acc[r][m] = 0.0f;
    }
  }
  uint xi[8];  // this lane's 8 positions in a block
  for (uint i = 0; i < 8; ++i) {
    xi[i] = F::weight(lane, i);
  }
  for (uint b = 0; b < nb; ++b) {
    float w[kRowsPerSimd][8];
    for (uint r = 0; r < kRowsPerSimd; ++r) {
      if (n0 + r < N) {
        F::dequantize(q + ulong(n0 + r) * nb + b, lane, w[r]);
      } else {
        for (uint i = 0; i < 8; ++i) {
          w[r][i] = 0.0f;
        }
      }
    }
    // Fixed trip counts (m < kMaxM) keep acc in registers; rows past M are skipped.
    for (uint m = 0; m < kMaxM; ++m) {
      if (m < M) {
        device const T* xb = x + ulong(m) * K + ulong(b) * uint(kQK);
        float xv[8];
        for (uint i = 0; i < 8; ++i) {
          xv[i] = float(xb[xi[i]]);
        }
        for (uint r = 0; r < kRowsPerSimd; ++r) {
          for (uint i = 0; i < 8; ++i) {
            acc[r][m] = fma(w[r][i], xv[i], acc[r][m]);
          }
        }
      }
    }
  }
  for (uint r = 0; r < kRowsPerSimd; ++r) {
    for (uint m = 0; m < kMaxM; ++m) {
      if (m < M) {  // uniform over the SIMD-group
        const float s = simd_sum(acc[r][m]);
        if (lane == 0 && n0 + r < N) {
          out[ulong(m) * N + n0 + r] = T(s);
        }
      }
    }
  }
}

template [[host_name("q4k_gemv_f32")]] kernel decltype(kquant_gemv<Q4K, float>) kquant_gemv<Q4K, float>;
template [[host_name("q4k_gemv_f16")]] kernel decltype(kquant_gemv<Q4K, half>) kquant_gemv<Q4K, half>;
template [[host_name("q4k_gemv_bf16")]] kernel decltype(kquant_gemv<Q4K, bfloat>) kquant_gemv<Q4K, bfloat>;
template [[host_name("q6k_gemv_f32")]] kernel decltype(kquant_gemv<Q6K, float>) kquant_gemv<Q6K, float>;
template [[host_name("q6k_gemv_f16")]] kernel decltype(kquant_gemv<Q6K, half>) kquant_gemv<Q6K, half>;
template [[host_name("q6k_gemv_bf16")]] kernel decltype(kquant_gemv<Q6K, bfloat>) kquant_gemv<Q6K, bfloat>;
