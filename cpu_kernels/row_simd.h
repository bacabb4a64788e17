// The CPU row loops (RMSNorm, LayerNorm, SwiGLU) for one x86 instruction set:
// rms_norm.cpp, layer_norm.cpp and activation.cpp each include this file twice
// (simd_builds.h),
// with IK_SIMD_BITS 256 (namespace avx2: AVX2, FMA, F16C) and 512 (namespace avx512:
// AVX-512 F/BW/VL), and picks one at run time (cpu_isa.h). Every function carries the
// target attribute instead of a global -march, as q4k_simd.h does: one CPU variant serves
// every x86-64 machine. No include guard on purpose; x86-64 only (the includer checks).
//
// Why: built for the baseline, at::vec's portable vectors convert fp16 and bf16 an element
// at a time, which made our RMSNorm 4-5x slower than torch's own (AVX-512) kernels on 64
// to 1024 rows of 4096 (make demo). Here a vector of kL floats is loaded from and stored
// to fp32, fp16 or bf16 with the instruction set's conversions.
//
// Numerics, per element as the baseline path (vec_io.h): fp32 arithmetic; every value
// that the baseline rounds to the input dtype is rounded here too, to nearest even (fp16
// by the conversion instruction; bf16 as c10::BFloat16 does, a NaN becoming 0x7FC0). Only
// the row sums (of squares; LayerNorm's of x and of squared deviations) are added in
// another order (kL lanes, fused multiply-add), so 1 / rms, the mean and 1 / std may
// differ from the baseline's in their last bits.

#if IK_SIMD_BITS == 512
#define IK_SIMD_NS avx512
#define IK_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#elif IK_SIMD_BITS == 256
#define IK_SIMD_NS avx2
#define IK_TARGET __attribute__((target("avx2,fma,f16c")))
#else
#error "define IK_SIMD_BITS as 256 or 512 before including row_simd.h"
#endif

namespace IK_SIMD_NS {

#if IK_SIMD_BITS == 512
using V = __m512;
constexpr int64_t kL = 16;  // floats per vector
IK_TARGET inline V zero() { return _mm512_setzero_ps(); }
IK_TARGET inline V splat(float v) { return _mm512_set1_ps(v); }
IK_TARGET inline V add(V a, V b) { return _mm512_add_ps(a, b); }
IK_TARGET inline V sub(V a, V b) { return _mm512_sub_ps(a, b); }
IK_TARGET inline V mul(V a, V b) { return _mm512_mul_ps(a, b); }
IK_TARGET inline V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
IK_TARGET inline float hsum(V v) { return _mm512_reduce_add_ps(v); }
IK_TARGET inline V div(V a, V b) { return _mm512_div_ps(a, b); }
IK_TARGET inline V fnmadd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a * b
IK_TARGET inline V neg(V a) { return _mm512_sub_ps(_mm512_setzero_ps(), a); }
IK_TARGET inline V round_int(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// 2^k for integer-valued k in [-126, 127].
IK_TARGET inline V pow2(V k) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23));
}
IK_TARGET inline V floor_half(V k) { return _mm512_roundscale_ps(_mm512_mul_ps(k, _mm512_set1_ps(0.5f)), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
// a where m, else b; the masks compare x with a constant.
IK_TARGET inline V where_gt(V x, float c, V a, V b) { return _mm512_mask_mov_ps(b, _mm512_cmp_ps_mask(x, _mm512_set1_ps(c), _CMP_GT_OQ), a); }
IK_TARGET inline V where_lt(V x, float c, V a, V b) { return _mm512_mask_mov_ps(b, _mm512_cmp_ps_mask(x, _mm512_set1_ps(c), _CMP_LT_OQ), a); }
IK_TARGET inline V where_nan(V x, V a, V b) { return _mm512_mask_mov_ps(b, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), a); }

IK_TARGET inline V load(const float* p) { return _mm512_loadu_ps(p); }
IK_TARGET inline V load(const c10::Half* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
IK_TARGET inline V load(const c10::BFloat16* p) {
  const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
}
// v as fp16 / bf16 bits, rounded to nearest even (bf16: one value a 32-bit lane).
IK_TARGET inline __m256i half_bits(V v) { return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
IK_TARGET inline __m512i bf16_bits(V v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  return _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(0x7FC0));
}
IK_TARGET inline V from_bf16_bits(__m512i r) { return _mm512_castsi512_ps(_mm512_slli_epi32(r, 16)); }
IK_TARGET inline V round_half(V v) { return _mm512_cvtph_ps(half_bits(v)); }
IK_TARGET inline void store(float* p, V v) { _mm512_storeu_ps(p, v); }
IK_TARGET inline void store(c10::Half* p, V v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), half_bits(v)); }
IK_TARGET inline void store(c10::BFloat16* p, V v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(bf16_bits(v)));
}
#else
using V = __m256;
constexpr int64_t kL = 8;
IK_TARGET inline V zero() { return _mm256_setzero_ps(); }
IK_TARGET inline V splat(float v) { return _mm256_set1_ps(v); }
IK_TARGET inline V add(V a, V b) { return _mm256_add_ps(a, b); }
IK_TARGET inline V sub(V a, V b) { return _mm256_sub_ps(a, b); }
IK_TARGET inline V mul(V a, V b) { return _mm256_mul_ps(a, b); }
IK_TARGET inline V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
IK_TARGET inline float hsum(V v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}
IK_TARGET inline V div(V a, V b) { return _mm256_div_ps(a, b); }
IK_TARGET inline V fnmadd(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
IK_TARGET inline V neg(V a) { return _mm256_sub_ps(_mm256_setzero_ps(), a); }
IK_TARGET inline V round_int(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
IK_TARGET inline V pow2(V k) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23));
}
IK_TARGET inline V floor_half(V k) { return _mm256_floor_ps(_mm256_mul_ps(k, _mm256_set1_ps(0.5f))); }
IK_TARGET inline V where_gt(V x, float c, V a, V b) { return _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, _mm256_set1_ps(c), _CMP_GT_OQ)); }
IK_TARGET inline V where_lt(V x, float c, V a, V b) { return _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, _mm256_set1_ps(c), _CMP_LT_OQ)); }
IK_TARGET inline V where_nan(V x, V a, V b) { return _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, x, _CMP_UNORD_Q)); }

IK_TARGET inline V load(const float* p) { return _mm256_loadu_ps(p); }
IK_TARGET inline V load(const c10::Half* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
IK_TARGET inline V load(const c10::BFloat16* p) {
  const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}
IK_TARGET inline __m128i half_bits(V v) { return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
IK_TARGET inline __m256i bf16_bits(V v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), nan);
}
IK_TARGET inline V from_bf16_bits(__m256i r) { return _mm256_castsi256_ps(_mm256_slli_epi32(r, 16)); }
IK_TARGET inline V round_half(V v) { return _mm256_cvtph_ps(half_bits(v)); }
IK_TARGET inline void store(float* p, V v) { _mm256_storeu_ps(p, v); }
IK_TARGET inline void store(c10::Half* p, V v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), half_bits(v)); }
IK_TARGET inline void store(c10::BFloat16* p, V v) {
  // 32 -> 16 bits: packus works per 128-bit lane, so gather 64-bit pieces 0 and 2 of the
  // result (every value fits 16 bits unsigned: no saturation).
  const __m256i r = bf16_bits(v);
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
}
#endif
// The same in both: the bf16 rounding's bits back as floats.
IK_TARGET inline V round_bf16(V v) { return from_bf16_bits(bf16_bits(v)); }

// Rounds to T and back, as a T-typed intermediate would.
template <typename T>
IK_TARGET inline V round_to(V v) {
  if constexpr (std::is_same_v<T, c10::Half>) {
    return round_half(v);
  } else if constexpr (std::is_same_v<T, c10::BFloat16>) {
    return round_bf16(v);
  } else {
    return v;
  }
}

// Sum of squares of x[0:d]; with res, first res <- round(x + res) and the sum is of that.
template <typename T>
IK_TARGET float sum_squares(const T* x, T* res, int64_t d) {
  V acc0 = zero(), acc1 = zero();
  int64_t i = 0;
  for (; i + 2 * kL <= d; i += 2 * kL) {
    V a = load(x + i), b = load(x + i + kL);
    if (res) {
      a = round_to<T>(add(a, load(res + i)));
      b = round_to<T>(add(b, load(res + i + kL)));
      store(res + i, a);
      store(res + i + kL, b);
    }
    acc0 = fmadd(a, a, acc0);
    acc1 = fmadd(b, b, acc1);
  }
  float sum = hsum(add(acc0, acc1));
  for (; i < d; ++i) {
    float v = static_cast<float>(x[i]);
    if (res) {
      res[i] = static_cast<T>(v + static_cast<float>(res[i]));
      v = static_cast<float>(res[i]);
    }
    sum += v * v;
  }
  return sum;
}

// out[0:d] <- round(round(src * inv) * w), as HF's LlamaRMSNorm rounds.
template <typename T>
IK_TARGET void norm_row(const T* src, const T* w, T* out, int64_t d, float inv) {
  const V s = splat(inv);
  int64_t i = 0;
  for (; i + kL <= d; i += kL) store(out + i, round_to<T>(mul(round_to<T>(mul(load(src + i), s)), load(w + i))));
  for (; i < d; ++i) {
    const float y = static_cast<float>(static_cast<T>(static_cast<float>(src[i]) * inv));
    out[i] = static_cast<T>(y * static_cast<float>(w[i]));
  }
}

// LayerNorm's statistics (layer_norm.cpp): the sum of x[0:d], and of (x - mean)^2.
template <typename T>
IK_TARGET float row_sum(const T* x, int64_t d) {
  V acc0 = zero(), acc1 = zero();
  int64_t i = 0;
  for (; i + 2 * kL <= d; i += 2 * kL) {
    acc0 = add(acc0, load(x + i));
    acc1 = add(acc1, load(x + i + kL));
  }
  float sum = hsum(add(acc0, acc1));
  for (; i < d; ++i) sum += static_cast<float>(x[i]);
  return sum;
}

template <typename T>
IK_TARGET float row_sq_dev(const T* x, int64_t d, float mean) {
  const V m = splat(mean);
  V acc0 = zero(), acc1 = zero();
  int64_t i = 0;
  for (; i + 2 * kL <= d; i += 2 * kL) {
    const V a = sub(load(x + i), m), b = sub(load(x + i + kL), m);
    acc0 = fmadd(a, a, acc0);
    acc1 = fmadd(b, b, acc1);
  }
  float sum = hsum(add(acc0, acc1));
  for (; i < d; ++i) {
    const float v = static_cast<float>(x[i]) - mean;
    sum += v * v;
  }
  return sum;
}

// out[0:d] <- round(((x - mean) * rstd) * w + b) (w, b optional), each operation rounded
// in fp32 as the baseline's.
template <typename T>
IK_TARGET void layer_norm_row(const T* x, const T* w, const T* b, T* out, int64_t d, float mean, float rstd) {
  const V m = splat(mean), s = splat(rstd);
  int64_t i = 0;
  for (; i + kL <= d; i += kL) {
    V y = mul(sub(load(x + i), m), s);
    if (w) y = mul(y, load(w + i));
    if (b) y = add(y, load(b + i));
    store(out + i, y);
  }
  for (; i < d; ++i) {
    float y = (static_cast<float>(x[i]) - mean) * rstd;
    if (w) y *= static_cast<float>(w[i]);
    if (b) y += static_cast<float>(b[i]);
    out[i] = static_cast<T>(y);
  }
}

// exp(x) to about 1 ulp (Cody-Waite reduction by ln 2, a degree-6 polynomial on
// [-ln2/2, ln2/2]: SLEEF's expf_u10 coefficients). 2^n is applied as two factors so that
// n = 128 (x near ln FLT_MAX) and n < -126 (a subnormal result) stay in range; past
// ln FLT_MAX the result is +inf and below -104 it is 0, as std::exp's; NaN stays NaN.
IK_TARGET inline V exp(V x) {
  const V n = round_int(mul(x, splat(1.442695040888963407f)));
  V r = fnmadd(n, splat(0.693145751953125f), x);
  r = fnmadd(n, splat(1.428606765330187045e-06f), r);
  V u = splat(0.000198527617612853646278381f);
  u = fmadd(u, r, splat(0.00139304355252534151077271f));
  u = fmadd(u, r, splat(0.00833336077630519866943359f));
  u = fmadd(u, r, splat(0.0416664853692054748535156f));
  u = fmadd(u, r, splat(0.166666671633720397949219f));
  u = fmadd(u, r, splat(0.5f));
  u = add(fmadd(mul(r, r), u, r), splat(1.0f));
  const V half = floor_half(n);
  u = mul(mul(u, pow2(half)), pow2(sub(n, half)));
  u = where_gt(x, 88.72283935546875f, splat(__builtin_inff()), u);
  u = where_lt(x, -104.0f, zero(), u);
  return where_nan(x, x, u);
}

// SwiGLU (activation.cpp): out <- round(round(silu(gate)) * up) with MUL, else
// round(silu(gate)), silu(v) = v / (1 + exp(-v)) in fp32 (torch's formula). The vector
// exp is within about 1 ulp of std::exp, which the tail uses.
template <typename T, bool MUL>
IK_TARGET void silu_row(const T* gate, const T* up, T* out, int64_t d) {
  int64_t i = 0;
  for (; i + kL <= d; i += kL) {
    const V x = load(gate + i);
    V y = div(x, add(splat(1.0f), exp(neg(x))));
    if (MUL) y = mul(round_to<T>(y), load(up + i));
    store(out + i, y);
  }
  for (; i < d; ++i) {
    const float x = static_cast<float>(gate[i]);
    float y = x / (1.0f + std::exp(-x));
    if (MUL) y = static_cast<float>(static_cast<T>(y)) * static_cast<float>(up[i]);
    out[i] = static_cast<T>(y);
  }
}

}  // namespace IK_SIMD_NS

#undef IK_SIMD_NS
#undef IK_TARGET
