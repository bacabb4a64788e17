// The k-quant gemv's inner loop for one x86 instruction set: q4k.cpp includes this file
// twice, with IK_SIMD_BITS 256 (namespace avx2, AVX2 + FMA) and 512 (namespace avx512,
// AVX-512 F/BW/VL), and picks one at run time (cpu_isa() there). Every function carries
// the target attribute instead of a global -march: kernel-builder builds one CPU variant
// for every x86-64 machine, so only the functions chosen at run time may use these
// instructions. No include guard on purpose; x86-64 only (the includer checks).
//
// Numerics. Each weight is dequantised to exactly the fp32 value dequantize_block_q4k /
// _q6k produce: Q4_K (d * sc) * q - dmin * m, Q6_K (d * scale) * (q - 32), each product
// and the difference rounded separately (explicit mul and sub intrinsics, which
// -ffp-contract cannot fuse; with AVX-512, Q4_K computes the 16 values q = 0..15 of a
// sub-block that way and looks its weights up). The dot product then uses FMA: each
// w * x is added to an fp32 accumulator with one rounding (the baseline path rounds the
// product and the sum), spread over acc_count<M>() accumulator vectors per row of x,
// which are added together and then across lanes at the end of the weight row. So the
// summation order differs from the baseline path and from torch; every path is tested
// against the fp64 product, and with one-hot rows of x (one exact product) for returning
// the dequantised weights bit for bit (tests/test_q4k.py).

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

// Software prefetch `ahead` blocks further along the same weight row (rows are
// contiguous, so near a row's end this fetches the next row's start). Without it a
// weight that is not in cache (every weight, in a decode step through a multi-GB model)
// took about twice as long here as a cached one: the hardware prefetcher alone did not
// keep the dequantising loop fed (BENCHMARKS.md).
template <typename Block>
IK_TARGET inline void prefetch(const Block* p, int ahead) {
  const char* c = reinterpret_cast<const char*>(p + ahead);
  for (int o = 0; o < static_cast<int>(sizeof(Block)) + 63; o += 64) _mm_prefetch(c + o, _MM_HINT_T0);
}

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

// 8 bytes as 8 floats.
IK_TARGET inline __m256 bytes8_to_float(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// fp16 bits to fp32 (exact either way): vcvtph2ps with AVX-512F, c10's bit arithmetic
// otherwise (F16C is not part of the AVX2 path's target).
IK_TARGET inline float half_bits_to_float(uint16_t h) {
#if IK_SIMD_BITS == 512
  return _mm512_cvtss_f32(_mm512_cvtph_ps(_mm256_castsi128_si256(_mm_cvtsi32_si128(h))));
#else
  return c10::Half(h, c10::Half::from_bits());
#endif
}

// The fp32 factors of a Q4_K block, as dequantize_block_q4k computes them:
// ds[j] = d * sc_j, dm[j] = dmin * m_j (each one rounded product). The 6-bit scales and
// mins come out of the 12 bytes four at a time (ggml_blocks.h's scale_min, per byte lane).
IK_TARGET inline void q4k_factors(const BlockQ4K& blk, float* ds, float* dm) {
  uint32_t a0, a1, c;
  std::memcpy(&a0, blk.scales, 4);
  std::memcpy(&a1, blk.scales + 4, 4);
  std::memcpy(&c, blk.scales + 8, 4);
  alignas(8) uint32_t sc[2], m[2];
  sc[0] = a0 & 0x3F3F3F3Fu;  // sub-blocks 0..3: low 6 bits of bytes 0..3 (scales), 4..7 (mins)
  m[0] = a1 & 0x3F3F3F3Fu;
  sc[1] = (c & 0x0F0F0F0Fu) | ((a0 >> 2) & 0x30303030u);  // 4..7: nibbles of 8..11, top 2 bits
  m[1] = ((c >> 4) & 0x0F0F0F0Fu) | ((a1 >> 2) & 0x30303030u);  // of bytes 0..3 / 4..7
  const __m256 d = _mm256_set1_ps(half_bits_to_float(blk.d));
  const __m256 dmin = _mm256_set1_ps(half_bits_to_float(blk.dmin));
  _mm256_store_ps(ds, _mm256_mul_ps(d, bytes8_to_float(reinterpret_cast<const uint8_t*>(sc))));
  _mm256_store_ps(dm, _mm256_mul_ps(dmin, bytes8_to_float(reinterpret_cast<const uint8_t*>(m))));
}

// Q4_K: sub-block j holds weights 32j..32j+31, the low (j even) or high (j odd) nibbles
// of qs[32 (j / 2) ...]; w = (d * sc_j) * q - dmin * m_j.
// AVX-512: the 16 values a sub-block's weights can take, (ds * q) - dm for q = 0..15,
// are computed once per sub-block (the same two roundings) and each weight looked up
// with vpermps, which reads only the index's low 4 bits (no mask needed).
template <int M>
IK_TARGET __attribute__((always_inline)) inline void q4k_block(const BlockQ4K& blk, const float* xb, int64_t k,
                                V (&acc)[M][acc_count<M>()]) {
  alignas(32) float ds[8], dm[8];
  q4k_factors(blk, ds, dm);
#if IK_SIMD_BITS == 512
  const V iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#endif
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {
    const uint8_t* q = blk.qs + 32 * (j / 2);
    V w[kW];
#if IK_SIMD_BITS == 512
    const V table = sub(mul(splat(ds[j]), iota), splat(dm[j]));
    for (int u = 0; u < kW; ++u) {
      const I raw = bytes(q + u * kL);
      w[u] = _mm512_permutexvar_ps((j & 1) ? shr<4>(raw) : raw, table);
    }
#else
    const V dsv = splat(ds[j]), dmv = splat(dm[j]);
    for (int u = 0; u < kW; ++u) {
      const I raw = bytes(q + u * kL);
      const I lev = and_((j & 1) ? shr<4>(raw) : raw, 0x0F);
      w[u] = sub(mul(dsv, to_float(lev)), dmv);
    }
#endif
    dot32<M>(acc, w, xb + 32 * j, k, j);
  }
}

// Q6_K: quarter s of half h is weights 128h + 32s + l (l < 32): the low (s < 2) or high
// nibble of ql[64h + 32 (s & 1) + l], with bits 2s..2s+1 of qh[32h + l] on top;
// w = (d * scales[8h + 2s + l / 16]) * (q - 32), i.e. weights 16v..16v+15 use scales[v].
// The 6-bit levels q - 32 of a whole block are assembled first with byte-wide operations
// (a quarter per 32 bytes) into a stack buffer, then widened, converted and scaled.
IK_TARGET inline void q6k_levels(const BlockQ6K& blk, int8_t* lev) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32);
  for (int h = 0; h < 2; ++h) {
    const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.ql + 64 * h));
    const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.ql + 64 * h + 32));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh + 32 * h));
    // 16-bit shifts then byte masks: bits crossing into the neighbouring byte are masked off.
    const __m256i q[4] = {
        _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2)),
        _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m2)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                        _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2)),
    };
    for (int s = 0; s < 4; ++s)
      _mm256_store_si256(reinterpret_cast<__m256i*>(lev + 128 * h + 32 * s), _mm256_sub_epi8(q[s], k32));
  }
}

template <int M>
IK_TARGET __attribute__((always_inline)) inline void q6k_block(const BlockQ6K& blk, const float* xb, int64_t k,
                                V (&acc)[M][acc_count<M>()]) {
  alignas(32) int8_t lev[kQK];
  q6k_levels(blk, lev);
  // ds[v] = d * scales[v], as dequantize_block_q6k rounds it.
  alignas(64) float ds[16];
  const __m256 d = _mm256_set1_ps(half_bits_to_float(blk.d));
  const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales));
  _mm256_store_ps(ds, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
  _mm256_store_ps(ds + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))));
#pragma GCC unroll 8
  for (int t = 0; t < 8; ++t) {
    V w[kW];
    for (int u = 0; u < kW; ++u) {
      const int e = 32 * t + u * kL;
#if IK_SIMD_BITS == 512
      const I l = _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(lev + e)));
#else
      const I l = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(lev + e)));
#endif
      w[u] = mul(splat(ds[e / 16]), to_float(l));
    }
    dot32<M>(acc, w, xb + 32 * t, k, t);
  }
}

// Rows are taken tile_rows<M>() at a time, block column by block column, so from M = 3
// on the slice of x a block column needs (M KiB) is read from L1 by the tile's 4 rows
// instead of all of x (up to 8 x K floats, more than L1) streaming in once per row.
// Fewer rows of x fit in L1 whole; there one row at a time keeps a single stream per
// thread, which prefetches best. The prefetch runs 16 block visits ahead either way
// (measured on this workplace's CPU: BENCHMARKS.md). The tile's accumulators live on
// the stack between blocks and in registers within one.
template <int M>
constexpr int tile_rows() { return M <= 2 ? 1 : 4; }

template <int M, typename Fmt, typename Block = typename Fmt::Block>
IK_TARGET inline void dots_m(const Block* rows, int64_t nrows, int64_t blocks, const float* x, int64_t k,
                             float* sums) {
  constexpr int kA = acc_count<M>(), kT = tile_rows<M>(), kAhead = 16 / kT;
  for (int64_t r0 = 0; r0 < nrows; r0 += kT) {
    const int nr = static_cast<int>(std::min<int64_t>(kT, nrows - r0));
    V tile[kT][M][kA];
    for (int r = 0; r < nr; ++r)
      for (int i = 0; i < M; ++i)
        for (int a = 0; a < kA; ++a) tile[r][i][a] = zero();
    for (int64_t b = 0; b < blocks; ++b) {
      for (int r = 0; r < nr; ++r) {
        const Block* blk = rows + (r0 + r) * blocks + b;
        prefetch(blk, kAhead);
        V acc[M][kA];
        for (int i = 0; i < M; ++i)
          for (int a = 0; a < kA; ++a) acc[i][a] = tile[r][i][a];
        Fmt::template block<M>(*blk, x + b * kQK, k, acc);
        for (int i = 0; i < M; ++i)
          for (int a = 0; a < kA; ++a) tile[r][i][a] = acc[i][a];
      }
    }
    for (int r = 0; r < nr; ++r) finish<M>(tile[r], sums + (r0 + r) * M);
  }
}

struct Q4KFmt {
  using Block = BlockQ4K;
  template <int M>
  IK_TARGET __attribute__((always_inline)) static void block(const Block& b, const float* xb, int64_t k, V (&acc)[M][acc_count<M>()]) {
    q4k_block<M>(b, xb, k, acc);
  }
};

struct Q6KFmt {
  using Block = BlockQ6K;
  template <int M>
  IK_TARGET __attribute__((always_inline)) static void block(const Block& b, const float* xb, int64_t k, V (&acc)[M][acc_count<M>()]) {
    q6k_block<M>(b, xb, k, acc);
  }
};

template <int M>
IK_TARGET void q4k_dots_m(const BlockQ4K* rows, int64_t nrows, int64_t blocks, const float* x, int64_t k,
                          float* sums) {
  dots_m<M, Q4KFmt>(rows, nrows, blocks, x, k, sums);
}

template <int M>
IK_TARGET void q6k_dots_m(const BlockQ6K* rows, int64_t nrows, int64_t blocks, const float* x, int64_t k,
                          float* sums) {
  dots_m<M, Q6KFmt>(rows, nrows, blocks, x, k, sums);
}

// sums[r * m + i] = x_i . dequantised row r, for nrows consecutive weight rows and the
// m (1..8) rows of x (fp32, row stride k).
IK_TARGET void q4k_dots(const BlockQ4K* row, int64_t nrows, int64_t blocks, const float* x, int64_t k,
                        int m, float* sums) {
  switch (m) {
    case 1: return q4k_dots_m<1>(row, nrows, blocks, x, k, sums);
    case 2: return q4k_dots_m<2>(row, nrows, blocks, x, k, sums);
    case 3: return q4k_dots_m<3>(row, nrows, blocks, x, k, sums);
    case 4: return q4k_dots_m<4>(row, nrows, blocks, x, k, sums);
    case 5: return q4k_dots_m<5>(row, nrows, blocks, x, k, sums);
    case 6: return q4k_dots_m<6>(row, nrows, blocks, x, k, sums);
    case 7: return q4k_dots_m<7>(row, nrows, blocks, x, k, sums);
    default: return q4k_dots_m<8>(row, nrows, blocks, x, k, sums);
  }
}

IK_TARGET void q6k_dots(const BlockQ6K* row, int64_t nrows, int64_t blocks, const float* x, int64_t k,
                        int m, float* sums) {
  switch (m) {
    case 1: return q6k_dots_m<1>(row, nrows, blocks, x, k, sums);
    case 2: return q6k_dots_m<2>(row, nrows, blocks, x, k, sums);
    case 3: return q6k_dots_m<3>(row, nrows, blocks, x, k, sums);
    case 4: return q6k_dots_m<4>(row, nrows, blocks, x, k, sums);
    case 5: return q6k_dots_m<5>(row, nrows, blocks, x, k, sums);
    case 6: return q6k_dots_m<6>(row, nrows, blocks, x, k, sums);
    case 7: return q6k_dots_m<7>(row, nrows, blocks, x, k, sums);
    default: return q6k_dots_m<8>(row, nrows, blocks, x, k, sums);
  }
}

}  // namespace IK_SIMD_NS

#undef IK_SIMD_NS
#undef IK_TARGET
