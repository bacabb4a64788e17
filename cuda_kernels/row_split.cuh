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

// Shared state of a split row with up to R reductions: block partials per warp, the
// ranks' values (one slot a rank), and one mbarrier a reduction.
template <int TX, int CL, int R>
struct SplitRow {
  float partial[R][2][TX / 32];  // row_reduce_fixed's arrays (parity 0 only)
  float ranks[R][CL];
  alignas(8) uint64_t bar[R];
};

__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// Sets the mbarriers (each expects one arrival, made here, and CL x 4 bytes) and
// announces this block to the cluster; split_reduce's first call waits for every
// block's announcement before storing into them. The fence must survive ptxas (one
// FENCE.VIEW.ASYNC.S a kernel in the SASS): in a LayerNorm variant it did not, and
// compute-sanitizer's racecheck flagged the mbarrier (BENCHMARKS.md, thirty-second session).
template <int TX, int CL, int R>
__device__ __forceinline__ void split_start(SplitRow<TX, CL, R>& s) {
  if (threadIdx.x == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      mbar_init(smem_addr(&s.bar[r]), 1);
      mbar_arrive_expect_tx(smem_addr(&s.bar[r]), CL * 4);
    }
    mbar_init_fence();
  }
  cluster_arrive_relaxed();
}

// Op over the row (reduction `id`, each id once a kernel), returned to every thread of
// every block of the cluster: the block's value by row_reduce_fixed, stored by thread r
// into rank r's slot of this rank, then the ranks' values folded in rank order once all
// have landed, so every block gets the same bits.
template <typename Op, int TX, int CL, int R>
__device__ __forceinline__ float split_reduce(SplitRow<TX, CL, R>& s, int id, float v, unsigned rank) {
  v = row_reduce_fixed<Op, TX>(v, s.partial[id], 0);
  if (id == 0) cluster_wait();  // every block's mbarriers are set
  const unsigned t = threadIdx.x;
  if (t < CL) st_async_f32(cluster_map(smem_addr(&s.ranks[id][rank]), t), v, cluster_map(smem_addr(&s.bar[id]), t));
  mbar_wait(smem_addr(&s.bar[id]), 0);
  float total = s.ranks[id][0];
#pragma unroll
  for (int r = 1; r < CL; ++r) total = Op()(total, s.ranks[id][r]);
  return total;
}

}  // namespace inference_kernels::cuda
