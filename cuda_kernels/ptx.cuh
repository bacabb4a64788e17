// Inline PTX the CUDA kernels share (torch-free): streaming and ordered loads, cp.async,
// programmatic dependent launch, cluster barriers, mbarriers and stores into another
// block's shared memory, and the m16n8k16 MMA.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace inference_kernels::cuda {

// Bytes read once (weights): skip L1, and let L2 fetch 256-byte blocks (the kernels walk
// each row forward). 16 and 8 bytes at p, aligned to their size.
__device__ __forceinline__ uint4 ld_stream16(const uint8_t* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

__device__ __forceinline__ uint2 ld_stream8(const uint8_t* p) {
  uint2 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// ld_stream16 (without the L2 hint) in program order with the other asm volatile
// statements: for loops that issue each load at a chosen point (a refill right after its
// slot's MMA), and for the probes' reads.
__device__ __forceinline__ uint4 ld_stream16_ordered(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// One global load of V (2, 4, 8 or 16 bytes, p aligned to its size) as an asm volatile
// statement, with QUAL after "ld.global" (a cache hint, or nothing).
#define IK_LD_GLOBAL_SIZED(QUAL, v, p)                                                                  \
  do {                                                                                                  \
    static_assert(sizeof(v) == 2 || sizeof(v) == 4 || sizeof(v) == 8 || sizeof(v) == 16, "load size");  \
    if constexpr (sizeof(v) == 16) {                                                                    \
      uint4 r_;                                                                                         \
      asm volatile("ld.global" QUAL ".v4.u32 {%0, %1, %2, %3}, [%4];"                                   \
                   : "=r"(r_.x), "=r"(r_.y), "=r"(r_.z), "=r"(r_.w) : "l"(p));                          \
      __builtin_memcpy(&(v), &r_, 16);                                                                  \
    } else if constexpr (sizeof(v) == 8) {                                                              \
      uint2 r_;                                                                                         \
      asm volatile("ld.global" QUAL ".v2.u32 {%0, %1}, [%2];" : "=r"(r_.x), "=r"(r_.y) : "l"(p));       \
      __builtin_memcpy(&(v), &r_, 8);                                                                   \
    } else if constexpr (sizeof(v) == 4) {                                                              \
      uint32_t r_;                                                                                      \
      asm volatile("ld.global" QUAL ".u32 %0, [%1];" : "=r"(r_) : "l"(p));                              \
      __builtin_memcpy(&(v), &r_, 4);                                                                   \
    } else {                                                                                            \
      unsigned short r_;                                                                                \
      asm volatile("ld.global" QUAL ".u16 %0, [%1];" : "=h"(r_) : "l"(p));                              \
      __builtin_memcpy(&(v), &r_, 2);                                                                   \
    }                                                                                                   \
  } while (0)

// A global load the compiler keeps in program order with the other asm volatile
// statements (ld_ordered, after_loads): for latency-bound kernels whose loads must all
// be in flight before any arithmetic that could stall (a slow-path call, a division).
// Left to itself, the compiler hoisted a scale's reciprocal above the data loads and
// sank one input's load below the other's arithmetic: three memory latencies in a
// row where one suffices (silu_and_mul_fp8, 1.6 against Triton's 1.0 us at one row).
// Plain (coherent) ld.global: x may be the row a norm kernel writes back. Sizes 2, 4,
// 8 or 16 bytes, p aligned to its size.
template <typename V>
__device__ __forceinline__ V ld_ordered(const V* p) {
  V v;
  IK_LD_GLOBAL_SIZED("", v, p);
  return v;
}

// For latency-bound kernels, whose length is the tail after their last load: a store's
// global address (and predicate) pinned where it is formed, before the loads, so the
// compiler cannot sink its arithmetic (constant-bank reads, 64-bit row math) between
// the arithmetic and the store. SwiGLU at one row of 13312: 1.19 against 1.24 us (s46a).
__device__ __forceinline__ void pin_here(uint64_t& v) { asm volatile("" : "+l"(v)); }
__device__ __forceinline__ void pin_here(int& v) { asm volatile("" : "+r"(v)); }
template <typename V>
__device__ __forceinline__ uint64_t global_addr(V* p) {
  uint64_t a = __cvta_generic_to_global(p);
  pin_here(a);
  return a;
}
// A store of V (2, 4, 8 or 16 bytes, aligned) to such an address.
template <typename V>
__device__ __forceinline__ void st_global(uint64_t a, const V& v) {
  static_assert(sizeof(V) == 2 || sizeof(V) == 4 || sizeof(V) == 8 || sizeof(V) == 16, "store size");
  if constexpr (sizeof(V) == 16) {
    uint4 w;
    __builtin_memcpy(&w, &v, 16);
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(a), "r"(w.x), "r"(w.y), "r"(w.z), "r"(w.w)
                 : "memory");
  } else if constexpr (sizeof(V) == 8) {
    uint2 w;
    __builtin_memcpy(&w, &v, 8);
    asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(a), "r"(w.x), "r"(w.y) : "memory");
  } else if constexpr (sizeof(V) == 4) {
    uint32_t w;
    __builtin_memcpy(&w, &v, 4);
    asm volatile("st.global.u32 [%0], %1;" ::"l"(a), "r"(w) : "memory");
  } else {
    unsigned short w;
    __builtin_memcpy(&w, &v, 2);
    asm volatile("st.global.u16 [%0], %1;" ::"l"(a), "h"(w) : "memory");
  }
}

// A norm's x (and residual) read without allocating in L1 where ONCE (row_kernel.cuh's
// kXOnceBytes says where), so that L1 keeps what the SM's blocks read again: the weight
// (and bias). -DIK_NORM_X_ONCE=0 builds plain loads everywhere (tune_norms' A/B).
#ifndef IK_NORM_X_ONCE
#define IK_NORM_X_ONCE 1
#endif
template <bool ONCE, typename V>
__device__ __forceinline__ V ld_x(const V* p) {
  if constexpr (!IK_NORM_X_ONCE || !ONCE) {
    return *p;
  } else {
    V v;
    IK_LD_GLOBAL_SIZED(".L1::no_allocate", v, p);
    return v;
  }
}

// Marks v as produced here, after the ld_ordered loads above it, so arithmetic on v
// cannot be hoisted above them.
__device__ __forceinline__ float after_loads(float v) {
  asm volatile("" : "+f"(v));
  return v;
}
// The same for a loaded vector's four words.
__device__ __forceinline__ void after_loads(uint4& v) {
  asm volatile("" : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w));
}

// Hides a 16-byte vector's value from the compiler (an empty asm on its four words), so
// that it keeps the packed vector live and converts it again in the next pass, rather
// than keeping the fp32 values converted from it (layer_norm_split_exact in bf16: 16
// registers a thread at 4 vectors instead of 32).
template <typename P>
__device__ __forceinline__ void launder(P& v) {
  static_assert(sizeof(P) == 16);
  auto& w = reinterpret_cast<uint32_t(&)[4]>(v);
  asm volatile("" : "+r"(w[0]), "+r"(w[1]), "+r"(w[2]), "+r"(w[3]));
}

// Asynchronous 16-byte copy global -> shared (cp.async, LDGSTS, sm_80+): no registers
// held while the bytes are in flight, so a warp can keep several blocks of weights on
// the way. L1 is skipped (.cg, weights are read once) and L2 fetches 256-byte blocks,
// as ld_stream16. dst: a shared-window address (smem_addr); both 16-byte aligned.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
// The same, or 16 zeros where !valid (src-size 0: nothing is read; src need only be valid).
__device__ __forceinline__ void cp_async16_zfill(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
// The same through L1 (.ca): for data the blocks sharing an SM read too.
__device__ __forceinline__ void cp_async16_ca(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src) { cp_async16(smem_addr(dst), src); }

// 4 bytes global -> shared through L1 (cp.async.ca), or 4 zeros where !valid (src-size
// 0: nothing is read, src need only be a valid address). dst, src 4-byte aligned.
__device__ __forceinline__ void cp_async4_zfill(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0) : "memory");
}

// Closes this thread's current group of cp.async copies.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

// Waits until at most N of this thread's committed groups are still in flight (its own
// copies only: other threads see the bytes after a barrier, __syncwarp for a warp's
// buffer). Copies not yet committed are not waited for.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
// Commits the open group and waits for every copy of this thread: the safe form where
// nothing is left in flight (a bare wait_group 0 left an uncommitted copy racing, s17b).
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
__device__ __forceinline__ uint4 lds16(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

// Programmatic dependent launch (sm_90): a primary grid lets its dependent launch early;
// the dependent waits, where it first reads the primary's output, until the primary has
// finished and its writes are visible. Both are no-ops without the launch attribute.
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__device__ __forceinline__ void pdl_wait_primary() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
// The start of every kernel launched by launch.cuh (its contract): wait for the kernel
// before, then let the next one launch.
__device__ __forceinline__ void pdl_enter() {
  pdl_wait_primary();
  pdl_launch_dependents();
}
// A hint that [p, p + bytes) will be read soon: the copy engine brings it into L2 (p and
// bytes multiples of 16). Safe before pdl_wait_primary, as launch.cuh says.
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

// The two halves of a thread-block cluster barrier (sm_90): writes before arrive (shared
// memory included) are visible to reads after the matching wait in every block of the
// cluster; work between them overlaps the other blocks' arrival. Every thread of every
// block alternates arrive and wait.
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
// An arrival that orders nothing: for a barrier that only says each block has started
// (e.g. its mbarriers are set; fence.mbarrier_init orders those).
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}

// mbarriers and distributed shared memory (sm_90; elsewhere every function traps). An
// mbarrier counts arrivals and, with expect_tx, the bytes that copies and remote stores
// still owe it; a phase completes when both reach zero.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define IK_SM90 1
#else
#define IK_SM90 0
#endif

__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
#if IK_SM90
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
#else
  (void)bar, (void)count;
  __trap();
#endif
}
// The barriers' initialisation made visible to the async proxy (the copies) and the cluster.
__device__ __forceinline__ void mbar_init_fence() {
#if IK_SM90
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
// One arrival that also announces `bytes` the copies will deliver to this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, int bytes) {
#if IK_SM90
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
#if IK_SM90
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
#endif
}
// Waits for the phase of `parity` to complete. Traps after 2^27 failed tries (a minute
// and more), so a copy that never lands fails the launch instead of hanging the process.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
#if IK_SM90
  uint32_t done = 0;
  for (uint32_t tries = 0; !done; ++tries) {
    if (tries == (1u << 27)) __trap();
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  }
#else
  (void)bar, (void)parity;
  __trap();
#endif
}

// The shared address `addr` of this block's layout in the cluster's block `rank`
// (distributed shared memory), for st_async_v4.
__device__ __forceinline__ uint32_t cluster_map(uint32_t addr, int rank) {
  uint32_t r = addr;
#if IK_SM90
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
#endif
  return r;
}
// Four floats stored into another block's shared memory at `addr` (cluster_map), their 16
// bytes counted on that block's mbarrier `bar` (also mapped).
__device__ __forceinline__ void st_async_v4(uint32_t addr, float a, float b, float c, float d, uint32_t bar) {
#if IK_SM90
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(addr),
               "f"(a), "f"(b), "f"(c), "f"(d), "r"(bar)
               : "memory");
#endif
}

// The same, two floats (8-byte aligned).
__device__ __forceinline__ void st_async_v2(uint32_t addr, float a, float b, uint32_t bar) {
#if IK_SM90
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];" ::"r"(addr),
               "f"(a), "f"(b), "r"(bar)
               : "memory");
#endif
}

// One float stored into another block's shared memory at `addr` (cluster_map), its 4
// bytes counted on that block's mbarrier `bar` (also mapped).
__device__ __forceinline__ void st_async_f32(uint32_t addr, float a, uint32_t bar) {
#if IK_SM90
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(addr),
               "r"(__float_as_uint(a)), "r"(bar)
               : "memory");
#endif
}

// d += A (16 x 16) * B (16 x 8), bf16 (BF16) or f16 inputs, fp32 accumulators. This lane
// (g = lane / 4, t = lane % 4) holds A rows g (a0, a2) and g + 8 (a1, a3) and B column
// g; k 2t, 2t + 1 in a0, a1, b0 and 2t + 8, 2t + 9 in a2, a3, b1 (PTX ISA, mma.m16n8k16
// fragments; each register a pair, the lower k in its low half).
template <bool BF16>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                             uint32_t a3, uint32_t b0, uint32_t b1) {
  if constexpr (BF16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

}  // namespace inference_kernels::cuda
