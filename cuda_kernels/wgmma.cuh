// Hopper's warpgroup MMA (wgmma) for fp8 e4m3 with the A operand in registers, and the
// pieces around it (torch-free). sm_90a only: compiled elsewhere, every function traps,
// so a wrong build fails loudly instead of computing garbage.
//
// Shapes and layouts checked on the H200 by benchmarks/wgmma_probe.cu (BENCHMARKS.md,
// twelfth session; n = 48 and 64 by the package's tests, fourteenth session):
// - A (64 x 32 e4m3, registers): warp w of the warpgroup holds rows 16w..16w+15 as
//   mma.m16n8k32 does: lane (g = lane / 4, t = lane % 4) has a0 = row g, k 4t..4t+3;
//   a1 = row g + 8, same k; a2 = row g, k 16+4t..; a3 = row g + 8, k 16+4t...
// - B (32 x N e4m3, shared memory, no swizzle, K-major): 8-row x 16-byte core matrices;
//   the descriptor's leading offset is the byte step between the two 16-byte K halves,
//   its stride offset the step between groups of 8 N-rows.
// - D (64 x N fp32): d[4j + e] is row 16w + g + 8 (e / 2), column 8j + 2t + e % 2.
// - The fp8 accumulator keeps fewer bits than fp32 (2e-3 of the largest output over K =
//   16384); sums are moved into fp32 registers every few MMAs (scale-d 0 starts one).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace inference_kernels::cuda {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define IK_WGMMA 1
#else
#define IK_WGMMA 0
#endif

// A shared-memory matrix descriptor: no swizzle, base offset 0.
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t smem_addr, uint32_t k_step, uint32_t n_step) {
  return uint64_t((smem_addr & 0x3FFFF) >> 4) | (uint64_t((k_step & 0x3FFFF) >> 4) << 16) |
         (uint64_t((n_step & 0x3FFFF) >> 4) << 32);
}

__device__ __forceinline__ void wgmma_fence() {
#if IK_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if IK_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_wait_all() {
#if IK_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
}

// Generic-proxy writes to shared memory (the B operand) made visible to wgmma.
__device__ __forceinline__ void fence_proxy_async_smem() {
#if IK_WGMMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// d (+)= A (64 x 32, the four registers of a) * B (32 x 8 NT, shared memory at desc).
// ACC 0 ignores d's old value (scale-d 0). Inline asm names every accumulator register,
// so each width is its own statement; IK_WG_D8 lists 8 of them from d[i].
#define IK_WG_D8(i)                                                                            \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define IK_WG_A "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(desc), "n"(ACC)
template <int NT, int ACC>
__device__ __forceinline__ void wgmma_e4m3(float (&d)[4 * NT], uint4 a, uint64_t desc) {
#if IK_WGMMA
  static_assert(NT == 1 || NT == 2 || NT == 4 || NT == 6 || NT == 8, "n = 8, 16, 32, 48 or 64");
  if constexpr (NT == 1) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {"
        "%0,%1,%2,%3"
        "}, {%4,%5,%6,%7}, %8, %9, 1, 1;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : IK_WG_A);
  } else if constexpr (NT == 2) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {"
        "%0,%1,%2,%3,%4,%5,%6,%7"
        "}, {%8,%9,%10,%11}, %12, %13, 1, 1;\n"
        : IK_WG_D8(0)
        : IK_WG_A);
  } else if constexpr (NT == 4) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
        "}, {%16,%17,%18,%19}, %20, %21, 1, 1;\n"
        : IK_WG_D8(0), IK_WG_D8(8)
        : IK_WG_A);
  } else if constexpr (NT == 6) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n48k32.f32.e4m3.e4m3 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23"
        "}, {%24,%25,%26,%27}, %28, %29, 1, 1;\n"
        : IK_WG_D8(0), IK_WG_D8(8), IK_WG_D8(16)
        : IK_WG_A);
  } else if constexpr (NT == 8) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
        "}, {%32,%33,%34,%35}, %36, %37, 1, 1;\n"
        : IK_WG_D8(0), IK_WG_D8(8), IK_WG_D8(16), IK_WG_D8(24)
        : IK_WG_A);
  }
#else
  (void)d, (void)a, (void)desc;
  __trap();
#endif
}
#undef IK_WG_D8
#undef IK_WG_A

}  // namespace inference_kernels::cuda
