// Hopper's tensor memory accelerator (TMA), whose copies complete on mbarriers (ptx.cuh), for
// kernels whose weights stream global -> shared memory without a warp's load
// instructions (torch-free). Device side: sm_90a only, as wgmma.cuh (elsewhere every
// function traps). Host side: tensor maps of 2-D byte matrices in 128-byte swizzle.
//
// Layouts checked on the H200 by benchmarks/tma_probe.cu (BENCHMARKS.md, twenty-fifth
// session) and then by the package's tests:
// - a tensor map's box of [rows x 128 bytes] lands in shared memory as rows of 128
//   bytes, 16-byte units XOR-swizzled by (row % 8): wgmma's SWIZZLE_128B K-major layout,
//   so the box is an MMA operand as it lies (desc_sw128). Bytes past the matrix's edges
//   (rows past its last, K past its end) arrive as zeros.
// - an mbarrier counts arrivals and, with expect_tx, the bytes the copies still owe; a
//   phase completes when both reach zero, and waiting on a parity waits for that phase.
#pragma once

#include <cuda.h>  // CUtensorMap; the encoder is fetched from the driver at run time
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ptx.cuh"
#include "wgmma.cuh"

namespace inference_kernels::cuda {

constexpr int kTmaPanel = 128;  // K bytes a box: one 128-byte swizzle row

// A K-major shared-memory operand in 128-byte swizzle: 8-row groups of 1024 bytes apart
// (the stride offset), the leading offset unused (1), layout type 1 (SWIZZLE_128B). The
// tile starts 1024-aligned (base offset 0); a k step of 32 bytes inside the swizzle row
// adds 32 to the start address.
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// A ring of `stages` stages: thread 0 sets each stage's full barrier (the producer's one
// arrival plus the copies' bytes) at full + 8 s and its empty barrier (one arrival from
// each of `consumer_warps`) at empty + 8 s; the block then meets so that no thread waits
// on a barrier not yet set.
__device__ __forceinline__ void mbar_ring_init(uint32_t full, uint32_t empty, int stages, int consumer_warps) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, consumer_warps);
    }
    mbar_init_fence();
  }
  __syncthreads();
}
// The box of `map` at (c0 bytes along K, c1 rows) into shared memory at dst (1024-byte
// aligned), its bytes counted on the mbarrier `bar`.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
#if IK_WGMMA
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
#else
  (void)dst, (void)map, (void)c0, (void)c1, (void)bar;
  __trap();
#endif
}

// d (+)= A (64 x 32 at da) * B (32 x NN at db), both in shared memory (desc_sw128); ACC 0
// ignores d's old value. Inline asm names every accumulator register, so each n is its
// own statement.
#define IK_SS_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
template <int NN, int ACC>
__device__ __forceinline__ void wgmma_e4m3_ss(float (&d)[NN / 2], uint64_t da, uint64_t db) {
#if IK_WGMMA
  static_assert(NN == 8 || NN == 16 || NN == 24 || NN == 32, "n = 8, 16, 24 or 32");
  if constexpr (NN == 8) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0,%1,%2,%3}, %4, %5, %6, 1, 1;\n"
                 : IK_SS_D4(0)
                 : "l"(da), "l"(db), "n"(ACC));
  } else if constexpr (NN == 16) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, %10, 1, 1;\n"
                 : IK_SS_D4(0), IK_SS_D4(4)
                 : "l"(da), "l"(db), "n"(ACC));
  } else if constexpr (NN == 24) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n24k32.f32.e4m3.e4m3 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11}, %12, %13, %14, 1, 1;\n"
                 : IK_SS_D4(0), IK_SS_D4(4), IK_SS_D4(8)
                 : "l"(da), "l"(db), "n"(ACC));
  } else {
    asm volatile("wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, %18, 1, 1;\n"
                 : IK_SS_D4(0), IK_SS_D4(4), IK_SS_D4(8), IK_SS_D4(12)
                 : "l"(da), "l"(db), "n"(ACC));
  }
#else
  (void)d, (void)da, (void)db;
  __trap();
#endif
}
#undef IK_SS_D4

// Host: the driver's tensor-map encoder (cuTensorMapEncodeTiled), fetched once through the
// runtime (no link against libcuda); null if the driver has none.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
#if CUDART_VERSION >= 12050
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q);
#else  // older toolkits (not built here): the unversioned query, which CUDA 13 removed
    const cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &f, cudaEnableDefault, &q);
#endif
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      f = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A [rows, k] byte matrix, `stride` bytes between rows (a multiple of 16; the base 16-byte
// aligned), as boxes of [box_rows x 128 bytes] in 128-byte swizzle, zeros past its
// edges; `promo`: the sectors L2 fetches around each request (skinny_gemm.cu's launch_tma
// picks by weight size). False if the encoder is missing or refuses.
inline bool tensor_map_2d(CUtensorMap* map, const void* base, int64_t rows, int64_t k, int64_t stride,
                          int box_rows, CUtensorMapL2promotion promo = CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
  const auto encode = tensor_map_encoder();
  if (!encode) return false;
  const cuuint64_t dims[2] = {cuuint64_t(k), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(stride)};
  const cuuint32_t box[2] = {cuuint32_t(kTmaPanel), cuuint32_t(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box, elem_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, promo,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace inference_kernels::cuda
