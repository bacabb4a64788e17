// The k-quant gemv's inner loop for one x86 instruction set: q4k.cpp includes this file
// twice, with IK_SIMD_BITS 256 (namespace avx2, AVX2 + FMA) and 512 (namespace avx512,
// AVX-512 F/BW/VL), and picks one at run time (cpu_isa() there). Every function carries
// the target attribute instead of a global -march: kernel-builder builds one CPU variant
// for every x86-64 machine, so only the functions chosen at run time may use these
// instructions. No include guard on purpose; x86-64 only (the includer checks).
//
// Numerics. Each weight is dequantised exactly as dequantize_block_q4k / _q6k compute it
// (fp32, (d * sc) * q - dmin * m, product and difference rounded separately: explicit
// mul and sub intrinsics, which -ffp-contract cannot touch), so the gemv dots x with the
// very values dequantize_q4_k returns. The dot product then uses FMA: each product w * x
// is added to its fp32 accumulator with one rounding (not two, as in the baseline path),
// spread over several accumulator vectors (per lane and per row of x, kAcc of them), which
// are summed at the end of the row. So the summation order differs from the baseline path
// and from torch; each path is tested against the fp64 product, not bit for bit.

#if IK_SIMD_BITS == 512
#define IK_SIMD_NS avx512
#define IK_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))
#elif IK_SIMD_BITS == 256
#define IK_SIMD_NS avx2
#define IK_TARGET __attribute__((target("avx2,fma")))
#else
#error "define IK_SIMD_BITS as 256 or 512 before including q4k_simd.h"
#endif

namespace IK_SIMD_NS {

using namespace inference_kernels::ggml;

#if IK_SIMD_BITS == 512
using V = __m512;
using I = __m512i;
constexpr int kL = 16;  // floats per vector
IK_TARGET inline V load(const float* p) { return _mm512_loadu_ps(p); }
IK_TARGET inline V splat(float v) { return _mm512_set1_ps(v); }
IK_TARGET inline V zero() { return _mm512_setzero_ps(); }
IK_TARGET inline V add(V a, V b) { return _mm512_add_ps(a, b); }
IK_TARGET inline V sub(V a, V b) { return _mm512_sub_ps(a, b); }
IK_TARGET inline V mul(V a, V b) { return _mm512_mul_ps(a, b); }
IK_TARGET inline V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
IK_TARGET inline V to_float(I v) { return _mm512_cvtepi32_ps(v); }
// kL bytes, zero-extended to 32-bit lanes.
IK_TARGET inline I bytes(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
template <int S>
IK_TARGET inline I shr(I v) { return _mm512_srli_epi32(v, S); }
template <int S>
IK_TARGET inline I shl(I v) { return _mm512_slli_epi32(v, S); }
IK_TARGET inline I and_(I v, int mask) { return _mm512_and_si512(v, _mm512_set1_epi32(mask)); }
IK_TARGET inline I or_(I a, I b) { return _mm512_or_si512(a, b); }
IK_TARGET inline I sub_i(I v, int c) { return _mm512_sub_epi32(v, _mm512_set1_epi32(c)); }
IK_TARGET inline float hsum(V v) { return _mm512_reduce_add_ps(v); }
#else
using V = __m256;
using I = __m256i;
constexpr int kL = 8;
IK_TARGET inline V load(const float* p) { return _mm256_loadu_ps(p); }
IK_TARGET inline V splat(float v) { return _mm256_set1_ps(v); }
IK_TARGET inline V zero() { return _mm256_setzero_ps(); }
IK_TARGET inline V add(V a, V b) { return _mm256_add_ps(a, b); }
IK_TARGET inline V sub(V a, V b) { return _mm256_sub_ps(a, b); }
IK_TARGET inline V mul(V a, V b) { return _mm256_mul_ps(a, b); }
IK_TARGET inline V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
IK_TARGET inline V to_float(I v) { return _mm256_cvtepi32_ps(v); }
IK_TARGET inline I bytes(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
template <int S>
IK_TARGET inline I shr(I v) { return _mm256_srli_epi32(v, S); }
template <int S>
IK_TARGET inline I shl(I v) { return _mm256_slli_epi32(v, S); }
IK_TARGET inline I and_(I v, int mask) { return _mm256_and_si256(v, _mm256_set1_epi32(mask)); }
IK_TARGET inline I or_(I a, I b) { return _mm256_or_si256(a, b); }
IK_TARGET inline I sub_i(I v, int c) { return _mm256_sub_epi32(v, _mm256_set1_epi32(c)); }
IK_TARGET inline float hsum(V v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

constexpr int kW = 32 / kL;  // vectors per 32 weights

// Independent accumulators per row of x: enough chains to hide the FMA latency at small
// M, few enough to stay in registers at M = 8 (32 vector registers with AVX-512, 16 with
// AVX2; the dequantised weights and an x load need some too).
template <int M>
constexpr int acc_count() {
  if (IK_SIMD_BITS == 512) return M <= 2 ? 4 : 2;
  return M == 1 ? 4 : (M <= 4 ? 2 : 1);
}

// acc[i][*] += w[0..32) * x_i[0..32): the 32 dequantised weights of one sub-block
// (kW vectors) against the same 32 columns of each row of x.
template <int M>
IK_TARGET inline void dot32(V (&acc)[M][acc_count<M>()], const V* w, const float* x, int64_t k,
                            int slot) {
  constexpr int kA = acc_count<M>();
  for (int i = 0; i < M; ++i)
    for (int u = 0; u < kW; ++u) {
      V& a = acc[i][(slot * kW + u) % kA];
      a = fmadd(w[u], load(x + i * k + u * kL), a);
    }
}

template <int M>
IK_TARGET inline void finish(V (&acc)[M][acc_count<M>()], float* sums) {
  for (int i = 0; i < M; ++i) {
    V s = acc[i][0];
    for (int a = 1; a < acc_count<M>(); ++a) s = add(s, acc[i][a]);
    sums[i] = hsum(s);
  }
}

// Q4_K: sub-block j holds weights 32j..32j+31, the low (j even) or high (j odd) nibbles
// of qs[32 (j / 2) ...]; w = (d * sc_j) * q - dmin * m_j.
template <int M>
IK_TARGET void q4k_dots_m(const BlockQ4K* row, int64_t blocks, const float* x, int64_t k,
                          float* sums) {
  V acc[M][acc_count<M>()];
  for (auto& r : acc)
    for (auto& a : r) a = zero();
  for (int64_t b = 0; b < blocks; ++b) {
    const BlockQ4K& blk = row[b];
    const float d = c10::Half(blk.d, c10::Half::from_bits());
    const float dmin = c10::Half(blk.dmin, c10::Half::from_bits());
    const float* xb = x + b * kQK;
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      unpack_scale_min(blk.scales, j, &sc, &m);
      const V ds = splat(d * sc), dm = splat(dmin * m);
      const uint8_t* q = blk.qs + 32 * (j / 2);
      V w[kW];
      for (int u = 0; u < kW; ++u) {
        const I raw = bytes(q + u * kL);
        const I lev = and_((j & 1) ? shr<4>(raw) : raw, 0x0F);
        w[u] = sub(mul(ds, to_float(lev)), dm);
      }
      dot32<M>(acc, w, xb + 32 * j, k, j);
    }
  }
  finish<M>(acc, sums);
}

// Q6_K: quarter s of half h is weights 128h + 32s + l (l < 32): the low nibble (s < 2)
// or high nibble of ql[64h + 32 (s & 1) + l], with bits 2s..2s+1 of qh[32h + l] on top;
// w = (d * scales[8h + 2s + l / 16]) * (q - 32).
template <int M>
IK_TARGET void q6k_dots_m(const BlockQ6K* row, int64_t blocks, const float* x, int64_t k,
                          float* sums) {
  V acc[M][acc_count<M>()];
  for (auto& r : acc)
    for (auto& a : r) a = zero();
  for (int64_t b = 0; b < blocks; ++b) {
    const BlockQ6K& blk = row[b];
    const float d = c10::Half(blk.d, c10::Half::from_bits());
    const float* xb = x + b * kQK;
#pragma GCC unroll 8
    for (int t = 0; t < 8; ++t) {
      const int h = t / 4, s = t % 4;
      const uint8_t* ql = blk.ql + 64 * h + 32 * (s & 1);
      const uint8_t* qh = blk.qh + 32 * h;
      V w[kW];
      for (int u = 0; u < kW; ++u) {
        const I lo_raw = bytes(ql + u * kL), hi_raw = bytes(qh + u * kL);
        I lo, hi;
        // Fixed shifts per quarter (the loop is unrolled, so these branches fold).
        if (s >> 1) lo = and_(shr<4>(lo_raw), 0x0F); else lo = and_(lo_raw, 0x0F);
        switch (s) {
          case 0: hi = and_(hi_raw, 3); break;
          case 1: hi = and_(shr<2>(hi_raw), 3); break;
          case 2: hi = and_(shr<4>(hi_raw), 3); break;
          default: hi = shr<6>(hi_raw); break;
        }
        const I lev = sub_i(or_(lo, shl<4>(hi)), 32);
        const float sc = d * blk.scales[8 * h + 2 * s + (u * kL) / 16];
        w[u] = mul(splat(sc), to_float(lev));
      }
      dot32<M>(acc, w, xb + 32 * t, k, t);
    }
  }
  finish<M>(acc, sums);
}

// sums[i] = x_i . dequantised row, for the m (1..8) rows of x (fp32, row stride k).
IK_TARGET void q4k_dots(const BlockQ4K* row, int64_t blocks, const float* x, int64_t k, int m,
                        float* sums) {
  switch (m) {
    case 1: return q4k_dots_m<1>(row, blocks, x, k, sums);
    case 2: return q4k_dots_m<2>(row, blocks, x, k, sums);
    case 3: return q4k_dots_m<3>(row, blocks, x, k, sums);
    case 4: return q4k_dots_m<4>(row, blocks, x, k, sums);
    case 5: return q4k_dots_m<5>(row, blocks, x, k, sums);
    case 6: return q4k_dots_m<6>(row, blocks, x, k, sums);
    case 7: return q4k_dots_m<7>(row, blocks, x, k, sums);
    default: return q4k_dots_m<8>(row, blocks, x, k, sums);
  }
}

IK_TARGET void q6k_dots(const BlockQ6K* row, int64_t blocks, const float* x, int64_t k, int m,
                        float* sums) {
  switch (m) {
    case 1: return q6k_dots_m<1>(row, blocks, x, k, sums);
    case 2: return q6k_dots_m<2>(row, blocks, x, k, sums);
    case 3: return q6k_dots_m<3>(row, blocks, x, k, sums);
    case 4: return q6k_dots_m<4>(row, blocks, x, k, sums);
    case 5: return q6k_dots_m<5>(row, blocks, x, k, sums);
    case 6: return q6k_dots_m<6>(row, blocks, x, k, sums);
    case 7: return q6k_dots_m<7>(row, blocks, x, k, sums);
    default: return q6k_dots_m<8>(row, blocks, x, k, sums);
  }
}

}  // namespace IK_SIMD_NS

#undef IK_SIMD_NS
#undef IK_TARGET
