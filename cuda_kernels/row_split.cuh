// Split rows for the norm kernels (torch-free): a cluster of CL blocks holds each row,
// every block a contiguous slice of it in registers, and a row's sums meet in every
// block's shared memory by remote stores counted on an mbarrier (st.async), not by
// cluster barriers.
//
// Why: with fewer rows than a few waves (1024 rows of hidden 16384 on 132 SMs), a block
// or a persistent block per row leaves the last wave's SMs idle and each SM a long
// serial chain per row; slices of 1/CL row are CL times more, shorter blocks, so the
// tail and the per-block chain shrink. row_kernel.cuh's cluster layout pays a cluster
// barrier per reduction, whose release is a GPU-scope fence (MEMBAR.ALL.GPU); here
// the only barrier is at the start (the mbarriers set before any block stores into
// them), with a relaxed arrival, and each reduction is one remote store a rank.
//
// No barrier at the end: a block reads its own mbarriers' phases complete before it
// uses the sums, so every store into its shared memory has landed before it exits,
// and each rank stores into it once a reduction.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ptx.cuh"
#include "row_pipe.cuh"

namespace inference_kernels::cuda {

// Shared state of a split row with up to R exchanges of W floats a rank: block partials
// per warp, the ranks' values (one slot a rank), and one mbarrier an exchange.
template <int TX, int CL, int R, int W = 1>
struct SplitRow {
  float partial[R][2][TX / 32];  // row_reduce_fixed's arrays (parity 0 only)
  alignas(4 * W) float ranks[R][CL][W];
  alignas(8) uint64_t bar[R];
};

__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// Sets the mbarriers (each expects one arrival, made here, and CL x W x 4 bytes) and
// announces this block to the cluster; split_reduce's first call waits for every
// block's announcement before storing into them. The fence must survive ptxas (one
// FENCE.VIEW.ASYNC.S a kernel in the SASS): in a LayerNorm variant it did not, and
// compute-sanitizer's racecheck flagged the mbarrier (BENCHMARKS.md, thirty-second session).
template <int TX, int CL, int R, int W>
__device__ __forceinline__ void split_start(SplitRow<TX, CL, R, W>& s) {
  if (threadIdx.x == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      mbar_init(smem_addr(&s.bar[r]), 1);
      mbar_arrive_expect_tx(smem_addr(&s.bar[r]), CL * W * 4);
    }
    mbar_init_fence();
  }
  cluster_arrive_relaxed();
}

// Exchange `id` (each id once a kernel): thread r stores this block's W values v into
// rank r's slot of this rank; returns this block's slots once every rank's have landed.
template <int TX, int CL, int R, int W>
__device__ __forceinline__ const float (&split_exchange(SplitRow<TX, CL, R, W>& s, int id, const float (&v)[W],
                                                        unsigned rank))[CL][W] {
  static_assert(W == 1 || W == 2, "one or two floats a rank");
  if (id == 0) cluster_wait();  // every block's mbarriers are set
  const unsigned t = threadIdx.x;
  if (t < CL) {
    const uint32_t dst = cluster_map(smem_addr(&s.ranks[id][rank][0]), t), bar = cluster_map(smem_addr(&s.bar[id]), t);
    if constexpr (W == 1) {
      st_async_f32(dst, v[0], bar);
    } else {
      st_async_v2(dst, v[0], v[1], bar);
    }
  }
  mbar_wait(smem_addr(&s.bar[id]), 0);
  return s.ranks[id];
}

// Op over the row (reduction `id`), returned to every thread of every block of the
// cluster: the block's value by row_reduce_fixed, exchanged, then the ranks' values
// folded in rank order, so every block gets the same bits.
template <typename Op, int TX, int CL, int R>
__device__ __forceinline__ float split_reduce(SplitRow<TX, CL, R>& s, int id, float v, unsigned rank) {
  const float mine[1] = {row_reduce_fixed<Op, TX>(v, s.partial[id], 0)};
  const float (&all)[CL][1] = split_exchange(s, id, mine, rank);
  float total = all[0][0];
#pragma unroll
  for (int r = 1; r < CL; ++r) total = Op()(total, all[r][0]);
  return total;
}

// Two sums over the row at once (two rows' values, exchange `id`), each returned to every
// thread of every block as split_reduce's: the block's trees (row_reduce_fixed's two
// parity arrays), one exchange of both, the ranks folded in order.
template <int TX, int CL, int R>
__device__ __forceinline__ void split_sum2(SplitRow<TX, CL, R, 2>& s, int id, float v0, float v1, unsigned rank,
                                           float& t0, float& t1) {
  const float mine[2] = {row_reduce_fixed<Sum, TX>(v0, s.partial[id], 0), row_reduce_fixed<Sum, TX>(v1, s.partial[id], 1)};
  const float (&all)[CL][2] = split_exchange(s, id, mine, rank);
  t0 = all[0][0], t1 = all[0][1];
#pragma unroll
  for (int r = 1; r < CL; ++r) t0 += all[r][0], t1 += all[r][1];
}

}  // namespace inference_kernels::cuda
