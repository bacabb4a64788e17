// GGUF Q4_K / Q6_K mat-vec on NVIDIA GPUs: out [m, n] = x [m, k] @ dequantize(q).T for
// m = 1..8 (decode). Torch-free; q4k_torch.cpp checks the tensors. The weight is
// dequantised in registers as it streams past and never written anywhere.
//
// Why tensor cores in a mat-vec: the levels are small integers, exact in bf16/f16, so an
// MMA can take them as they are and the sub-block factors can wait until a sub-block's
// sum is done. Each weight then costs about half an integer instruction to unpack and
// nothing per activation row: m = 8 costs what m = 1 costs. (The previous kernel did m
// fp32 FMAs per weight and was issue-bound from m = 3 on; it also read x with lanes 128
// to 512 bytes apart, 32 cache lines per load instruction, which held it to 20-44% of
// the bandwidth even at m = 1.)
//
// Fragments (mma.m16n8k16, PTX ISA): a warp owns a tile of 16 weight rows (the A
// operand) and up to 8 activation rows (B's 8 columns; columns past m repeat row m - 1,
// whose outputs are never stored). Lane (g = lane / 4, t = lane % 4) supplies rows g, g + 8
// of A and column g of B. A sub-block's dot product does not depend on the order of
// its K positions, so each MMA takes K in whatever order the lanes' bytes come in, the
// same order in A and in B:
// - Q4_K: for chunk c (qs bytes 32c..32c+31: sub-blocks 2c low nibbles, 2c+1 high),
//   lane t reads 8 bytes, 8t..8t+7, of both its rows: one 8-byte load each, every row's
//   32 bytes one whole sector. Byte pairs (8t+2i, 8t+2i+1) are bf16/f16 pairs of A, and
//   the lane's 16 bytes of x at 8t (and 32 + 8t for the high nibbles) are B's pairs as
//   they lie in memory: x is read in 16-byte loads, 4 lanes per 64 contiguous bytes.
// - Q6_K: sub-blocks are 16 weights, one MMA each; lane t reads 4 bytes at 4t of each
//   16-byte ql range and of the qh range (210-byte blocks are only 2-byte aligned, so
//   these are 4-byte words shifted into place when a block is not 4-aligned).
//
// Unpacking: a level q placed in the low mantissa bits of 128.0 (bf16 0x4300) or 1024.0
// (f16 0x6400) reads as 128 + q or 1024 + q: about one instruction per two weights
// (q4k_pairs, q6k_pairs; f16 reads Q4_K's high nibbles as 16 q, with no shift). The
// offset comes off per sub-block with the activation sum X = sum x, which the min term
// needs anyway (weight = ds q - dm, so sum w x = ds S - (offset ds + dm) X with S =
// sum (offset + q) x) and which one more MMA (A all ones) gives in the same fragment
// layout (at m = 1, tiled, two MMAs give a whole block's: q4k_xsums, q6k_xsums).
// Cancelling the offset costs ~4 (bf16) to ~7 (f16) of fp32's 24 bits, far below
// those dtypes' rounding. fp32 activations take exact levels (the offset subtracted in
// bf16, exactly) and are split into three bf16 parts, x = h + m + l to within 2^-25 |x|,
// three MMAs each: fp32-grade sums at three times the tensor work, still bandwidth-bound.
//
// Scales: each lane turns half of one row's packed 6-bit scales (Q4_K) or 8 int8 scales
// (Q6_K) into floats, and the warp trades them through 1.25 KB of shared memory per
// block, instead of every lane decoding the 16 values its two rows need (4x the work).
//
// Work split: one 16-row tile per CTA; its warps split K into contiguous ranges and meet
// in shared memory at the end (fixed order: deterministic). The launcher takes the most
// K splits (up to 8) whose grid still runs in one wave. Each warp keeps the next block's
// loads in flight while it works on the current one: in registers, or for Q4_K tiles
// that run in several waves (the vocabulary head), in shared memory through cp.async;
// tiled Q4_K with fp16 x at m <= 4 stages x with the weights (the kernel's comment says
// why). Weight loads skip L1 (read once);
// x goes through L1, where the CTA's warps and neighbouring CTAs re-read it. No atomics,
// no workspace, CUDA-graph capturable; rows past N are clamped on load and not stored.
//
// Both formats also come in our tiled layouts (ggml_blocks.h, p.tiled): a tile's 16
// blocks of one super-block are 2304 (Q4_K) or 3360 (Q6_K) contiguous bytes in the lanes'
// order, so a warp's loads of a block are 16-byte loads of 512 contiguous bytes (five for
// Q4_K, six for Q6_K, and the heads) instead of 32 or 4 bytes from each of 8 rows a row
// apart. Same MMAs, same K split, same sums. Where no K split fits one wave (the
// vocabulary head), Q4_K tiles are staged as ggml's rows are: whole tile blocks copied by
// the lanes' cp.async, 512 contiguous bytes an instruction.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "ggml_blocks.h"
#include "gpu_launchers.h"
#include "device_info.cuh"
#include "launch.cuh"
#include "ptx.cuh"
#include "vec_io.cuh"

namespace {

using inference_kernels::DType;
using inference_kernels::KQuant;
using inference_kernels::KQuantGemvParams;
using inference_kernels::cuda::cp_async16;
using inference_kernels::cuda::cp_async16_ca;
using inference_kernels::cuda::cp_async_commit;
using inference_kernels::cuda::cp_async_wait;
using inference_kernels::cuda::from_float;
using inference_kernels::cuda::ld_stream16;
using inference_kernels::cuda::ld_stream8;
using inference_kernels::cuda::mma_m16n8k16;
using inference_kernels::cuda::pdl_enter;
using inference_kernels::cuda::prefetch_l2;
using inference_kernels::cuda::smem_addr;
using inference_kernels::ggml::BlockQ4K;
using inference_kernels::ggml::BlockQ6K;
using inference_kernels::ggml::kQ4KTileBytes;
using inference_kernels::ggml::kQ4KTileHeads;
using inference_kernels::ggml::kQ6KTileBytes;
using inference_kernels::ggml::kQ6KTileD;
using inference_kernels::ggml::kQ6KTileScales;
using inference_kernels::ggml::kQK;

constexpr int kTile = 16;     // weight rows per CTA (the MMA's A rows)
constexpr int kMaxWarps = 8;  // K splits per CTA
constexpr int kScaleStride = 20;  // floats per row of the scale table: conflict-free reads

// ---- loads ---------------------------------------------------------------------------

__device__ __forceinline__ uint32_t ld_u32(const uint8_t* p) {
  return __ldg(reinterpret_cast<const unsigned int*>(p));
}

// The 4 bytes at base + off + shift / 8, where base is 4-aligned and shift is 0 or 16:
// aligned words, funnel-shifted into place when the block is 2 mod 4. The second word
// is read only when shifted, so the read never passes the range's last byte.
__device__ __forceinline__ uint32_t ld_word(const uint8_t* base, int off, uint32_t shift) {
  const uint32_t lo = ld_u32(base + off);
  return shift ? __funnelshift_r(lo, ld_u32(base + off + 4), shift) : lo;
}

__device__ __forceinline__ float half_bits_to_float(uint32_t bits) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
}

// Byte i of w (below 128) as 1024 + byte, exactly: placed in the low mantissa bits of
// f16 1024.0 (bytes i & ~1 and i | 1 share one PRMT) and converted to fp32.
__device__ __forceinline__ float f16_magic_byte(uint32_t w, int i) {
  const uint32_t pair = __byte_perm(w, 0x00640064u, i & 2 ? 0x4342u : 0x4140u);
  const __half2 h = *reinterpret_cast<const __half2*>(&pair);
  return i & 1 ? __high2float(h) : __low2float(h);
}

// ---- operand types -------------------------------------------------------------------

// How the activation dtype meets the tensor cores: the MMA input type (f16 for fp16 x,
// bf16 otherwise), the offset a level reads with (the magic bits of 128.0 in bf16 or
// 1024.0 in f16: the level sits in the low mantissa bits), and the bf16 parts x is
// split into. fp32 x takes exact levels (offset 0: see level_pair) and three parts.
template <typename T>
struct Operand {
  static constexpr bool kF16 = std::is_same_v<T, __half>;
  static constexpr bool kBf16 = !kF16;
  static constexpr int kParts = std::is_same_v<T, float> ? 3 : 1;
  static constexpr float kOffset = std::is_same_v<T, float> ? 0.0f : kF16 ? 1024.0f : 128.0f;
  static constexpr uint32_t kMagic = kF16 ? 0x64006400u : 0x43004300u;
};

// A pair of magic-offset levels as the MMA's operand: fp32 x takes them exact (offset 0).
template <typename T>
__device__ __forceinline__ uint32_t operand_pair(uint32_t a) {
  if constexpr (Operand<T>::kOffset == 0.0f) {
    // 128 + q minus 128, in bf16: exact.
    __nv_bfloat162 h = *reinterpret_cast<const __nv_bfloat162*>(&a);
    h = __hsub2(h, __floats2bfloat162_rn(128.0f, 128.0f));
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    return a;
  }
}

// Bytes 0, 1 (i = 0) or 2, 3 (i = 1) of q, levels below 128, as an A pair: one PRMT
// puts each level in a half's low byte and the magic's high byte above it.
template <typename T>
__device__ __forceinline__ uint32_t level_pair(uint32_t q, int i) {
  return operand_pair<T>(__byte_perm(q, Operand<T>::kMagic >> 8, i ? 0x4342u : 0x4140u));
}

// The levels in bits 0-5 and 16-21 of v & mask as an A pair (mask and magic in one LOP3).
template <typename T>
__device__ __forceinline__ uint32_t masked_pair(uint32_t v, uint32_t mask) {
  uint32_t a;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(a) : "r"(v), "r"(mask), "r"(Operand<T>::kMagic));
  return operand_pair<T>(a);
}

constexpr uint32_t kOnesBf16 = 0x3F803F80u, kOnesF16 = 0x3C003C00u;

// ---- activations: B-operand pairs ----------------------------------------------------

// N consecutive elements of one activation row as B pairs (element 2i in the low half
// of pair i), in each of the type's parts.
template <typename T, int N>
struct XPairs {
  uint32_t v[Operand<T>::kParts][N / 2];
};

// Three bf16 parts of an fp32 pair: x = h + m + l to within 2^-25 |x| (each residual is
// exact in fp32).
__device__ __forceinline__ void split3(float x0, float x1, uint32_t& h, uint32_t& m, uint32_t& l) {
  __nv_bfloat162 p = __floats2bfloat162_rn(x0, x1);
  h = *reinterpret_cast<uint32_t*>(&p);
  x0 -= __uint_as_float(h << 16);
  x1 -= __uint_as_float(h & 0xFFFF0000u);
  p = __floats2bfloat162_rn(x0, x1);
  m = *reinterpret_cast<uint32_t*>(&p);
  x0 -= __uint_as_float(m << 16);
  x1 -= __uint_as_float(m & 0xFFFF0000u);
  p = __floats2bfloat162_rn(x0, x1);
  l = *reinterpret_cast<uint32_t*>(&p);
}

// 8 fp16/bf16 elements as they lie in 16 bytes: B pairs 0..3.
template <typename T>
__device__ __forceinline__ XPairs<T, 8> pairs8(uint4 w) {
  XPairs<T, 8> r;
  r.v[0][0] = w.x;
  r.v[0][1] = w.y;
  r.v[0][2] = w.z;
  r.v[0][3] = w.w;
  return r;
}

// N = 4 or 8 elements at p (8- or 16-byte aligned).
template <typename T, int N>
__device__ __forceinline__ XPairs<T, N> load_x(const T* p) {
  XPairs<T, N> r;
  if constexpr (std::is_same_v<T, float>) {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      const float4 f = __ldg(reinterpret_cast<const float4*>(p) + i);
      split3(f.x, f.y, r.v[0][2 * i], r.v[1][2 * i], r.v[2][2 * i]);
      split3(f.z, f.w, r.v[0][2 * i + 1], r.v[1][2 * i + 1], r.v[2][2 * i + 1]);
    }
  } else if constexpr (N == 8) {
    r = pairs8<T>(__ldg(reinterpret_cast<const uint4*>(p)));
  } else {
    const uint2 w = __ldg(reinterpret_cast<const uint2*>(p));
    r.v[0][0] = w.x;
    r.v[0][1] = w.y;
  }
  return r;
}

// x in shared memory (the staged loop with x in its stages): the same elements, read
// with plain shared-memory loads.
template <typename T>
struct SharedX {
  const T* p;
};
template <typename T>
__device__ __forceinline__ SharedX<T> operator+(SharedX<T> s, int64_t i) {
  return {s.p + i};
}

template <typename T, int N>
__device__ __forceinline__ XPairs<T, N> load_x(SharedX<T> s) {
  static_assert(!std::is_same_v<T, float> && N == 8, "shared x: fp16/bf16, 8 elements");
  return pairs8<T>(*reinterpret_cast<const uint4*>(s.p));
}

// One k16 step of a sub-block: the level pairs of rows g and g + 8 (k 2t.. in [0], 2t +
// 8.. in [1]) against B pairs b0, b1 of every part: S += A B, X += ones B.
template <typename T, int N, bool XMMA = true>
__device__ __forceinline__ void mma_step(float (&s)[4], float (&xs)[4], const uint32_t (&ag)[2],
                                         const uint32_t (&ah)[2], const XPairs<T, N>& x, int i) {
  constexpr bool kBf16 = Operand<T>::kBf16;
  constexpr uint32_t kOnes = kBf16 ? kOnesBf16 : kOnesF16;
#pragma unroll
  for (int part = 0; part < Operand<T>::kParts; ++part) {
    mma_m16n8k16<kBf16>(s, ag[0], ah[0], ag[1], ah[1], x.v[part][2 * i], x.v[part][2 * i + 1]);
    if constexpr (XMMA)
      mma_m16n8k16<kBf16>(xs, kOnes, kOnes, kOnes, kOnes, x.v[part][2 * i], x.v[part][2 * i + 1]);
  }
}

// XSUM (m = 1): a block's eight sub-block sums X from two MMAs instead of mma_step's
// sixteen, whose B columns all hold the one activation row. Here B column j takes
// sub-block j's elements at the k positions mma_step gives them (lane (g, t): x at
// 32 g + 8 t), so with A all ones D[., j] is sub-block j's X, each element summed as
// mma_step's X MMAs sum it: the same bits (tiled XSUM equals rows without it, tested).
// Lanes t of g = 0 hold X_2t, X_2t+1 and park them in the scale table's spare columns
// 16..19 of rows 0, 1 (X_j at row j / 4, column 16 + j % 4), read after the __syncwarp.
template <typename T, typename X>
__device__ __forceinline__ void q4k_xsums(int g, int t, const X& x, float* table) {
  static_assert(Operand<T>::kParts == 1, "fp16/bf16 x");
  constexpr bool kBf16 = Operand<T>::kBf16;
  constexpr uint32_t kOnes = kBf16 ? kOnesBf16 : kOnesF16;
  const XPairs<T, 8> b = load_x<T, 8>(x + 32 * g);
  float d[4] = {};
  mma_m16n8k16<kBf16>(d, kOnes, kOnes, kOnes, kOnes, b.v[0][0], b.v[0][1]);
  mma_m16n8k16<kBf16>(d, kOnes, kOnes, kOnes, kOnes, b.v[0][2], b.v[0][3]);
  if (g == 0)
    *reinterpret_cast<float2*>(table + (t >> 1) * kScaleStride + 16 + 2 * (t & 1)) = make_float2(d[0], d[1]);
}

// acc += ds S - dc X for a finished sub-block: fragment elements 0, 1 are row g's (ds
// and dc from sc_g), 2, 3 row g + 8's. M1 (m = 1): elements 1 and 3 are activation
// column 2t + 1, never stored, so they are not summed (elements 0 and 2 keep their bits).
template <bool M1>
__device__ __forceinline__ void apply(float (&acc)[4], const float (&s)[4], const float (&xs)[4],
                                      float ds_g, float dc_g, float ds_h, float dc_h) {
  acc[0] = fmaf(ds_g, s[0], fmaf(-dc_g, xs[0], acc[0]));
  if constexpr (!M1) acc[1] = fmaf(ds_g, s[1], fmaf(-dc_g, xs[1], acc[1]));
  acc[2] = fmaf(ds_h, s[2], fmaf(-dc_h, xs[2], acc[2]));
  if constexpr (!M1) acc[3] = fmaf(ds_h, s[3], fmaf(-dc_h, xs[3], acc[3]));
}

// ---- where a lane reads -----------------------------------------------------------------

// Pointers at the current block of each row the lane reads, moved on a step at a time
// (constant offsets from there fold into the loads).
struct Lane {
  int lane, g, t;
  const uint8_t* row_g;  // this lane's A rows (g, g + 8), clamped to the last row
  const uint8_t* row_h;
  const uint8_t* row_s;  // the row whose scales this lane decodes: lane / 2
  __device__ __forceinline__ void advance(int64_t bytes) {
    row_g += bytes;
    row_h += bytes;
    row_s += bytes;
  }
};

// a_lane: where in a block lane t's A bytes start (row_g and row_h point there).
template <KQuant F>
__device__ __forceinline__ Lane lane_rows(const KQuantGemvParams& p, int64_t row_bytes, int a_lane) {
  Lane l;
  l.lane = threadIdx.x & 31;
  l.g = l.lane >> 2;
  l.t = l.lane & 3;
  const int64_t row0 = int64_t(blockIdx.x) * kTile;
  const auto* q = static_cast<const uint8_t*>(p.q);
  // A run-time test although the kernels know TL at compile time: `if constexpr (TL)`
  // changed the register allocation of the kernels for rows (one spilled 8 bytes).
  if (p.tiled) {
    // The tiled layouts (ggml_blocks.h): row_g at the lane's first 16 bytes (rows g and
    // g + 8 together). Q4_K: row_s at the head of row lane / 2. Q6_K: row_s at half
    // lane % 2 of that row's scales, row_h at its d. Tile blocks are kQ4KTileBytes or
    // kQ6KTileBytes apart.
    constexpr bool q4 = F == KQuant::kQ4K;
    const uint8_t* tile = q + int64_t(blockIdx.x) * (p.k / kQK) * (q4 ? kQ4KTileBytes : kQ6KTileBytes);
    l.row_g = tile + 16 * l.lane;
    l.row_h = q4 ? l.row_g : tile + kQ6KTileD + 2 * (l.lane >> 1);
    l.row_s = q4 ? tile + kQ4KTileHeads + 16 * (l.lane >> 1) : tile + kQ6KTileScales + 8 * l.lane;
    return l;
  }
  const auto row = [&](int64_t r) { return q + std::min(r, p.n - 1) * row_bytes; };
  l.row_g = row(row0 + l.g) + a_lane;
  l.row_h = row(row0 + l.g + 8) + a_lane;
  l.row_s = row(row0 + (l.lane >> 1));
  return l;
}

// ---- Q4_K ------------------------------------------------------------------------------

// A block's bytes for this lane, loaded straight into registers (the direct path).
struct Q4KRaw {
  uint2 wg[4], wh[4];  // qs bytes 32c + 8t .. + 7 of rows g and g + 8, chunk c
  uint4 head;          // row lane / 2: d, dmin, scales
};

__device__ __forceinline__ Q4KRaw q4k_load(const Lane& l) {
  Q4KRaw r;
  r.head = ld_stream16(l.row_s);
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    r.wg[c] = ld_stream8(l.row_g + 32 * c);  // row_g: qs + 8t
    r.wh[c] = ld_stream8(l.row_h + 32 * c);
  }
  return r;
}

// A lane's 16 bytes of a tiled block: one 16-byte load (512 contiguous bytes a warp),
// or HALVES: two 8-byte ones, which keeps the fp16 loops' registers free of 16-byte load
// quads (with them ptxas 13.0 spills 8 bytes). SMEM: p is in a stage (shared memory).
template <bool HALVES, bool SMEM = false>
__device__ __forceinline__ uint4 ld_tiled16(const uint8_t* p) {
  if constexpr (SMEM) {
    return *reinterpret_cast<const uint4*>(p);
  } else if constexpr (HALVES) {
    const uint2 a = ld_stream8(p), b = ld_stream8(p + 8);
    return make_uint4(a.x, a.y, b.x, b.y);
  } else {
    return ld_stream16(p);
  }
}

// The same from the tiled layout (ggml_blocks.h): five 16-byte loads, each of them
// 512 contiguous bytes a warp (256 for the heads, two lanes a row). SMEM: l points
// into a stage holding the tile block.
template <bool HALVES = false, bool SMEM = false>
__device__ __forceinline__ Q4KRaw q4k_load_tiled(const Lane& l) {
  Q4KRaw r;
  r.head = SMEM ? *reinterpret_cast<const uint4*>(l.row_s) : ld_stream16(l.row_s);
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const uint4 v = ld_tiled16<HALVES, SMEM>(l.row_g + 512 * c);
    r.wg[c] = make_uint2(v.x, v.y);
    r.wh[c] = make_uint2(v.z, v.w);
  }
  return r;
}

// The staged path: blocks reach the warp through shared memory (cp.async), a stage
// holding one block of the warp's 16 rows (row r at kStageRow * r; the 160-byte stride
// puts rows g = 0..3 of a half-warp's 8-byte reads in four different 32-byte bank
// windows, so those reads and the head's 16-byte ones are conflict-free).
constexpr int kStageRow = 160;
constexpr int kStageBytes = kTile * kStageRow;

// Lanes 2r and 2r + 1 copy row r's block (9 pieces of 16 bytes: 5 and 4); src: that
// row's block (the lane's row_s). 144-byte blocks keep 16-byte alignment.
__device__ __forceinline__ void q4k_issue(const Lane& l, uint8_t* stage) {
  const int first = (l.lane & 1) * 5;
  uint8_t* dst = stage + (l.lane >> 1) * kStageRow + 16 * first;
  const uint8_t* src = l.row_s + 16 * first;
#pragma unroll
  for (int i = 0; i < 5; ++i)
    if (i < 4 || first == 0) cp_async16(dst + 16 * i, src + 16 * i);
}

// A tiled block in its stage (XS), read a chunk at a time: the lane's 16 bytes of chunk
// c at at + 512 c, its row's head at head. Fewer registers live than the whole block.
struct TiledStage {
  const uint8_t* at;
  const uint8_t* head;
};

// A block's bytes as q4k_block reads them, from registers, a stage of ggml's rows or a
// tiled stage: the head of row lane / 2, and chunk c's qs bytes 32c + 8t .. + 7 of rows
// g and g + 8.
struct Q4KQs {
  uint2 g, h;
};
__device__ __forceinline__ uint4 q4k_head(const Lane&, const Q4KRaw& r) { return r.head; }
__device__ __forceinline__ uint4 q4k_head(const Lane& l, const uint8_t* stage) {
  return *reinterpret_cast<const uint4*>(stage + (l.lane >> 1) * kStageRow);
}
__device__ __forceinline__ uint4 q4k_head(const Lane&, const TiledStage& s) {
  return *reinterpret_cast<const uint4*>(s.head);
}
__device__ __forceinline__ Q4KQs q4k_qs(const Lane&, const Q4KRaw& r, int c) { return {r.wg[c], r.wh[c]}; }
__device__ __forceinline__ Q4KQs q4k_qs(const Lane& l, const uint8_t* stage, int c) {
  const uint8_t* p = stage + l.g * kStageRow + 16 + 8 * l.t + 32 * c;
  return {*reinterpret_cast<const uint2*>(p), *reinterpret_cast<const uint2*>(p + 8 * kStageRow)};
}
__device__ __forceinline__ Q4KQs q4k_qs(const Lane&, const TiledStage& s, int c) {
  const uint4 w = *reinterpret_cast<const uint4*>(s.at + 512 * c);  // one 16-byte read
  return {make_uint2(w.x, w.y), make_uint2(w.z, w.w)};
}

// Lane pair half h = lane % 2 of row lane / 2: ds and dc = offset ds + dm of sub-blocks
// 4h..4h+3 (ggml's get_scale_min_k4, four at a time) into the row's table entry.
template <typename T>
__device__ __forceinline__ void q4k_scales(const Lane& l, const uint4& head, float* table) {
  const uint32_t s0 = head.y, s1 = head.z, s2 = head.w;
  const bool h = l.lane & 1;
  const uint32_t scw = h ? (s2 & 0x0F0F0F0Fu) | ((s0 >> 2) & 0x30303030u) : s0 & 0x3F3F3F3Fu;
  const uint32_t mnw = h ? ((s2 >> 4) & 0x0F0F0F0Fu) | ((s1 >> 2) & 0x30303030u) : s1 & 0x3F3F3F3Fu;
  const float d = half_bits_to_float(head.x), dmin = half_bits_to_float(head.x >> 16);
  // Odd sub-blocks are high nibbles, which f16 reads as 16 q (q4k_pairs).
  const float d_hi = Operand<T>::kF16 ? d * 0.0625f : d;
  float ds[4], dc[4];
  // The 6-bit values as f16 1024 + v, two to a PRMT (as level_pair places levels), each
  // read as fp32 by one conversion. f (1024 + v) - 1024 f, in one FFMA, is f v before its
  // one rounding (1024 f is exact), so ds and dmin v keep their bits (finite f: an
  // infinite d gives NaN where d v gave inf).
  const float d_lo1024 = -1024.0f * d, d_hi1024 = -1024.0f * d_hi, dm1024 = -1024.0f * dmin;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float sc = f16_magic_byte(scw, i), mn = f16_magic_byte(mnw, i);
    ds[i] = fmaf(i & 1 ? d_hi : d, sc, i & 1 ? d_hi1024 : d_lo1024);
    dc[i] = fmaf(Operand<T>::kOffset, ds[i], fmaf(dmin, mn, dm1024));
  }
  float* row = table + (l.lane >> 1) * kScaleStride + 4 * h;
  *reinterpret_cast<float4*>(row) = make_float4(ds[0], ds[1], ds[2], ds[3]);
  *reinterpret_cast<float4*>(row + 8) = make_float4(dc[0], dc[1], dc[2], dc[3]);
}

// A pairs of one qs word (bytes 0..3 at positions p..p+3): lo[i] the low nibbles of
// bytes 2i, 2i + 1, hi[i] their high nibbles.
// - f16 takes the high nibbles where they lie, as 16 q (1024 + 16 q is exact in f16; the
//   sub-block's factors are divided by 16 in q4k_scales): two masks a word, then one
//   PRMT a pair (6 instructions a word).
// - bf16's 7-bit mantissa has no room for 16 q. Masking the word first would cost 7
//   instructions a word against 8, but with ptxas 13.0 the direct loop then spills, so
//   a PRMT spreads two bytes and one LOP3 a pair masks and adds the magic.
// TW: the tiled layout's word order, bytes 0, 2, 1, 3 (ggml_blocks.h): a pair's two
// bytes are 16 bits apart, so a LOP3 masks and adds the magic at once, and a shift by 8
// brings the second pair there: 5 instructions a word with f16 (one shift, four LOP3), 7
// with bf16 (three shifts). With the f16-magic scales (q4k_scales), H200 at m = 1, fifty-
// first session: fp16 11.83 against 12.09 us at 14336 x 4096, 11.84 against 11.97 at
// 4096 x 14336; bf16 within noise but for the head (82.7 against 88.9 us).
template <typename T, bool TW = false>
__device__ __forceinline__ void q4k_pairs(uint32_t v, uint32_t (&lo)[2], uint32_t (&hi)[2]) {
  if constexpr (TW) {
    const uint32_t v8 = v >> 8;
    lo[0] = masked_pair<T>(v, 0x000F000Fu);
    lo[1] = masked_pair<T>(v8, 0x000F000Fu);
    if constexpr (Operand<T>::kF16) {
      hi[0] = masked_pair<T>(v, 0x00F000F0u);
      hi[1] = masked_pair<T>(v8, 0x00F000F0u);
    } else {
      hi[0] = masked_pair<T>(v >> 4, 0x000F000Fu);
      hi[1] = masked_pair<T>(v >> 12, 0x000F000Fu);
    }
  } else if constexpr (Operand<T>::kF16) {
    const uint32_t l = v & 0x0F0F0F0Fu, h = v & 0xF0F0F0F0u;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      lo[i] = level_pair<T>(l, i);
      hi[i] = level_pair<T>(h, i);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint32_t b = __byte_perm(v, 0u, i ? 0x4342u : 0x4140u);  // bytes 2i, 2i+1 -> 0, 2
      lo[i] = masked_pair<T>(b, 0x000F000Fu);
      hi[i] = masked_pair<T>(b >> 4, 0x000F000Fu);
    }
  }
}

// Chunk c of a block: sub-blocks 2c (low nibbles, B pairs xl: x at 64c + 8t) and 2c + 1
// (high, xh: x at 64c + 32 + 8t), rows g (wg) and g + 8 (wh).
template <typename T, bool M1, bool XSUM = false, bool TW = false>
__device__ __forceinline__ void q4k_chunk(const Lane& l, uint2 wg, uint2 wh, const XPairs<T, 8>& xl,
                                          const XPairs<T, 8>& xh, const float* table, int c,
                                          float (&acc)[4]) {
  float sl[4] = {}, xsl[4] = {}, sh[4] = {}, xsh[4] = {};
#pragma unroll
  for (int w = 0; w < 2; ++w) {  // bytes 8t + 4w .. + 3: B pairs 2w, 2w + 1
    uint32_t gl[2], gh[2], hl[2], hh[2];
    q4k_pairs<T, TW>(w ? wg.y : wg.x, gl, gh);
    q4k_pairs<T, TW>(w ? wh.y : wh.x, hl, hh);
    mma_step<T, 8, !XSUM>(sl, xsl, gl, hl, xl, w);
    mma_step<T, 8, !XSUM>(sh, xsh, gh, hh, xh, w);
  }
  if constexpr (XSUM) {
    static_assert(M1, "XSUM: m = 1");
    const float2 xs = *reinterpret_cast<const float2*>(table + (c >> 1) * kScaleStride + 16 + 2 * (c & 1));
    xsl[0] = xsl[2] = xs.x;
    xsh[0] = xsh[2] = xs.y;
  }
  const float2 dsg = *reinterpret_cast<const float2*>(table + l.g * kScaleStride + 2 * c);
  const float2 dcg = *reinterpret_cast<const float2*>(table + l.g * kScaleStride + 8 + 2 * c);
  const float2 dsh = *reinterpret_cast<const float2*>(table + (l.g + 8) * kScaleStride + 2 * c);
  const float2 dch = *reinterpret_cast<const float2*>(table + (l.g + 8) * kScaleStride + 8 + 2 * c);
  apply<M1>(acc, sl, xsl, dsg.x, dcg.x, dsh.x, dch.x);
  apply<M1>(acc, sh, xsh, dsg.y, dcg.y, dsh.y, dch.y);
}

// One block (its scales already in the table). U: chunks unrolled (a staged block
// can be read a chunk at a time; registers hold all of it anyway).
template <typename T, int U, bool M1, bool XSUM, bool TW, typename Src, typename X>
__device__ __forceinline__ void q4k_block(const Lane& l, const Src& src, const float* table,
                                          const X& x, float (&acc)[4]) {
#pragma unroll U
  for (int c = 0; c < 4; ++c) {
    const Q4KQs w = q4k_qs(l, src, c);
    q4k_chunk<T, M1, XSUM, TW>(l, w.g, w.h, load_x<T, 8>(x + 64 * c), load_x<T, 8>(x + 64 * c + 32), table, c, acc);
  }
}

// The same block with the x of its first A chunks already
// in registers (xa, loaded a block earlier); each of those chunks' x pairs is replaced
// by the next block's (at xn: the same block again after the warp's last, a harmless
// re-read) right after use, so the first MMA no longer waits on x issued ~150
// instructions before it. Chunks A.. load their x at the block's start, as q4k_block
// does. The launcher uses A = 1 for bf16 x (see there); all 4 chunks ahead spills 36
// bytes at 128 registers (ptxas 13.0). Same MMAs and sums in the same order: the same
// results as q4k_block, bit for bit (measured on the H200 before it became the default).
template <typename T, int A, bool M1, bool XSUM, bool TW>
__device__ __forceinline__ void q4k_block_xahead(const Lane& l, const Q4KRaw& r, const float* table,
                                                 XPairs<T, 8> (&xa)[2 * A], const T* x, const T* xn,
                                                 float (&acc)[4]) {
  XPairs<T, 8> xr[A < 4 ? 8 - 2 * A : 1];
#pragma unroll
  for (int c = A; c < 4; ++c) {
    xr[2 * (c - A)] = load_x<T, 8>(x + 64 * c);
    xr[2 * (c - A) + 1] = load_x<T, 8>(x + 64 * c + 32);
  }
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    if (c < A) {
      q4k_chunk<T, M1, XSUM, TW>(l, r.wg[c], r.wh[c], xa[2 * c], xa[2 * c + 1], table, c, acc);
      xa[2 * c] = load_x<T, 8>(xn + 64 * c);
      xa[2 * c + 1] = load_x<T, 8>(xn + 64 * c + 32);
    } else {
      q4k_chunk<T, M1, XSUM, TW>(l, r.wg[c], r.wh[c], xr[2 * (c - A)], xr[2 * (c - A) + 1], table, c, acc);
    }
  }
}

// ---- Q6_K ------------------------------------------------------------------------------

// Lane t's words of a block row: for half n (128 weights) and h (which 16 of each 32),
// ql[n][h][s] holds ql bytes 64n + 32s + 16h + 4t.. (levels' low 4 bits: nibble 0 for
// j = s, nibble 1 for j = s + 2) and qh[n][h] qh bytes 32n + 16h + 4t.. (bits 2j, 2j + 1
// for each j): 16 sub-blocks (n, j, h) of 4 levels each, sub-block 8n + 2j + h.
struct Q6KRow {
  uint32_t ql[2][2][2], qh[2][2];
};

struct Q6KRaw {
  Q6KRow g, h;
  uint32_t sc[2];  // row lane / 2: scales 8n .. 8n + 7, n = lane % 2
  uint32_t d;      // its fp16 d
};

// A block's 4-aligned base and the shift that puts its bytes in place (ld_word).
__device__ __forceinline__ const uint8_t* q6k_base(const uint8_t* block, uint32_t& shift) {
  const auto a = reinterpret_cast<uintptr_t>(block);
  shift = static_cast<uint32_t>(a & 2) * 8;
  return reinterpret_cast<const uint8_t*>(a & ~uintptr_t(3));
}

// at: the block's byte 4t (4t from a block start keeps its alignment mod 4).
__device__ __forceinline__ Q6KRow q6k_row(const uint8_t* at4t) {
  uint32_t shift;
  const uint8_t* base = q6k_base(at4t, shift);
  Q6KRow r;
#pragma unroll
  for (int n = 0; n < 2; ++n) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int at = 16 * h;
      r.ql[n][h][0] = ld_word(base, 64 * n + at, shift);
      r.ql[n][h][1] = ld_word(base, 64 * n + 32 + at, shift);
      r.qh[n][h] = ld_word(base, 128 + 32 * n + at, shift);
    }
  }
  return r;
}

__device__ __forceinline__ Q6KRaw q6k_load(const Lane& l) {
  Q6KRaw r;
  r.g = q6k_row(l.row_g);  // row_g: the block's byte 4t
  r.h = q6k_row(l.row_h);
  const uint8_t* s = l.row_s;
  uint32_t shift;
  const uint8_t* base = q6k_base(s, shift);
  const int n = l.lane & 1;
  r.sc[0] = ld_word(base, 192 + 8 * n, shift);
  r.sc[1] = ld_word(base, 196 + 8 * n, shift);
  r.d = __ldg(reinterpret_cast<const unsigned short*>(s + 208));
  return r;
}

// The same from Q6_K's tiled layout (ggml_blocks.h): six 16-byte loads of 512 contiguous
// bytes a warp, then the scales (8 bytes) and d.
template <bool HALVES = false>
__device__ __forceinline__ Q6KRaw q6k_load_tiled(const Lane& l) {
  uint32_t w[24];
#pragma unroll
  for (int j = 0; j < 6; ++j) {
    const uint4 v = ld_tiled16<HALVES>(l.row_g + 512 * j);
    w[4 * j] = v.x, w[4 * j + 1] = v.y, w[4 * j + 2] = v.z, w[4 * j + 3] = v.w;
  }
  Q6KRaw r;
#pragma unroll
  for (int R = 0; R < 2; ++R) {
    Q6KRow& row = R ? r.h : r.g;
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int at = 12 * R + 6 * n + 3 * h;
        row.ql[n][h][0] = w[at];
        row.ql[n][h][1] = w[at + 1];
        row.qh[n][h] = w[at + 2];
      }
    }
  }
  const uint2 sc = ld_stream8(l.row_s);
  r.sc[0] = sc.x;
  r.sc[1] = sc.y;
  r.d = __ldg(reinterpret_cast<const unsigned short*>(l.row_h));
  return r;
}

// Row lane / 2, half n = lane % 2: d * scales[8n + e] for e = 2j + h at table column
// 8n + 4h + j, so that a lane reads one (n, h)'s four j as one float4.
__device__ __forceinline__ void q6k_scales(const Lane& l, const Q6KRaw& r, float* table) {
  const float d = half_bits_to_float(r.d);
  float ds[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    // int8 byte as a float, exactly: 2^23 + (byte ^ 0x80), minus 2^23 + 128.
    const uint32_t w = r.sc[e / 4] ^ 0x80808080u;
    ds[e] = d * (__uint_as_float(__byte_perm(w, 0x4B000000u, 0x7440u | (e % 4))) - 8388736.0f);
  }
  float* row = table + (l.lane >> 1) * kScaleStride + 8 * (l.lane & 1);
  *reinterpret_cast<float4*>(row) = make_float4(ds[0], ds[2], ds[4], ds[6]);
  *reinterpret_cast<float4*>(row + 4) = make_float4(ds[1], ds[3], ds[5], ds[7]);
}

// Levels of sub-block (n, j, h) of one row as A pairs (positions 4t, 4t + 1 and 4t + 2,
// 4t + 3).
template <typename T>
__device__ __forceinline__ void q6k_pairs(const Q6KRow& r, int n, int j, int h, uint32_t (&a)[2]) {
  const uint32_t lo = (r.ql[n][h][j & 1] >> (4 * (j >> 1))) & 0x0F0F0F0Fu;
  const uint32_t q = lo | (((r.qh[n][h] >> (2 * j)) << 4) & 0x30303030u);
  a[0] = level_pair<T>(q, 0);
  a[1] = level_pair<T>(q, 1);
}

// Q6_K's sixteen sub-block sums (m = 1) from two MMAs instead of mma_step's sixteen,
// as q4k_xsums does it: sub-block e = 8 n + 2 j + h holds x at 16 e, lane t's four at
// 4 t (q6k_block's k positions); MMA i takes e = 8 i + g in B column g. Lanes t of g = 0
// hold X for (n, j, h) = (i, t, 0) and (i, t, 1), parked where the scale table holds
// that sub-block's factor, shifted to the spare columns: row 2 n + h, column 16 + j, so
// that q6k_block reads an (n, h)'s four as one float4.
template <typename T>
__device__ __forceinline__ void q6k_xsums(int g, int t, const T* x, float* table) {
  static_assert(Operand<T>::kParts == 1, "fp16/bf16 x");
  constexpr bool kBf16 = Operand<T>::kBf16;
  constexpr uint32_t kOnes = kBf16 ? kOnesBf16 : kOnesF16;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const XPairs<T, 4> b = load_x<T, 4>(x + 16 * (8 * i + g));
    float d[4] = {};
    mma_m16n8k16<kBf16>(d, kOnes, kOnes, kOnes, kOnes, b.v[0][0], b.v[0][1]);
    if (g == 0) {
      table[(2 * i) * kScaleStride + 16 + t] = d[0];
      table[(2 * i + 1) * kScaleStride + 16 + t] = d[1];
    }
  }
}

template <typename T, bool M1, bool XSUM = false>
__device__ __forceinline__ void q6k_block(const Lane& l, const Q6KRaw& r, const float* table,
                                          const T* x, float (&acc)[4]) {
  // weight = ds (q - 32): sum w x = ds (S - (offset + 32) X).
  constexpr float kShift = Operand<T>::kOffset + 32.0f;
#pragma unroll
  for (int n = 0; n < 2; ++n) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float4 dg = *reinterpret_cast<const float4*>(table + l.g * kScaleStride + 8 * n + 4 * h);
      const float4 dh =
          *reinterpret_cast<const float4*>(table + (l.g + 8) * kScaleStride + 8 * n + 4 * h);
      const float fg[4] = {dg.x, dg.y, dg.z, dg.w}, fh[4] = {dh.x, dh.y, dh.z, dh.w};
      [[maybe_unused]] float4 xsum;
      if constexpr (XSUM) xsum = *reinterpret_cast<const float4*>(table + (2 * n + h) * kScaleStride + 16);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const XPairs<T, 4> xv = load_x<T, 4>(x + 128 * n + 32 * j + 16 * h);
        uint32_t ag[2], ah[2];
        q6k_pairs<T>(r.g, n, j, h, ag);
        q6k_pairs<T>(r.h, n, j, h, ah);
        float s[4] = {}, xs[4] = {};
        mma_step<T, 4, !XSUM>(s, xs, ag, ah, xv, 0);
        if constexpr (XSUM) xs[0] = xs[1] = xs[2] = xs[3] = j == 0 ? xsum.x : j == 1 ? xsum.y : j == 2 ? xsum.z : xsum.w;
        apply<M1>(acc, s, xs, fg[j], kShift * fg[j], fh[j], kShift * fh[j]);
      }
    }
  }
}

// ---- the kernel ------------------------------------------------------------------------

// Shared memory a warp uses: Q4_K's stages, then the scale table. The partial sums of
// the end (kPartialBytes) reuse the start once the warp's blocks are done.
// A stage holds one block of the warp's 16 rows: rows kStageRow apart (ggml's rows), or
// the tile block as it is (tiled). XS (x in the stages) adds, after the S tile blocks,
// S x slots of m rows kXRow bytes apart: a block's 256 elements of each row (512
// bytes), padded so that a quarter warp's 16-byte reads of rows g and g + 1 fall in
// different bank halves.
constexpr int kTableBytes = kTile * kScaleStride * 4;
constexpr int kPartialBytes = 4 * 32 * 4;
constexpr int kXRow = 2 * kQK + 64;
template <int S, bool TL>
constexpr int kWarpSmem = (S > 0 ? S * (TL ? kQ4KTileBytes : kStageBytes) : kPartialBytes) + kTableBytes;
template <int S, bool TL, bool XS>
__host__ __device__ constexpr int64_t warp_smem(int64_t m) {
  return kWarpSmem<S, TL> + (XS ? S * m * kXRow : 0);
}

// One block: its scales into the warp's table, then its MMAs. Src: the block's bytes
// (Q4KRaw, Q6KRaw: registers; const uint8_t*: a Q4_K stage).
template <typename T, KQuant F, int U, bool M1, bool XSUM, bool TW, typename Src, typename X>
__device__ __forceinline__ void compute(const Lane& l, const Src& src, float* table, const X& x,
                                        float (&acc)[4]) {
  if constexpr (F == KQuant::kQ4K) {
    q4k_scales<T>(l, q4k_head(l, src), table);
    if constexpr (XSUM) q4k_xsums<T>(l.g, l.t, x, table);
  } else {
    q6k_scales(l, src, table);
    if constexpr (XSUM) q6k_xsums<T>(l.g, l.t, x, table);
  }
  __syncwarp();
  if constexpr (F == KQuant::kQ4K) {
    q4k_block<T, U, M1, XSUM, TW>(l, src, table, x, acc);
  } else {
    q6k_block<T, M1, XSUM>(l, src, table, x, acc);
  }
  __syncwarp();  // the table (and Q4_K's stage) is rewritten for a later block
}

// A block at a time, two ways (the launcher picks, BENCHMARKS.md has the numbers):
// - direct (S = 0): the next block's loads go to registers before this block's
//   arithmetic. Best when each warp streams a few blocks (one wave of K-split tiles).
//   S = -A (Q4_K, bf16 x): the same, with the x of the first A chunks also loaded a
//   block ahead (q4k_block_xahead).
// - staged (S >= 2, Q4_K only): S - 1 blocks ahead in shared memory through cp.async,
//   which holds no registers in flight. Best when each warp streams a whole row range
//   (the 128256-row head: 146 us against 197 us). Q6_K's 210-byte blocks are only
//   2-byte aligned: no 16-byte copies, so Q6_K is direct only. Tiled Q4_K (TL) is
//   staged S blocks ahead instead: a block is read into registers at once, freeing its
//   stage for the copy of block i + S before its arithmetic (H200, the head: 92 against
//   97 us with bf16 x, 90 against 97 with fp16; BENCHMARKS.md, sixteenth session). The
//   same loop was slower than the direct one where a K split fits one wave (15.3
//   against 14.1 us at 14336 x 4096), as were 3 stages, and the copy engine's bulk
//   copies (cp.async.bulk) at 2-4 stages.
// - staged with x in the stages (XS, tiled Q4_K, fp16/bf16 x): each block's x (m rows)
//   is copied with its tile block, by cp.async through L1 (the tiles sharing an SM read
//   the same x), and both are read from the stage a chunk at a time (TiledStage: fewer
//   registers live than the whole block); the stage is refilled after the block's
//   arithmetic. The loop then has no global load into registers, whose scoreboards
//   ptxas shares with the weights' (BENCHMARKS.md, seventeenth session). With fp16 x
//   where a K split fits one wave, 6-10% faster than the direct loop at m = 1, 2 (H200,
//   14336 x 4096, m = 1: 13.61 against 14.74 us in the experiment's A/B, 13.8-13.9 as
//   landed; nineteenth session); with bf16 x slower than the x-ahead loop (14.41
//   against 14.08), so unused there. With the m = 1 kernel's leaner start and end it
//   was 5% faster alone at two warps a tile (12.9 against 13.6 us at 14336 x 4096), but
//   a decode layer's chain of kernels took 1.4 us longer with it (66.7-67.0 against
//   65.2-65.8 us; thirty-first session), so bf16 x keeps the x-ahead loop. x copied
//   once a CTA instead, all K before the loop, was slower (every CTA of the wave asks
//   L2 for the same bytes at the start).
// MINB: blocks per SM asked of ptxas; U: Q4_K chunks unrolled; TL: the tiled layout
// (p.tiled); M1: m = 1 only, the fragments' second activation column (never stored) is
// not summed: a quarter fewer instructions a block in the XS loop, 7% faster at 14336 x
// 4096 with fp16 x, 2-5% with bf16 (BENCHMARKS.md, twentieth session). The direct
// loop's M1 kernels spill (ptxas 13.0), so m = 1 takes M1 in the XS and x-ahead loops.
// XSUM (M1, Q4_K, fp16/bf16 x): the sub-block sums from q4k_xsums, 14 fewer MMAs a block.
// Tiled, 14336 x 4096 at m = 1: 12.0-12.2 against 12.3-12.4 us with fp16 x (XS), 12.6
// against 13.7 with bf16 (x ahead); 14336 x 16384: 38.5 against 39.1 (fp16), 40.3-40.5
// against 45.1 (bf16). ggml's rows with bf16 x ran 3% slower with it (16.6 against 16.1
// us: one more 16-byte x load a block and lane), so they keep sixteen (H200, forty-eighth
// session, s48a). Q6_K (m = 1, tiled, the direct loop; not M1, which spills with it):
// q6k_xsums, 14 fewer MMAs a block; 1-4% faster on an H100, ggml's rows 3-4% slower
// (forty-ninth session, s49a).
template <typename T, KQuant F, int MINB, int S, int U, bool TL = false, bool XS = false, bool M1 = false,
          bool XSUM = false>
__global__ void __launch_bounds__(kMaxWarps * 32, MINB) kquant_gemv_kernel(const KQuantGemvParams p, unsigned ahead) {
  // Tile blocks of each warp into L2 while the kernel before ends: ahead & 0xffff of them from
  // its (ahead >> 16)-th (prefetch_blocks). Tiled; not in the direct loop of four blocks in
  // flight, where ptxas 13.0 then spilled 4 bytes.
  if constexpr (TL && (S != 0 || U != 4)) {
    constexpr int64_t kTB = F == KQuant::kQ4K ? kQ4KTileBytes : kQ6KTileBytes;
    // 32-bit: the launcher bounds nb by 2^28 (as the XS split below)
    const unsigned nb = unsigned(p.k / kQK), kw = blockDim.x >> 5, w = threadIdx.x >> 5;
    const unsigned b0 = w * nb / kw + (ahead >> 16), end = (w + 1) * nb / kw;
    const unsigned n = b0 < end ? min(ahead & 0xffffu, end - b0) : 0u;
    if ((threadIdx.x & 31) == 0 && n > 0)
      prefetch_l2(static_cast<const uint8_t*>(p.q) + (int64_t(blockIdx.x) * nb + b0) * kTB, n * unsigned(kTB));
  }
  pdl_enter();
  extern __shared__ __align__(16) uint8_t smem[];
  static_assert(!XS || (S > 0 && TL && F == KQuant::kQ4K && !std::is_same_v<T, float>),
                "x in the stages: staged tiled Q4_K, fp16/bf16 x");
  static_assert(!XSUM || (!std::is_same_v<T, float> &&
                          (F == KQuant::kQ4K ? M1 && (XS || S < 0) : S == 0)),
                "few-MMA sub-block sums: fp16/bf16 x, m = 1 Q4_K (the XS or x-ahead loop) or Q6_K "
                "(direct; launched at m = 1, tiled)");
  // Bytes from one of a row's blocks to the next (kRowBytes: a block's in its row).
  constexpr int64_t kRowBytes = F == KQuant::kQ4K ? sizeof(BlockQ4K) : sizeof(BlockQ6K);
  constexpr int64_t kBytes = !TL ? kRowBytes : F == KQuant::kQ4K ? kQ4KTileBytes : kQ6KTileBytes;
  const int64_t nb = p.k / kQK;
  Lane l = lane_rows<F>(p, nb * kRowBytes, F == KQuant::kQ4K ? 16 + 8 * (threadIdx.x & 3) : 4 * (threadIdx.x & 3));
  const int warp = threadIdx.x >> 5, kw = blockDim.x >> 5;
  const int wsm = int(warp_smem<S, TL, XS>(M1 ? 1 : p.m));  // M1: m is 1 (the launcher's rule)
  uint8_t* region = smem + warp * wsm;
  float* table = reinterpret_cast<float*>(region + wsm - kTableBytes);
  // Lane t's activation elements start at 8t (Q4_K) or 4t (Q6_K) of each range. B
  // columns past m read the last row again: a column only reaches its own outputs,
  // which are not stored.
  const T* x = static_cast<const T*>(p.x) + std::min<int64_t>(l.g, p.m - 1) * p.x_stride +
               (F == KQuant::kQ4K ? 8 : 4) * l.t;

  float acc[4] = {};
  // The warp's K range. XS divides in 32-bit unsigned arithmetic (the launcher bounds nb
  // by 2^28, so (warp + 1) nb < 2^32): the 64-bit divisions cost ~80 instructions a warp,
  // 3% of its work at 14336 x 4096. (The other loops keep them: with 32 bits ptxas 13.0
  // spills 4-12 bytes in two of them.)
  const auto split = [&](int w) -> int64_t {
    if constexpr (XS) return unsigned(w) * unsigned(nb) / unsigned(kw);
    return w * nb / kw;
  };
  int64_t b = split(warp);
  const int64_t end = split(warp + 1);
  l.advance(b * kBytes);
  x += b * kQK;
  if constexpr (S > 0 && TL) {
    static_assert(F == KQuant::kQ4K, "only Q4_K blocks are staged");
    // One commit group a block (empty past the end): S groups in flight at the wait,
    // which leaves S - 1, so block i has landed.
    const uint8_t* const src = l.row_g - 16 * l.lane;  // the first tile block's start
    // Blocks are copied in order, from pointers moved a block at a time: lane j copies
    // pieces j, j + 32, ... (16 bytes each) of the tile block and, XS, x elements
    // 8j..8j+7 of each of the block's m rows into the stage's x slot.
    const uint8_t* wsrc = src + 16 * l.lane;
    [[maybe_unused]] const T* xsrc = static_cast<const T*>(p.x) + b * kQK + 8 * l.lane;
    [[maybe_unused]] uint8_t* const xslots = region + S * kQ4KTileBytes;
    const uint32_t lane_stage = smem_addr(region) + 16 * l.lane;
    const auto issue = [&](int si) {  // the next block into stage si
      const uint32_t dst = lane_stage + si * kQ4KTileBytes;
      constexpr int kWhole = kQ4KTileBytes / 512;  // 4 pieces every lane, then 16 lanes one more
#pragma unroll
      for (int j = 0; j < kWhole; ++j) cp_async16(dst + 512 * j, wsrc + 512 * j);
      if (l.lane < kQ4KTileBytes % 512 / 16) cp_async16(dst + 512 * kWhole, wsrc + 512 * kWhole);
      wsrc += kBytes;
      if constexpr (XS) {
        const uint32_t slot = smem_addr(xslots) + si * (M1 ? 1 : int(p.m)) * kXRow + 16 * l.lane;
        if constexpr (M1) {
          cp_async16_ca(slot, xsrc);
        } else {
          const T* xr = xsrc;
          for (int r = 0; r < p.m; ++r, xr += p.x_stride) cp_async16_ca(slot + r * kXRow, xr);
        }
        xsrc += kQK;
      }
    };
    const int n = int(end - b);
#pragma unroll
    for (int s = 0; s < S; ++s) {
      if (s < n) issue(s);
      cp_async_commit();
    }
    const int head = int(l.row_s - src);  // the lane's head within a tile block
    int s = 0;
    for (int i = 0; i < n; ++i) {
      uint8_t* const stage = region + s * kQ4KTileBytes;
      cp_async_wait<S - 1>();
      __syncwarp();  // every lane's pieces of block i visible to the warp
      if constexpr (XS) {
        // The block is read from the stage a chunk at a time, x too, during the
        // arithmetic, so the refill waits for it (compute ends with __syncwarp).
        const uint8_t* const xrow =
            xslots + (M1 ? s : s * p.m + std::min<int64_t>(l.g, p.m - 1)) * kXRow;
        compute<T, F, U, M1, XSUM, TL>(l, TiledStage{stage + 16 * l.lane, stage + head}, table,
                                   SharedX<T>{reinterpret_cast<const T*>(xrow) + 8 * l.t}, acc);
        if (i + S < n) issue(s);
        cp_async_commit();
      } else {
        Lane at = l;  // the lane's bytes in the stage
        at.row_g = at.row_h = stage + 16 * l.lane;
        at.row_s = stage + head;
        const Q4KRaw cur = q4k_load_tiled<std::is_same_v<T, __half>, true>(at);
        __syncwarp();  // every lane has read the stage: refill it
        if (i + S < n) issue(s);
        cp_async_commit();
        compute<T, F, U, M1, XSUM, TL>(l, cur, table, x, acc);
      }
      x += kQK;
      s = s + 1 == S ? 0 : s + 1;
    }
  } else if constexpr (S > 0) {
    static_assert(F == KQuant::kQ4K, "only Q4_K blocks can be staged");
    const int n = int(end - b);
    // One commit per block, empty past the end, so the wait below always leaves the
    // newest S - 1 groups in flight and has block i's bytes in place.
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
      if (s < n) {
        q4k_issue(l, region + s * kStageBytes);
        l.advance(kBytes);
      }
      cp_async_commit();
    }
    // Rolling stage pointers (no modulo in the loop): block i is read from rd, block
    // i + S - 1 written to wr.
    uint8_t* const last = region + (S - 1) * kStageBytes;
    const uint8_t* rd = region;
    uint8_t* wr = last;
    for (int i = 0; i < n; ++i) {
      if (i + S - 1 < n) {
        q4k_issue(l, wr);
        l.advance(kBytes);
      }
      wr = wr == last ? region : wr + kStageBytes;
      cp_async_commit();
      cp_async_wait<S - 1>();
      __syncwarp();  // every lane's copies of block i visible to the warp
      compute<T, F, U, M1, XSUM, TL>(l, rd, table, x, acc);  // ends with __syncwarp: the stage is free
      rd = rd == last ? region : rd + kStageBytes;
      x += kQK;
    }
  } else if constexpr (S < 0) {
    static_assert(F == KQuant::kQ4K && std::is_same_v<T, __nv_bfloat16>, "x ahead: Q4_K, bf16 x");
    if (b < end) {
      // compute()'s steps with x of the first A = -S chunks a block ahead.
      constexpr int A = -S;
      XPairs<T, 8> xa[2 * A];
      Q4KRaw cur = TL ? q4k_load_tiled(l) : q4k_load(l);
#pragma unroll
      for (int c = 0; c < A; ++c) {
        xa[2 * c] = load_x<T, 8>(x + 64 * c);
        xa[2 * c + 1] = load_x<T, 8>(x + 64 * c + 32);
      }
      for (;;) {
        l.advance(kBytes);
        const bool more = ++b < end;
        Q4KRaw next;
        if (more) next = TL ? q4k_load_tiled(l) : q4k_load(l);
        q4k_scales<T>(l, cur.head, table);
        if constexpr (XSUM) q4k_xsums<T>(l.g, l.t, x, table);
        __syncwarp();
        q4k_block_xahead<T, A, M1, XSUM, TL>(l, cur, table, xa, x, more ? x + kQK : x, acc);
        __syncwarp();
        x += kQK;
        if (!more) break;
        cur = next;
      }
    }
  } else if (b < end) {
    using Raw = std::conditional_t<F == KQuant::kQ4K, Q4KRaw, Q6KRaw>;
    const auto load = [](const Lane& l) {
      if constexpr (F == KQuant::kQ4K) {
        return TL ? q4k_load_tiled<std::is_same_v<T, __half>>(l) : q4k_load(l);
      } else {
        return TL ? q6k_load_tiled<std::is_same_v<T, __half>>(l) : q6k_load(l);
      }
    };
    Raw cur = load(l);
    for (;;) {
      l.advance(kBytes);
      const bool more = ++b < end;
      Raw next;
      if (more) next = load(l);
      compute<T, F, U, M1, XSUM, TL>(l, cur, table, x, acc);
      x += kQK;
      if (!more) break;
      cur = next;
    }
  }

  float* partial = reinterpret_cast<float*>(region);
  if constexpr (M1 && XS) {
    // m = 1: the stored sums are elements 0 and 2 of the lanes of activation column 0
    // (t = 0), rows g and g + 8; the warps' partials are added in the same order as
    // below (the same bits), by 16 threads and without the general loop's tests. (The
    // x-ahead loop's m = 1 kernels spill with this ending: ptxas 13.0.)
    if (l.t == 0) {
      partial[l.g] = acc[0];
      partial[l.g + 8] = acc[2];
    }
    __syncthreads();
    if (threadIdx.x < kTile) {
      const int64_t row = int64_t(blockIdx.x) * kTile + threadIdx.x;
      float sum = 0.0f;
      for (int w = 0; w < kw; ++w) sum += reinterpret_cast<const float*>(smem + w * wsm)[threadIdx.x];
      if (row < p.n) static_cast<T*>(p.out)[row] = from_float<T>(sum);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) partial[i * 32 + l.lane] = acc[i];
    __syncthreads();
    // Element (register i, lane j) of the tile: row (j / 4) + 8 (i / 2), activation row
    // 2 (j % 4) + i % 2, summed over the warps in a fixed order.
    const int64_t row0 = int64_t(blockIdx.x) * kTile;
    for (int e = threadIdx.x; e < 4 * 32; e += blockDim.x) {
      const int i = e / 32, j = e % 32;
      const int64_t row = row0 + j / 4 + 8 * (i / 2);
      const int64_t m = 2 * (j % 4) + i % 2;
      if (row >= p.n || m >= p.m) continue;
      float sum = 0.0f;
      for (int w = 0; w < kw; ++w) sum += reinterpret_cast<const float*>(smem + w * wsm)[i * 32 + j];
      static_cast<T*>(p.out)[m * p.n + row] = from_float<T>(sum);
    }
  }
}

// Tile blocks each warp prefetches into L2 before it waits for the kernel before: 1, or
// IK_KQ_PREFETCH (read once per process, off the launch path; A/B runs use one process each). One is the best of
// 0-4 in the Q4_K decode layer (H100, fifty-seventh session: fp16 x 65.5-65.7 us against
// 67.1-67.2 with none and 67.95-67.99 with two; bf16 64.0-64.2 against 65.8-66.0 and
// 66.5-66.6). Two gain more one gemv after another but cost the layer: a prefetch issued
// behind a short kernel (a norm) slows it, and one not overlapped (no dependent launch)
// costs fp16 x 0.55-0.75 us at 14336 x 4096. IK_KQ_PREFETCH=N@F (an experiment) prefetches
// N blocks from each warp's F-th, e.g. past the blocks its stages load first.
inline unsigned prefetch_blocks() {
  static const unsigned blocks = [] {
    const char* v = std::getenv("IK_KQ_PREFETCH");
    if (!v || !*v) return 1u;
    char* end = nullptr;
    const unsigned n = unsigned(std::strtoul(v, &end, 10)) & 0xffffu;
    const unsigned from = end && *end == '@' ? unsigned(std::strtoul(end + 1, nullptr, 10)) & 0xffffu : 0u;
    return from << 16 | n;
  }();
  return blocks;
}

// Warps per tile (K splits): the most, up to 8 and one block each, whose grid still
// fits on the GPU at once. A second, partial wave would run alone at the end: with
// kw = 3 at 14336 x 4096 (896 tiles, 5 blocks of 3 warps per SM by registers) it took
// 1.36 waves and Nsight Compute put the tail at up to half the time. Huge N (the
// 128256-row head) runs in waves at kw = 1 anyway. 1 when no split fits.
template <typename T, KQuant F, int MINB, int S, int U, bool TL = false, bool XS = false, bool M1 = false,
          bool XSUM = false>
struct Shape {
  static constexpr auto kernel = kquant_gemv_kernel<T, F, MINB, S, U, TL, XS, M1, XSUM>;

  static int warps(const KQuantGemvParams& p) {
    static int resident[kMaxWarps + 1] = {};  // blocks of kw warps per SM, asked once
    const int64_t tiles = (p.n + kTile - 1) / kTile, nb = p.k / kQK;
    const int64_t sms = inference_kernels::cuda::sm_count();
    for (int w = int(std::min<int64_t>(kMaxWarps, nb)); w > 1; --w) {
      if (!resident[w] &&
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident[w], kernel, w * 32, w * kWarpSmem<S, TL>) !=
              cudaSuccess)
        resident[w] = 1;
      if (tiles <= sms * std::max(resident[w], 1)) return w;
    }
    return 1;
  }

  // XS: its x slots take m rows a stage; the kernel may use what the device allows.
  static cudaError_t allow_smem() {
    if constexpr (XS) {
      const int optin = inference_kernels::cuda::device_attribute_once<cudaDevAttrMaxSharedMemoryPerBlockOptin>();
      return inference_kernels::cuda::max_dynamic_smem_once<kernel>(std::max(optin, 48 * 1024));
    } else if constexpr (kMaxWarps * kWarpSmem<S, TL> > 48 * 1024) {
      return inference_kernels::cuda::max_dynamic_smem_once<kernel>(kMaxWarps * kWarpSmem<S, TL>);
    }
    return cudaSuccess;
  }

  // Whether kw warps a tile fit the whole grid in one wave (XS's choice: see launch).
  static bool one_wave(const KQuantGemvParams& p, int kw) {
    static int resident[9][kMaxWarps + 1] = {};  // [m][kw]: blocks per SM, asked once
    int& r = resident[p.m][kw];
    if (!r && (allow_smem() != cudaSuccess ||
               cudaOccupancyMaxActiveBlocksPerMultiprocessor(&r, kernel, kw * 32, kw * warp_smem<S, TL, XS>(p.m)) !=
                   cudaSuccess)) {
      (void)cudaGetLastError();
      r = -1;
    }
    return r > 0 && (p.n + kTile - 1) / kTile <= int64_t(r) * inference_kernels::cuda::sm_count();
  }

  static int launch(const KQuantGemvParams& p, int kw, cudaStream_t stream) {
    const cudaError_t e = allow_smem();
    if (e != cudaSuccess) return e;
    const unsigned tiles = unsigned((p.n + kTile - 1) / kTile);
    return inference_kernels::cuda::launch_kernel(
        {dim3(tiles), dim3(unsigned(kw * 32)), size_t(kw * warp_smem<S, TL, XS>(p.m)), stream}, kernel, p,
        prefetch_blocks());
  }
};

// TL (the tiled layouts) takes the K split the kernels for ggml's rows would, loop for
// loop: its kernels use no more registers (nor, staged, more shared memory), so the
// split fits one wave as well, and the sums are the same, bit for bit, whichever layout
// the weight is in.
template <typename T, KQuant F, bool TL = false>
int launch(const KQuantGemvParams& p, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>) {
    // fp32 x (three bf16 parts) takes the registers of one 256-thread block per SM.
    using Direct = Shape<T, F, 1, 0, 4, TL>;
    return Direct::launch(p, Shape<T, F, 1, 0, 4>::warps(p), stream);
  } else {
    using Direct = Shape<T, F, 2, 0, 4, TL>;
    const int kw = Shape<T, F, 2, 0, 4>::warps(p);
    if constexpr (TL && F == KQuant::kQ4K && std::is_same_v<T, __half>) {
      // fp16 x, m <= 4, where a K split fits one wave: staged with x in the stages, at
      // the direct loop's split (the same sums), 3 stages at m <= 2 and 2 above (the
      // best of 2-4 at m = 1, 2, 4 over four weights; BENCHMARKS.md, nineteenth
      // session). Where the slots' shared memory breaks the one wave, the direct loop.
      // m = 1 takes the kernel that skips the unstored column (M1), with a block's sub-block
      // sums from two MMAs (XSUM).
      if (kw > 1 && p.m <= 2 && Shape<T, F, 2, 3, 4, true, true>::one_wave(p, kw))
        return p.m == 1 ? Shape<T, F, 2, 3, 4, true, true, true, true>::launch(p, kw, stream)
                        : Shape<T, F, 2, 3, 4, true, true>::launch(p, kw, stream);
      if (kw > 1 && p.m <= 4 && Shape<T, F, 2, 2, 4, true, true>::one_wave(p, kw))
        return Shape<T, F, 2, 2, 4, true, true>::launch(p, kw, stream);
    }
    if constexpr (F == KQuant::kQ4K && std::is_same_v<T, __nv_bfloat16>) {
      // bf16 x: the direct loop with chunk 0's x a block ahead (q4k_block_xahead, A = 1),
      // 2-5% faster where the direct loop runs (H200: 16.5 against 17.3 us at
      // 14336 x 4096, m = 1; BENCHMARKS.md, ninth session). Not for fp16 x: ptxas 13.0
      // spills 16 bytes there at 128 registers. A = 2 compiles without spills, but ptxas
      // then sinks the next block's weight loads below the block's MMAs (no overlap).
      // m = 1: M1, as above; tiled also XSUM (ggml's rows ran slower with it: see the kernel).
      if (kw > 1) {
        const int kx = Shape<T, F, 2, -1, 4>::warps(p);
        if (kx > 1)
          return p.m == 1 ? Shape<T, F, 2, -1, 4, TL, false, true, TL>::launch(p, kx, stream)
                          : Shape<T, F, 2, -1, 4, TL>::launch(p, kx, stream);
      }
    }
    if constexpr (F == KQuant::kQ6K && TL) {
      // m = 1, tiled: the sub-block sums from two MMAs (XSUM, q6k_xsums), 1-4% faster
      // (H100, forty-ninth session; H200, fifty-first: 17.3 against 17.7 us at 14336 x
      // 4096, 15.2-15.7 against 15.7-16.1 at 4096 x 14336, the head within noise);
      // ggml's rows keep sixteen (3-4% slower with it). Not M1: with XSUM it spills
      // (ptxas 13.0: 16-36 bytes).
      if (p.m == 1) return Shape<T, F, 2, 0, 4, TL, false, false, true>::launch(p, kw, stream);
    }
    if (F == KQuant::kQ6K || kw > 1) return Direct::launch(p, kw, stream);
    // No K split fits one wave: each warp streams its rows' whole K, and staging pays.
    // Tiles take the split of ggml's rows, as above.
    using Staged = Shape<T, KQuant::kQ4K, 2, 2, 4>;
    if constexpr (TL) return Shape<T, KQuant::kQ4K, 2, 2, 4, true>::launch(p, Staged::warps(p), stream);
    return Staged::launch(p, Staged::warps(p), stream);
  }
}

template <typename T>
int launch_dtype(const KQuantGemvParams& p, cudaStream_t stream) {
  if (p.format == KQuant::kQ6K)
    return p.tiled ? launch<T, KQuant::kQ6K, true>(p, stream) : launch<T, KQuant::kQ6K>(p, stream);
  return p.tiled ? launch<T, KQuant::kQ4K, true>(p, stream) : launch<T, KQuant::kQ4K>(p, stream);
}

}  // namespace

namespace inference_kernels {

int kquant_gemv_launch(const KQuantGemvParams& p, void* stream) {
  if (p.n <= 0) return cudaSuccess;
  if (p.m < 1 || p.m > 8 || p.k <= 0 || p.k % kQK != 0 || p.k / kQK > (int64_t{1} << 28) ||
      (p.n + kTile - 1) / kTile > INT32_MAX)
    return cudaErrorInvalidValue;
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
