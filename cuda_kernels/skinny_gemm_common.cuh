// The skinny FP8 GEMM's shared pieces: the work's constants and geometry, 16-byte loads,
// and e4m3 -> f16 conversion. skinny_gemm.cu's opening comment says how the kernels fit
// together; each of its kernel families has its own header (skinny_gemm_*.cuh).
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu_launchers.h"
#include "ptx.cuh"
#include "vec_io.cuh"

namespace {

namespace cg = cooperative_groups;
using namespace inference_kernels;
using namespace inference_kernels::cuda;

constexpr int kMT = 2;         // 16-row MMA m-tiles per warp
constexpr int kTileRows = 16 * kMT;  // weight rows per warp
constexpr int kChunk = 64;     // K bytes per step: 4 lanes x 16 bytes per row
constexpr int kMaxM = 32;      // activation rows per launch slice: 4 MMA n-tiles of 8
constexpr int kMaxBlockWarps = 8;
constexpr int kMaxCluster = 8;  // the portable cluster size
// Two blocks of 8 warps per SM at least: caps the registers at 128 a thread.
constexpr int kMinBlocks = 2;

// How the work is cut (see the launcher).
struct Geometry {
  int64_t tiles;    // ceil(N / 32)
  int64_t nchunks;  // ceil(K / 64)
  int tiles_per_block;
  int warps_per_tile;  // K splits inside a block
  int cluster;         // K splits across the blocks of a cluster
};

// 16 bytes of a row at p (16-byte aligned), or zeros when the segment lies past K
// (avail <= 0; K % 16 == 0, so a segment is all inside or all outside).
template <bool STREAM>
__device__ __forceinline__ uint4 load16(const uint8_t* p, int64_t avail) {
  if (avail <= 0) return make_uint4(0, 0, 0, 0);
  return STREAM ? ld_stream16(p) : __ldg(reinterpret_cast<const uint4*>(p));
}

__device__ __forceinline__ float fp8_to_float(uint8_t v) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(v), __NV_E4M3)));
}

// Two e4m3 values (the low and high byte of v) as an f16x2, exactly (F2FP on sm_89+).
__device__ __forceinline__ uint32_t f16x2_from_e4m3x2(uint32_t v) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}

// A 16-byte e4m3 segment as 8 f16x2 words: f[j] holds bytes 2j, 2j + 1.
struct F16x8 {
  uint32_t f[8];
};

// Through the conversion instruction: exact, NaN stays NaN.
__device__ __forceinline__ F16x8 to_f16(const uint4& v) {
  F16x8 r;
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    r.f[2 * i] = f16x2_from_e4m3x2(w[i] & 0xFFFFu);
    r.f[2 * i + 1] = f16x2_from_e4m3x2(w[i] >> 16);
  }
  return r;
}

// Through integer operations (the INT pipe, beside the conversions of the weight), each
// value times 2^-8, exactly: e4m3 and f16 differ by 8 in exponent bias and e4m3's 3
// mantissa bits sit at f16's top 3, so f16 bits = sign | (e4m3 bits & 0x7F) << 7 is the
// value / 256, subnormals included (the epilogue multiplies by 256). An e4m3 NaN (0x7F)
// reads as 480 instead of NaN.
__device__ __forceinline__ uint32_t f16x2_div256_from_e4m3x2(uint32_t v) {
  const uint32_t u = __byte_perm(v, 0u, 0x1404);  // byte 0 -> bits 8-15, byte 1 -> 24-31
  return (u & 0x80008000u) | ((u >> 1) & 0x3F803F80u);
}

__device__ __forceinline__ F16x8 to_f16_div256(const uint4& v) {
  F16x8 r;
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    r.f[2 * i] = f16x2_div256_from_e4m3x2(w[i]);
    r.f[2 * i + 1] = f16x2_div256_from_e4m3x2(w[i] >> 16);
  }
  return r;
}

// How the activation gets to f16 (the weight always takes the conversion instruction):
// per warp through the conversion instruction (kCvt) or integer operations (kIntOps), or
// once, by a pre-pass writing an f16 copy of `a` that the warps load as ready B fragments
// (kF16Copy; that path also streams the weight through a cp.async ring, see the kernel).
enum Convert : int { kCvt = 1, kIntOps = 2, kF16Copy = 3, kWgmma = 4, kWgmmaRing = 5, kTma = 6, kRows = 7, kRowsWgmma = 8 };

// kF16Copy: chunks of weight in each warp's cp.async ring (S - 1 in flight while one is
// computed): 4 x 2 KB per warp, 64 KB for a block of 8 warps, two blocks per SM.
constexpr int kStages = 4;
constexpr int kStageBytes = 4 * kMT * 16 * 32 / 2;  // 2 * kMT segments of 16 bytes x 32 lanes

// Shared memory per warp: its fp32 partials (after the loop), and for kF16Copy its ring
// (before; the partials reuse it).
template <int NT, int CVT>
constexpr int warp_smem_bytes() {
  constexpr int partials = kMT * NT * 4 * 32 * int(sizeof(float));
  constexpr int ring = CVT == kF16Copy ? kStages * kStageBytes : 0;
  return partials > ring ? partials : ring;
}

template <int CVT>
__device__ __forceinline__ F16x8 activation_to_f16(const uint4& v) {
  if constexpr (CVT == kIntOps) {
    return to_f16_div256(v);
  } else {
    return to_f16(v);
  }
}

}  // namespace
