// GGUF k-quants on the CPU: Q4_K and Q6_K quantisation, dequantisation and mat-vec
// (x [M <= 8, K] times a quantised weight [N, K], transposed), bytes as ggml's
// (common/ggml_blocks.h).
//
// The quantiser follows ggml's design, written anew from its description: every
// sub-block searches a grid of candidate inverse scales around nmax / range; for
// each candidate the integer levels are rounded and the scale (and, for Q4_K, the
// min) refitted by weighted least squares; the fit with the smallest weighted
// squared error sum(w_i * (x_i - deq_i)^2) wins (ggml's make_qkx2_quants for Q4_K,
// make_qx_quants for Q6_K). The per-sub-block scales are then quantised the same
// way (6 bits for Q4_K's scales and mins, 8 bits for Q6_K's), each weighted by what
// its error costs the weights, the super-block factors rounded to fp16, and every
// weight re-rounded against the scales as they will be dequantised. Q4_K goes
// further than ggml there: each sub-block tries the neighbours of its rounded 6-bit
// scale and min (their errors can cancel), and the two fp16 factors are refitted
// to the chosen integers by least squares, kept when the block's error drops.
//
// Weights w_i: imatrix[col] when given (llama.cpp's importance matrix: the mean of
// the squared activations of that input column). Without one, 1: with nothing known
// of the activations (take them isotropic), a layer's expected output error
// E|dW x|^2 is proportional to sum(dW^2), so plain squared error is the objective
// (a flat imatrix). ggml weighs by rms + |x| there, a prior that large weights matter
// more; on the unweighted error that costs it ~2% against us (BENCHMARKS.md).
//
// Dequantisation computes (d * sc) * q - (dmin * m) in fp32, in gguf-py's order,
// so it equals gguf.quants.dequantize bit for bit. That needs the compiler not to
// fuse the multiply and the subtraction: build.toml passes -ffp-contract=off.
#include <ATen/Parallel.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cpu_isa.h"
#include "ggml_blocks.h"
#include "torch_binding.h"
#include "torch_checks.h"
#include "vec_io.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

using namespace inference_kernels::ggml;
using inference_kernels::num;
using inference_kernels::check_no_overlap;
using inference_kernels::cpu::fVec;
using inference_kernels::cpu::cpu_isa;
using inference_kernels::cpu::Isa;
using inference_kernels::cpu::isa_name;

#if defined(__x86_64__)
// The gemv's AVX2 and AVX-512 inner loops (namespaces avx2, avx512).
#define IK_SIMD_FILE "q4k_simd.h"
#include "simd_builds.h"
#endif

inline float half_to_float(uint16_t bits) { return c10::Half(bits, c10::Half::from_bits()); }
inline uint16_t float_to_half(float v) { return c10::Half(v).x; }
// Round half to even, what std::nearbyint gives in the default rounding mode, inline:
// the build targets baseline x86-64 (no SSE4.1 roundss), where nearbyintf is a libm call,
// and those calls took a quarter of the quantiser's time. Adding and subtracting 1.5 * 2^23
// leaves v's nearest integer for |v| < 2^22 (ties to even); larger |v| come back at
// least that large with v's sign, and every caller clamps to a small range. The clamp
// here keeps the conversion defined.
inline int round_int(float v) {
  constexpr float kMagic = 12582912.0f;
  return static_cast<int>(std::clamp((v + kMagic) - kMagic, -1073741824.0f, 1073741824.0f));
}

// ---- the searches ---------------------------------------------------------------

// The searches try candidates that are independent of each other: they run side by side,
// a candidate a lane of a GCC/Clang vector (SSE, AVX2 or AVX-512 registers, by the build
// below; NEON on Arm). Each lane sums over the weights in order, as a candidate alone would, and
// the candidates are then taken in their order: the same result, to the bit, as one at a
// time, which was a chain of dependent adds per candidate.
constexpr int kLanes = 8;
using LaneF = float __attribute__((vector_size(4 * kLanes)));
using LaneI = int __attribute__((vector_size(4 * kLanes)));
using PairF = float __attribute__((vector_size(64)));  // choose_scale_min's 9 pairs, in 16 lanes
using PairI = int __attribute__((vector_size(64)));

template <typename V, typename T>
inline V splat(T v) {
  V r;
  for (int c = 0; c < int(sizeof(V) / sizeof(T)); ++c) r[c] = v;
  return r;
}

// Lanewise mask ? a : b (mask lanes all ones or all zeros, as comparisons give).
template <typename V, typename M>
inline V select(M mask, V a, V b) {
  return (V)(((M)a & mask) | ((M)b & ~mask));
}

// std::clamp(round_int(v), lo, hi) a lane at a time. The clamp to lo..hi is done on the
// rounded floats (SSE2 has no packed int min/max; GCC split those per lane): the same
// levels for every input the callers give, finite or not (NaN takes lo, as round_int's
// INT_MIN clamps to on x86).
template <typename F, typename I>
inline I levels(F v, int lo, int hi) {
  const F magic = splat<F>(12582912.0f), flo = splat<F>(float(lo)), fhi = splat<F>(float(hi));
  F r = (v + magic) - magic;
  r = select(~(r >= flo), flo, r);
  r = select(r > fhi, fhi, r);
  return __builtin_convertvector(r, I);
}

// x ~ scale * L - neg_min with L in 0..nmax, neg_min >= 0 (Q4_K's affine sub-blocks).
// Returns scale; writes L and neg_min. The min is clamped to <= 0 as ggml's is, so the
// stored (unsigned) min is non-negative.
float fit_affine(const float* x, const float* w, int n, int nmax, uint8_t* L, float* neg_min) {
  float lo = x[0], hi = x[0], sw = 0, swx = 0;
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sw += w[i];
    swx += w[i] * x[i];
  }
  lo = std::min(lo, 0.0f);
  if (hi == lo) {
    std::fill(L, L + n, 0);
    *neg_min = -lo;
    return 0.0f;
  }
  auto error = [&](const uint8_t* l, float scale, float min) {
    float e = 0;
    for (int i = 0; i < n; ++i) {
      const float d = scale * l[i] + min - x[i];
      e += w[i] * d * d;
    }
    return e;
  };
  float best_scale = (hi - lo) / nmax, best_min = lo;
  for (int i = 0; i < n; ++i) L[i] = std::clamp(round_int((x[i] - lo) / best_scale), 0, nmax);
  float best = error(L, best_scale, best_min);
  // 21 candidate inverse scales from (nmax - 1) / range to (nmax + 1) / range (a finer
  // grid gained < 0.1% once the 6-bit scales and mins are searched too, at 1.5x the time),
  // kLanes side by side (see kLanes), then taken in order as one at a time would be.
  LaneI cand[kQK];
  for (int s0 = 0; s0 <= 20; s0 += kLanes) {
    LaneF iscale;
    for (int c = 0; c < kLanes; ++c) iscale[c] = (nmax - 1.0f + 0.1f * (s0 + c)) / (hi - lo);
    LaneF sl = {}, sl2 = {}, sxl = {};
    for (int i = 0; i < n; ++i) {
      const LaneI l = levels<LaneF, LaneI>(iscale * splat<LaneF>(x[i] - lo), 0, nmax);
      const LaneF lf = __builtin_convertvector(l, LaneF), wi = splat<LaneF>(w[i]);
      cand[i] = l;
      sl += wi * lf;
      sl2 += wi * lf * lf;
      sxl += wi * lf * splat<LaneF>(x[i]);
    }
    // Weighted least squares for x ~ scale * l + min, then min clamped to <= 0.
    const LaneF vsw = splat<LaneF>(sw), vswx = splat<LaneF>(swx);
    const LaneF det = vsw * sl2 - sl * sl;
    const LaneI clamped = (sl2 * vswx - sl * sxl) / det > LaneF{};
    const LaneF scale = select(clamped, sxl / sl2, (vsw * sxl - vswx * sl) / det);
    const LaneF min = select(clamped, LaneF{}, (sl2 * vswx - sl * sxl) / det);
    LaneF e = {};
    for (int i = 0; i < n; ++i) {
      const LaneF d = scale * __builtin_convertvector(cand[i], LaneF) + min - splat<LaneF>(x[i]);
      e += splat<LaneF>(w[i]) * d * d;
    }
    for (int c = 0; c < kLanes && s0 + c <= 20; ++c) {
      if (det[c] > 0 && e[c] < best) {
        best = e[c];
        best_scale = scale[c];
        best_min = min[c];
        for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(cand[i][c]);
      }
    }
  }
  *neg_min = -best_min;
  return best_scale;
}

// x ~ scale * L with integer L in lo..hi, for the scale minimising sum(w (x - scale L)^2):
// 21 candidate inverse scales (nmax - 1 .. nmax + 1) / pivot round the levels, and each
// gets its least-squares scale sum(w x L) / sum(w L^2), whose error is
// sum(w x^2) - sum(w x L)^2 / sum(w L^2). Returns the scale (0 and L = 0 if none fits).
float fit_levels(const float* x, const float* w, int n, int nmax, float pivot, int lo, int hi,
                 int* L) {
  std::fill(L, L + n, 0);
  float best = -1, scale = 0;
  LaneI cand[kQK];
  for (int s0 = -10; s0 <= 10; s0 += kLanes) {
    LaneF iscale;
    for (int c = 0; c < kLanes; ++c) iscale[c] = (nmax + 0.1f * (s0 + c)) / pivot;
    LaneF sxl = {}, sl2 = {};
    for (int i = 0; i < n; ++i) {
      const LaneI l = levels<LaneF, LaneI>(iscale * splat<LaneF>(x[i]), lo, hi);
      const LaneF lf = __builtin_convertvector(l, LaneF), wi = splat<LaneF>(w[i]);
      cand[i] = l;
      sxl += wi * splat<LaneF>(x[i]) * lf;
      sl2 += wi * lf * lf;
    }
    for (int c = 0; c < kLanes && s0 + c <= 10; ++c) {
      if (sl2[c] > 0 && sxl[c] * sxl[c] / sl2[c] > best) {
        best = sxl[c] * sxl[c] / sl2[c];
        scale = sxl[c] / sl2[c];
        for (int i = 0; i < n; ++i) L[i] = cand[i][c];
      }
    }
  }
  return scale;
}

// x ~ scale * L with L in -nmax..nmax-1 (Q6_K's sub-blocks with nmax = 32, and its
// int8 sub-block scales with nmax = 128). The value of largest magnitude maps near
// -nmax, using the extra negative level, as ggml's make_qx_quants does.
float fit_symmetric(const float* x, const float* w, int n, int nmax, int* L) {
  float amax = 0, vmax = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      vmax = x[i];
    }
  }
  if (amax < 1e-30f) {
    std::fill(L, L + n, 0);
    return 0.0f;
  }
  return fit_levels(x, w, n, nmax, -vmax, -nmax, nmax - 1, L);
}

// v ~ d * L with v >= 0, L in 0..nmax (Q4_K's 6-bit scales and mins).
float fit_nonneg(const float* v, const float* w, int n, int nmax, int* L) {
  float vmax = 0;
  for (int i = 0; i < n; ++i) vmax = std::max(vmax, v[i]);
  if (!(vmax > 0)) {
    std::fill(L, L + n, 0);
    return 0.0f;
  }
  return fit_levels(v, w, n, nmax, vmax, 0, nmax, L);
}

// Per-weight importance of one super-block (see the file comment).
void importance(const float* imatrix, float* w) {
  if (imatrix) {
    float s = 0;
    for (int i = 0; i < kQK; ++i) s += imatrix[i];
    // An all-zero imatrix block (columns never activated) says nothing: fall back.
    if (s > 0) {
      std::copy(imatrix, imatrix + kQK, w);
      return;
    }
  }
  std::fill(w, w + kQK, 1.0f);
}

// ---- Q4_K -------------------------------------------------------------------------

// Sub-block j of a Q4_K block, as stored: step ds = d * sc, offset dm = dmin * m. Each
// weight takes its nearest level (levels into L); returns the weighted squared error of
// the values as dequantised.
float subblock_error(const float* x, const float* w, float ds, float dm, uint8_t* L) {
  float e = 0;
  const float inv = ds > 0 ? 1.0f / ds : 0.0f;
  for (int i = 0; i < 32; ++i) {
    const int l = ds > 0 ? std::clamp(round_int((x[i] + dm) * inv), 0, 15) : 0;
    L[i] = static_cast<uint8_t>(l);
    const float diff = ds * l - dm - x[i];
    e += w[i] * diff * diff;
  }
  return e;
}

// Given the fp16 super-block factors, each sub-block's 6-bit scale and min: the rounded
// values and their neighbours (9 pairs), keeping the pair whose re-rounded weights have
// the smallest error. Rounding the scale and the min separately ignores that their errors
// can cancel. Returns the block's weighted squared error.
float choose_scale_min(const float* x, const float* w, float d, float dmin, const float* scales,
                       const float* mins, uint8_t* sc, uint8_t* m, uint8_t* L) {
  constexpr int kPairs = 16;  // up to 9, side by side as in fit_affine
  float total = 0;
  for (int j = 0; j < 8; ++j) {
    const int s0 = d > 0 ? std::clamp(round_int(scales[j] / d), 0, 63) : 0;
    const int m0 = dmin > 0 ? std::clamp(round_int(mins[j] / dmin), 0, 63) : 0;
    int si[kPairs] = {}, mi[kPairs] = {}, pairs = 0;
    for (int s = std::max(0, s0 - 1); s <= std::min(63, s0 + 1); ++s) {
      if (s > 0 && !(d > 0)) break;
      for (int mm = std::max(0, m0 - 1); mm <= std::min(63, m0 + 1); ++mm) {
        if (mm > 0 && !(dmin > 0)) break;
        si[pairs] = s;
        mi[pairs++] = mm;
      }
    }
    const float* xj = x + 32 * j;
    const float* wj = w + 32 * j;
    PairF ds, dm, inv, e = {};
    for (int k = 0; k < kPairs; ++k) {
      ds[k] = d * si[k];
      dm[k] = dmin * mi[k];
      inv[k] = ds[k] > 0 ? 1.0f / ds[k] : 0.0f;
    }
    for (int i = 0; i < 32; ++i) {
      // subblock_error's sums, a pair a lane. inv = 0 where ds <= 0: the level is 0, as
      // subblock_error's (NaN and -0 give 0 too).
      const PairF xi = splat<PairF>(xj[i]);
      const PairI l = levels<PairF, PairI>((xi + dm) * inv, 0, 15);
      const PairF diff = ds * __builtin_convertvector(l, PairF) - dm - xi;
      e += splat<PairF>(wj[i]) * diff * diff;
    }
    int pick = 0;
    for (int k = 1; k < pairs; ++k)
      if (e[k] < e[pick]) pick = k;
    sc[j] = static_cast<uint8_t>(si[pick]);
    m[j] = static_cast<uint8_t>(mi[pick]);
    total += subblock_error(xj, wj, ds[pick], dm[pick], L + 32 * j);
  }
  return total;
}

void quantize_block_q4k(const float* x, const float* imatrix, BlockQ4K* b) {
  float w[kQK];
  importance(imatrix, w);
  uint8_t L[kQK];
  float scales[8], mins[8], w_scale[8], w_min[8];
  for (int j = 0; j < 8; ++j) {
    scales[j] = fit_affine(x + 32 * j, w + 32 * j, 32, 15, L + 32 * j, &mins[j]);
    // A scale error ds moves weight i by ds * L_i, a min error by dm: weigh each
    // sub-block's scale and min by what their errors cost.
    w_scale[j] = w_min[j] = 0;
    for (int i = 32 * j; i < 32 * j + 32; ++i) {
      w_scale[j] += w[i] * L[i] * L[i];
      w_min[j] += w[i];
    }
    w_scale[j] = std::max(w_scale[j], 1e-30f);  // an all-zero sub-block still gets a level
  }
  int ls[8], lm[8];
  const float d = fit_nonneg(scales, w_scale, 8, 63, ls);
  const float dmin = fit_nonneg(mins, w_min, 8, 63, lm);
  uint16_t dh = float_to_half(d), dminh = float_to_half(dmin);
  uint8_t sc[8], m[8];
  float err = choose_scale_min(x, w, half_to_float(dh), half_to_float(dminh), scales, mins, sc, m, L);
  for (int it = 0; it < 2; ++it) {
    // Refit the two super-block factors to the chosen integers: x_i ~ d * a_i - dmin * b_i
    // with a_i = sc_j * L_i, b_i = m_j, by weighted least squares.
    float saa = 0, sab = 0, sbb = 0, sax = 0, sbx = 0;
    for (int j = 0; j < 8; ++j) {
      for (int i = 32 * j; i < 32 * j + 32; ++i) {
        const float a = static_cast<float>(sc[j]) * L[i], bb = m[j];
        saa += w[i] * a * a;
        sab += w[i] * a * bb;
        sbb += w[i] * bb * bb;
        sax += w[i] * a * x[i];
        sbx += w[i] * bb * x[i];
      }
    }
    float nd, ndmin;
    const float det = saa * sbb - sab * sab;
    if (sbb > 0 && det > 1e-6f * saa * sbb) {
      nd = (sax * sbb - sbx * sab) / det;
      ndmin = (sax * sab - sbx * saa) / det;
    } else if (saa > 0) {
      nd = sax / saa;
      ndmin = 0;
    } else {
      break;
    }
    if (!(nd >= 0) || !(ndmin >= 0)) break;
    const uint16_t ndh = float_to_half(nd), ndminh = float_to_half(ndmin);
    if (ndh == dh && ndminh == dminh) break;
    uint8_t nsc[8], nm[8], nL[kQK];
    const float e = choose_scale_min(x, w, half_to_float(ndh), half_to_float(ndminh), scales, mins,
                                     nsc, nm, nL);
    if (!(e < err)) break;
    err = e;
    dh = ndh;
    dminh = ndminh;
    std::copy(nsc, nsc + 8, sc);
    std::copy(nm, nm + 8, m);
    std::copy(nL, nL + kQK, L);
  }
  b->d = dh;
  b->dmin = dminh;
  pack_scale_min(sc, m, b->scales);
  std::fill(b->qs, b->qs + kQK / 2, 0);
  for (int e = 0; e < kQK; ++e) {
    const Q4KPos p = q4k_pos(e);
    b->qs[p.qs] |= static_cast<uint8_t>(L[e] << p.shift);
  }
}

void dequantize_block_q4k(const BlockQ4K& b, float* out) {
  const float d = half_to_float(b.d), dmin = half_to_float(b.dmin);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    unpack_scale_min(b.scales, j, &sc, &m);
    const float ds = d * sc, dm = dmin * m;
    const uint8_t* q = b.qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) out[32 * j + l] = ds * ((q[l] >> shift) & 0x0F) - dm;
  }
}

// ---- Q6_K -------------------------------------------------------------------------

void quantize_block_q6k(const float* x, const float* imatrix, BlockQ6K* b) {
  float w[kQK];
  importance(imatrix, w);
  int L[kQK];
  float scales[16], w_scale[16];
  for (int j = 0; j < 16; ++j) {
    scales[j] = fit_symmetric(x + 16 * j, w + 16 * j, 16, 32, L + 16 * j);
    w_scale[j] = 0;
    for (int i = 16 * j; i < 16 * j + 16; ++i) w_scale[j] += w[i] * L[i] * L[i];
    w_scale[j] = std::max(w_scale[j], 1e-30f);
  }
  int ls[16];
  const float d = fit_symmetric(scales, w_scale, 16, 128, ls);
  b->d = float_to_half(d);
  const float d16 = half_to_float(b->d);
  for (int j = 0; j < 16; ++j) {
    const int s = d16 != 0 ? std::clamp(round_int(scales[j] / d16), -128, 127) : 0;
    b->scales[j] = static_cast<int8_t>(s);
    const float ds = d16 * s;
    for (int i = 16 * j; i < 16 * j + 16; ++i)
      L[i] = (ds != 0 ? std::clamp(round_int(x[i] / ds), -32, 31) : 0) + 32;
  }
  std::fill(b->ql, b->ql + kQK / 2, 0);
  std::fill(b->qh, b->qh + kQK / 4, 0);
  for (int e = 0; e < kQK; ++e) {
    const Q6KPos p = q6k_pos(e);
    b->ql[p.ql] |= static_cast<uint8_t>((L[e] & 0x0F) << p.ql_shift);
    b->qh[p.qh] |= static_cast<uint8_t>((L[e] >> 4) << p.qh_shift);
  }
}

void dequantize_block_q6k(const BlockQ6K& b, float* out) {
  const float d = half_to_float(b.d);
  float ds[16];
  for (int j = 0; j < 16; ++j) ds[j] = d * b.scales[j];
  // Quarter s of half h: weights 128h + 32s + l, l in 0..31 (the layout in ggml_blocks.h,
  // unrolled so the inner loop has fixed shifts and vectorises).
  for (int h = 0; h < 2; ++h) {
    for (int s = 0; s < 4; ++s) {
      const uint8_t* ql = b.ql + 64 * h + 32 * (s & 1);
      const uint8_t* qh = b.qh + 32 * h;
      const int lo_shift = 4 * (s >> 1), hi_shift = 2 * s;
      float* o = out + 128 * h + 32 * s;
      const float* sc = ds + 8 * h + 2 * s;
      for (int l = 0; l < 32; ++l) {
        const int q = ((ql[l] >> lo_shift) & 0x0F) | (((qh[l] >> hi_shift) & 3) << 4);
        o[l] = sc[l / 16] * (q - 32);
      }
    }
  }
}

// ---- the instruction set: cpu_isa.h ----------------------------------------------------

// The quantiser's block functions again, built for AVX2 (and Q4_K's for AVX-512): flatten
// inlines the searches into each, and the compiler vectorises their lanes for that
// instruction set. No FMA contraction in any (-ffp-contract=off), so every build gives the
// same bytes (test_gemv_every_isa runs the pinned bytes under each). A 4096 x 4096 weight
// on 2 threads: Q4_K 1.11 s baseline, 0.79 AVX2, 0.67 AVX-512; Q6_K 0.41 baseline, 0.17
// AVX2 and 0.22 AVX-512, so Q6_K keeps its AVX2 build there (BENCHMARKS.md,
// twenty-second session).
#if defined(__x86_64__)
__attribute__((target("avx2,fma"), flatten)) void quantize_block_q4k_avx2(const float* x, const float* imatrix,
                                                                          BlockQ4K* b) {
  quantize_block_q4k(x, imatrix, b);
}
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"), flatten)) void quantize_block_q4k_avx512(
    const float* x, const float* imatrix, BlockQ4K* b) {
  quantize_block_q4k(x, imatrix, b);
}
__attribute__((target("avx2,fma"), flatten)) void quantize_block_q6k_avx2(const float* x, const float* imatrix,
                                                                          BlockQ6K* b) {
  quantize_block_q6k(x, imatrix, b);
}
#endif

// ---- the formats, for the shared entry points ----------------------------------------

struct Q4K {
  using Block = BlockQ4K;
  static constexpr const char* name = "Q4_K";
  static void quantize(const float* x, const float* im, Block* b) { quantize_block_q4k(x, im, b); }
  static void dequantize(const Block& b, float* out) { dequantize_block_q4k(b, out); }
#if defined(__x86_64__)
  static constexpr auto quantize_avx2 = quantize_block_q4k_avx2;
  static constexpr auto quantize_avx512 = quantize_block_q4k_avx512;
  static constexpr auto dots_avx2 = avx2::q4k_dots;
  static constexpr auto dots_avx512 = avx512::q4k_dots;
#endif
};

struct Q6K {
  using Block = BlockQ6K;
  static constexpr const char* name = "Q6_K";
  static void quantize(const float* x, const float* im, Block* b) { quantize_block_q6k(x, im, b); }
  static void dequantize(const Block& b, float* out) { dequantize_block_q6k(b, out); }
#if defined(__x86_64__)
  static constexpr auto quantize_avx2 = quantize_block_q6k_avx2;
  static constexpr auto quantize_avx512 = quantize_block_q6k_avx2;  // faster than an AVX-512 build
  static constexpr auto dots_avx2 = avx2::q6k_dots;
  static constexpr auto dots_avx512 = avx512::q6k_dots;
#endif
};

// Blocks of a quantised row: ggml blocks are packed back to back with no padding; a
// row of K/256 blocks starts at row * (K/256) * sizeof(Block). Q6_K's 210-byte block
// has 2-byte alignment, so rows stay aligned when the tensor's storage is.
template <typename F>
const typename F::Block* block_row(const at::Tensor& q, int64_t row, int64_t blocks) {
  return reinterpret_cast<const typename F::Block*>(q.const_data_ptr<uint8_t>()) + row * blocks;
}

// A quantised weight: uint8 [N, blocks * sizeof(Block)], contiguous, on the CPU.
template <typename F>
int64_t check_quantised(const at::Tensor& q, const char* name) {
  using Block = typename F::Block;
  return inference_kernels::check_kquant_weight(q, sizeof(Block), alignof(Block), F::name,
                                                c10::DeviceType::CPU, name);
}

template <typename F>
void quantize(at::Tensor& out, const at::Tensor& weight, const std::optional<at::Tensor>& imatrix) {
  using inference_kernels::dims_str;
  inference_kernels::check_device(weight, c10::DeviceType::CPU, "weight");
  TORCH_CHECK(weight.scalar_type() == at::kFloat, "weight must be float32, got ",
              c10::toString(weight.scalar_type()));
  TORCH_CHECK(weight.dim() == 2, "weight must be 2-D [N, K], got shape ", dims_str(weight.sizes()));
  TORCH_CHECK(weight.is_contiguous(), "weight must be contiguous");
  const int64_t n = weight.size(0), k = weight.size(1);
  TORCH_CHECK(k % kQK == 0, "K (weight's last dimension) must be a multiple of 256, the ", F::name,
              " super-block, got ", num(k));
  const int64_t blocks = k / kQK;
  const std::vector<int64_t> want = {n, blocks * static_cast<int64_t>(sizeof(typename F::Block))};
  inference_kernels::check_device(out, c10::DeviceType::CPU, "out");
  TORCH_CHECK(out.scalar_type() == at::kByte, "out must be uint8, got ", c10::toString(out.scalar_type()));
  TORCH_CHECK(out.sizes() == c10::IntArrayRef(want), "out must have shape ", dims_str(want), " (",
              F::name, "), got ", dims_str(out.sizes()));
  TORCH_CHECK(out.is_contiguous(), "out must be contiguous");
  const float* im = nullptr;
  if (imatrix) {
    const at::Tensor& t = *imatrix;
    inference_kernels::check_device(t, c10::DeviceType::CPU, "imatrix");
    TORCH_CHECK(t.scalar_type() == at::kFloat, "imatrix must be float32, got ",
                c10::toString(t.scalar_type()));
    TORCH_CHECK(t.dim() == 1 && t.size(0) == k, "imatrix must have shape [", num(k),
                "] (one value per input column), got ", dims_str(t.sizes()));
    TORCH_CHECK(t.is_contiguous(), "imatrix must be contiguous");
    im = t.const_data_ptr<float>();
    for (int64_t i = 0; i < k; ++i)
      TORCH_CHECK(std::isfinite(im[i]) && im[i] >= 0,
                  "imatrix must be finite and non-negative (mean squared activations), got ",
                  std::to_string(im[i]), " at column ", num(i));
  }
  check_no_overlap(out, "out", weight, "weight");
  const float* x = weight.const_data_ptr<float>();
  auto* dst = reinterpret_cast<typename F::Block*>(out.data_ptr<uint8_t>());
  auto* quantize_block = &F::quantize;
#if defined(__x86_64__)
  const Isa isa = cpu_isa();
  if (isa == Isa::kAvx512) quantize_block = F::quantize_avx512;
  if (isa == Isa::kAvx2) quantize_block = F::quantize_avx2;
#else
  (void)cpu_isa();  // IK_CPU_ISA is checked on aarch64 too
#endif
  // A row is K/256 searches of a few thousand flops per weight: one row per task is plenty.
  // (at::parallel_for rethrows a failed check on the calling thread.)
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = x + r * k;
      TORCH_CHECK(std::all_of(row, row + k, [](float v) { return std::isfinite(v); }),
                  "weight must be finite, got a NaN or infinity in row ", num(r));
      for (int64_t b = 0; b < blocks; ++b)
        quantize_block(row + b * kQK, im ? im + b * kQK : nullptr, dst + r * blocks + b);
    }
  });
}

template <typename F>
void dequantize(at::Tensor& out, const at::Tensor& q) {
  using inference_kernels::dims_str;
  const int64_t blocks = check_quantised<F>(q, "q");
  const std::vector<int64_t> want = {q.size(0), blocks * kQK};
  inference_kernels::check_device(out, c10::DeviceType::CPU, "out");
  TORCH_CHECK(out.scalar_type() == at::kFloat, "out must be float32, got ",
              c10::toString(out.scalar_type()));
  TORCH_CHECK(out.sizes() == c10::IntArrayRef(want), "out must have shape ", dims_str(want), ", got ",
              dims_str(out.sizes()));
  TORCH_CHECK(out.is_contiguous(), "out must be contiguous");
  float* o = out.data_ptr<float>();
  at::parallel_for(0, q.size(0), std::max<int64_t>(1, 64 / std::max<int64_t>(blocks, 1)),
                   [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const auto* row = block_row<F>(q, r, blocks);
      for (int64_t b = 0; b < blocks; ++b) F::dequantize(row[b], o + (r * blocks + b) * kQK);
    }
  });
}

constexpr int64_t kMaxGemvRows = inference_kernels::kMaxKquantGemvRows;

// out[m, n] = sum_k x[m, k] * W[n, k] for weight rows [begin, end), the baseline loop:
// each block of a weight row is dequantised into a 1 KiB stack buffer (L1-resident,
// never the whole weight) and dotted with the M rows of x in at::vec vectors, one
// accumulator vector per row of x; with -ffp-contract=off at::vec's fmadd is a rounded
// product then a rounded sum. A function of its own: inside the lambda next to the SIMD
// dispatch, GCC 12 stopped vectorising its generic at::vec loops (3x slower at M = 8).
template <typename F, typename T>
void gemv_rows_baseline(T* out, const float* x, const typename F::Block* q, int64_t m, int64_t n,
                        int64_t blocks, int64_t begin, int64_t end) {
  const int64_t k = blocks * kQK;
  alignas(64) float w[kQK];
  for (int64_t r = begin; r < end; ++r) {
    const auto* row = q + r * blocks;
    fVec acc[kMaxGemvRows];
    for (int64_t i = 0; i < m; ++i) acc[i] = fVec(0.0f);
    for (int64_t b = 0; b < blocks; ++b) {
      F::dequantize(row[b], w);
      for (int64_t i = 0; i < m; ++i) {
        const float* xb = x + i * k + b * kQK;
        fVec a = acc[i];
        for (int e = 0; e < kQK; e += fVec::size())
          a = at::vec::fmadd(fVec::loadu(w + e), fVec::loadu(xb + e), a);
        acc[i] = a;
      }
    }
    for (int64_t i = 0; i < m; ++i)
      out[i * n + r] = static_cast<T>(at::vec::vec_reduce_all<float>(std::plus<fVec>(), acc[i]));
  }
}

#if defined(__x86_64__)
// The same with the AVX2 / AVX-512 loops of q4k_simd.h: the same dequantised values,
// in registers, FMA sums.
template <typename F, typename T>
void gemv_rows_simd(T* out, const float* x, const typename F::Block* q, int64_t m, int64_t n,
                    int64_t blocks, int64_t begin, int64_t end, Isa isa) {
  const auto dots = isa == Isa::kAvx512 ? F::dots_avx512 : F::dots_avx2;
  constexpr int64_t kChunk = 64;  // rows per call: their sums fit on the stack
  float sums[kChunk * kMaxGemvRows];
  for (int64_t r0 = begin; r0 < end; r0 += kChunk) {
    const int64_t nr = std::min(kChunk, end - r0);
    dots(q + r0 * blocks, nr, blocks, x, blocks * kQK, static_cast<int>(m), sums);
    for (int64_t r = 0; r < nr; ++r)
      for (int64_t i = 0; i < m; ++i) out[i * n + r0 + r] = static_cast<T>(sums[r * m + i]);
  }
}
#endif

template <typename F, typename T>
void gemv_rows(T* out, const float* x, const at::Tensor& q, int64_t m, int64_t n, int64_t blocks) {
  // ~16 KiB of weight bytes per task.
  const int64_t grain = std::max<int64_t>(1, 16384 / (blocks * sizeof(typename F::Block)));
  const auto* qb = block_row<F>(q, 0, blocks);
  [[maybe_unused]] const Isa isa = cpu_isa();  // read on aarch64 too: IK_CPU_ISA is checked
  at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
#if defined(__x86_64__)
    if (isa != Isa::kBaseline) return gemv_rows_simd<F>(out, x, qb, m, n, blocks, begin, end, isa);
#endif
    gemv_rows_baseline<F>(out, x, qb, m, n, blocks, begin, end);
  });
}

template <typename F>
void gemv(at::Tensor& out, const at::Tensor& x, const at::Tensor& q) {
  using Block = typename F::Block;
  const int64_t blocks = inference_kernels::check_kquant_gemv_args(
      out, x, q, sizeof(Block), alignof(Block), F::name, c10::DeviceType::CPU);
  const int64_t m = x.size(0), n = q.size(0);
  if (n == 0) return;
  // x is at most 8 x K: one fp32 copy up front keeps the inner loop free of conversions.
  const at::Tensor xf = x.to(at::kFloat).contiguous();
  IK_DISPATCH_FLOAT_TYPES(x.scalar_type(), "q_gemv_cpu", [&] {
    gemv_rows<F>(out.data_ptr<scalar_t>(), xf.const_data_ptr<float>(), q, m, n, blocks);
  });
}

}  // namespace

void quantize_q4_k_cpu(at::Tensor& out, const at::Tensor& weight,
                       const std::optional<at::Tensor>& imatrix) {
  quantize<Q4K>(out, weight, imatrix);
}

void quantize_q6_k_cpu(at::Tensor& out, const at::Tensor& weight,
                       const std::optional<at::Tensor>& imatrix) {
  quantize<Q6K>(out, weight, imatrix);
}

void dequantize_q4_k_cpu(at::Tensor& out, const at::Tensor& q) { dequantize<Q4K>(out, q); }
void dequantize_q6_k_cpu(at::Tensor& out, const at::Tensor& q) { dequantize<Q6K>(out, q); }
void q4k_gemv_cpu(at::Tensor& out, const at::Tensor& x, const at::Tensor& q) { gemv<Q4K>(out, x, q); }
void q6k_gemv_cpu(at::Tensor& out, const at::Tensor& x, const at::Tensor& q) { gemv<Q6K>(out, x, q); }

std::string cpu_isa_cpu() { return isa_name(cpu_isa()); }
