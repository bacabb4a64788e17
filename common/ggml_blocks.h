// GGUF / ggml k-quant super-blocks (Q4_K and Q6_K), byte for byte as ggml lays them
// out, so our quantised weights can be written to a .gguf file and read by llama.cpp
// (and theirs read by us). Shared by host C++, CUDA and HIP: no torch header, no
// fp16 type of any backend: fp16 fields are kept as their raw bits (ggml's
// ggml_half is a uint16_t too) and converted by the code that reads them.
//
// The layouts, as gguf-py's reference dequantisation (gguf/quants.py) reads them:
//
// Q4_K: 256 weights in 8 sub-blocks of 32; weight = d * sc[j] * q - dmin * m[j],
//   q in 0..15, sc and m 6-bit. Weights 64c..64c+31 are the low nibbles of
//   qs[32c..32c+31], weights 64c+32..64c+63 the high nibbles of the same bytes
//   (sub-blocks 2c and 2c+1).
// Q6_K: 256 weights in 16 sub-blocks of 16; weight = d * scales[e / 16] * (q - 32),
//   q 6-bit. In half h (128 weights, 128h + 32s + l for s in 0..3, l in 0..31) the
//   low 4 bits of q sit in ql[64h + 32(s & 1) + l] (low nibble for s < 2, high
//   nibble otherwise) and the top 2 bits in qh[32h + l] at bit 2s.
//
// Also compiled as Metal Shading Language (metal_kernels/q4k.metal), as ggml-common.h
// is: under __METAL_VERSION__ there is no <cstdint> (metal_stdlib has the fixed-width
// types), program-scope variables live in the `constant` address space, and every
// pointer names its address space, so the helpers that read bytes take the pointer
// type as a template parameter (device memory on the GPU, plain memory on the host)
// and return values instead of writing through pointers.
#pragma once

#if defined(__METAL_VERSION__)
#include <metal_stdlib>
#define IK_HOST_DEVICE
#else
#include <cstdint>

#include "fp8.h"  // IK_HOST_DEVICE
#endif

namespace inference_kernels {
namespace ggml {

// Weights per super-block (ggml's QK_K).
#if defined(__METAL_VERSION__)
constant constexpr int kQK = 256;
#else
constexpr int kQK = 256;
#endif

struct BlockQ4K {
  uint16_t d;           // fp16 bits: super-block scale of the 6-bit scales
  uint16_t dmin;        // fp16 bits: super-block scale of the 6-bit mins
  uint8_t scales[12];   // 8 scales and 8 mins, 6 bits each (pack_scale_min)
  uint8_t qs[kQK / 2];  // 4-bit quants, two per byte
};

struct BlockQ6K {
  uint8_t ql[kQK / 2];   // low 4 bits of the quants
  uint8_t qh[kQK / 4];   // high 2 bits
  int8_t scales[kQK / 16];
  uint16_t d;  // fp16 bits
};

#if !defined(__METAL_VERSION__)
// Q4_K's tiled layout: ours, not ggml's (quant.tile_q4k makes it from ggml's rows and
// untile_q4k undoes it). The CUDA mat-vec works on tiles of 16 weight rows; in ggml's
// rows a tile's 16 blocks of one super-block lie a row (K / 256 x 144 bytes) apart and
// each warp load takes 32 bytes from each of 8 of them, which held the kernel's reads
// to ~2.3 TB/s on an H200 even with no arithmetic at all (BENCHMARKS.md, fifteenth
// session). Here they are 2304 contiguous bytes, in the order the kernel's lanes read
// them, so that every warp load is 512 contiguous bytes (256 for the heads):
//   tensor uint8 [ceil(N / 16), K / 256, 2304], rows past N zero; per (tile, block):
//   bytes 512c + 16i .. 512c + 16i + 15 (chunk c = 0..3, lane i = 4g + t, g = 0..7,
//     t = 0..3): qs[32c + 8t .. 32c + 8t + 7] of tile row g, then of tile row g + 8,
//     each 4-byte word's bytes in the order 0, 2, 1, 3 (so that a pair of levels lies
//     16 bits apart, as the MMA operand's two halves: q4k.cu's q4k_pairs);
//   bytes 2048 + 16r .. 2048 + 16r + 15: d, dmin and scales[12] of tile row r.
constexpr int kTileRows = 16;  // rows of a tile, both formats
constexpr int kQ4KTileBytes = kTileRows * 144;
constexpr int kQ4KTileHeads = 2048;  // offset of the 16 rows' heads
// Q6_K's, the same way (tile_q6k): tensor uint8 [ceil(N / 16), K / 256, 3360]; lane i = 4g
// + t reads 24 words a block, w = 12R + 6n + 3h + k for tile row 8R + g, half n, h and
// kind k (0: ql bytes 64n + 16h + 4t .., 1: ql 64n + 32 + 16h + 4t .., 2: qh 128 + 32n +
// 16h + 4t ..; the words q6k_row reads), at byte 512 (w / 4) + 16i + 4 (w % 4); then row
// r's 16 scales at 3072 + 16r and its d at 3328 + 2r. 3360 = 16 x 210 keeps every tile
// block 16-byte aligned, where ggml's 210-byte blocks are only 2-byte aligned.
constexpr int kQ6KTileBytes = kTileRows * 210;
constexpr int kQ6KTileScales = 3072;
constexpr int kQ6KTileD = 3328;
#endif

static_assert(sizeof(BlockQ4K) == 144, "block_q4_K is 144 bytes in ggml");
static_assert(sizeof(BlockQ6K) == 210, "block_q6_K is 210 bytes in ggml");
static_assert(alignof(BlockQ6K) == 2, "block_q6_K has 2-byte alignment in ggml");

// Sub-block j's 6-bit scale and min (ggml's get_scale_min_k4). Bytes 0..3 hold the
// scales of sub-blocks 0..3 in their low 6 bits, bytes 4..7 the mins; sub-blocks
// 4..7 keep their low 4 bits in bytes 8..11 (scale low nibble, min high nibble)
// and their top 2 bits in the spare top bits of bytes 0..3 (scale) and 4..7 (min).
// `Bytes` is any pointer to the 12 bytes (`device const uint8_t*` in a shader).
struct ScaleMin {
  int sc, m;
};

template <typename Bytes>
IK_HOST_DEVICE inline ScaleMin scale_min(Bytes s, int j) {
  if (j < 4) return {s[j] & 63, s[j + 4] & 63};
  return {(s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4)};
}

#if !defined(__METAL_VERSION__)
IK_HOST_DEVICE inline void unpack_scale_min(const uint8_t* s, int j, uint8_t* sc, uint8_t* m) {
  const ScaleMin v = scale_min(s, j);
  *sc = static_cast<uint8_t>(v.sc);
  *m = static_cast<uint8_t>(v.m);
}

// The inverse: sc[j], m[j] < 64 for the 8 sub-blocks into the 12 bytes.
IK_HOST_DEVICE inline void pack_scale_min(const uint8_t* sc, const uint8_t* m, uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4));
  }
}
#endif

// Where weight e (0..255) of a block keeps its quant bits: the byte of qs (Q4_K) or ql
// (Q6_K) and the shift of its nibble there; for Q6_K also the byte of qh and the shift of
// its top 2 bits. The quantisers pack through these; GPU kernels can read through them.
struct Q4KPos {
  int qs, shift;
};

IK_HOST_DEVICE inline Q4KPos q4k_pos(int e) {
  const int c = e / 64, l = e % 64;
  return {32 * c + l % 32, 4 * (l / 32)};
}

struct Q6KPos {
  int ql, ql_shift, qh, qh_shift;
};

IK_HOST_DEVICE inline Q6KPos q6k_pos(int e) {
  const int h = e / 128, s = (e % 128) / 32, l = e % 32;
  return {64 * h + 32 * (s & 1) + l, 4 * (s >> 1), 32 * h + l, 2 * s};
}

}  // namespace ggml
}  // namespace inference_kernels
