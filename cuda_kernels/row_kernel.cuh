// Row layouts for the norm kernels (rms_norm.cu, layer_norm.cu) and the reductions
// over them (torch-free).
//
// A row of nvec vectors is held in registers, `items` vectors a thread:
//   * a warp per row (short rows): blockDim = (32, rows_per_block); reductions are
//     warp shuffles, no barrier;
//   * a block per row: blockDim = (tx, 1); one shared-memory step and two barriers;
//   * a flat block per row (RowConfig::flat): as a block per row, but the kernel has no
//     cluster code, loads everything it needs (weight too) before its reductions, and
//     each reduction costs one barrier (row_reduce_flat), as Triton's tl.sum does; a
//     candidate for decode rows and for the many-row shapes where Liger's kernel (the
//     same layout: 8 warps, 2 vectors a thread at hidden 4096) leads;
//   * piped (RowConfig::stages, row_pipe.cuh): the flat layout in persistent blocks
//     that keep the next rows on the way through shared memory (many rows);
//   * a cluster of `cluster` blocks per row (Hopper thread-block clusters): each block
//     holds a slice, and the partial results meet in distributed shared memory, so a
//     few long rows still spread over many SMs (one SM cannot pull a long row from
//     HBM fast: at 1 x 16384 one block per row leaves 131 of 132 SMs idle).
// Thread t of a row group (cluster rank * tx + threadIdx.x) holds vectors t, t + G,
// t + 2G, ... with G = cluster * tx threads per row: a warp's loads are contiguous.
//
// Measured on the H200 (benchmarks/tune_norms.cu, BENCHMARKS.md): clusters win only
// for a few long rows (their barrier's release is a GPU-scope fence, MEMBAR.ALL.GPU,
// on sm_90); with many rows, register caches of 4-8 vectors a thread lose to
// kernels that keep more warps resident, so each op picks its layouts from those
// numbers, not from this header.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "launch.cuh"
#include "reduce_ops.h"

namespace inference_kernels::cuda {

namespace cg = cooperative_groups;

// Block size bound of the cluster layout's kernels (their __launch_bounds__).
constexpr int kRowThreads = 256;
constexpr int kMaxCluster = 8;  // the portable cluster size limit

struct RowConfig {
  int tx = 32;             // threads across a row, per block (a multiple of 32)
  int rows_per_block = 1;  // > 1 only with tx == 32, or 2 with the split kernel (two rows a cluster)
  int cluster = 1;         // blocks per row (1, 2, 4 or 8); > 1 with rows_per_block 1 (or 2: the split kernel)
  int items = 1;           // vectors a thread holds: 1, 2, 4 or 8; 0: the streaming kernel
  bool flat = false;       // the flat kernel (one block of tx threads per row, cluster 1; items 1, 2, 4)
  int stages = 0;          // > 0 (with flat): the piped kernel, rows in flight a block (row_pipe.cuh)
  bool exact = false;      // with flat, for 16-bit rows of exactly items x tx vectors: stages 2, the
                           // piped kernel with tx = piped_threads(items); stages 0, the flat
                           // kernel with tx fixed at compile time, or with cluster > 1 the
                           // split kernel (row_split.cuh: rows of cluster x items x tx vectors)
};

// Block size bound of the flat kernels; blocks of up to kFlatThreads threads.
constexpr int kFlatThreads = 512;
// The same for their exact fits (RowConfig::exact, stages 0), whose block size is fixed at
// compile time: a whole 1024-thread block for a row of 2 x 1024 vectors (hidden 16384 in
// 16-bit), as Liger's kernel runs there (32 warps a row).
constexpr int kExactThreads = 1024;

inline int round_up(int64_t v, int m) { return static_cast<int>((v + m - 1) / m * m); }

// Whether layout c can run `rows` rows of nvec vectors: its grid (rows x cluster
// blocks) fits an int, and its row group covers the row.
inline bool fits(const RowConfig& c, int64_t rows, int64_t nvec) {
  if (c.stages > 0 && !c.flat) return false;
  if (c.exact && (!c.flat || c.stages == 1 || int64_t{c.tx} * c.items * c.cluster != nvec)) return false;
  const int max_tx = c.exact && c.stages == 0 ? kExactThreads : kFlatThreads;
  const bool split = c.exact && c.stages == 0 && c.cluster > 1;  // row_split.cuh
  const int rpb = split ? 2 : 1;  // the split kernel may hold two rows a cluster
  if (c.flat && ((c.cluster != 1 && !split) || c.rows_per_block < 1 || c.rows_per_block > rpb || c.tx > max_tx ||
                 c.tx % 32)) {
    return false;
  }
  return rows * c.cluster <= INT32_MAX && int64_t{c.tx} * c.cluster * c.items >= nvec;
}

// Where this thread sits in its row group.
struct RowSlot {
  int64_t row;  // may be >= rows in the last block of the warp-per-row layout
  int first;    // index of the thread's first vector in the row
  int step;     // threads across the whole row (G)
};

__device__ __forceinline__ RowSlot row_slot() {
  const unsigned csize = cg::this_cluster().num_blocks();  // 1 without a cluster launch
  if (csize > 1) {
    const unsigned rank = cg::this_cluster().block_rank();
    return {int64_t(blockIdx.x / csize), int(rank * blockDim.x + threadIdx.x),
            int(csize * blockDim.x)};
  }
  return {int64_t(blockIdx.x) * blockDim.y + threadIdx.y, int(threadIdx.x), int(blockDim.x)};
}

// Sum or max over the row group, returned to every thread of it. ID gives each
// reduction of a kernel its own shared memory, so consecutive reductions need no
// barrier between them (a block must not overwrite a slot another thread, or another
// block of the cluster, has yet to read). Cluster kernels end with row_group_done().
template <typename Op, int ID>
__device__ __forceinline__ float row_reduce(float v) {
  __shared__ float partial[32];  // one per warp, up to 1024 threads
  __shared__ float total;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = Op()(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (blockDim.x == 32) return v;  // a warp per row
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < int(blockDim.x / 32) ? partial[lane] : Op::kIdentity;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = Op()(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) total = v;
  }
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned csize = cluster.num_blocks();
  if (csize == 1) {
    __syncthreads();
    return total;
  }
  cluster.sync();  // every block's total written and visible cluster-wide
  // Every block sums the ranks in the same order: one result, bit for bit.
  float t = Op::kIdentity;
  for (unsigned r = 0; r < csize; ++r) t = Op()(t, *cluster.map_shared_rank(&total, r));
  return t;
}

// Sum or max over the block (blockDim (tx, 1)), returned to every thread, with one
// barrier: each warp posts its partial, then every warp reads all of them and folds
// them itself, instead of warp 0 folding and posting the total behind a second
// barrier. Lane l reads partial l mod P (P: the warp count rounded up to a power of
// two), so log2(P) butterfly steps finish it. Every lane folds the same values in
// the same tree (the ops commute), so all threads get one result, bit for bit. ID:
// one shared array per reduction of a kernel (each ID once a kernel: no barrier
// separates a second use from slow readers of the first).
template <typename Op, int ID>
__device__ __forceinline__ float row_reduce_flat(float v) {
  __shared__ float partial[kFlatThreads / 32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = Op()(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int nwarps = blockDim.x / 32;
  if (nwarps == 1) return v;
  const int lane = threadIdx.x % 32;
  if (lane == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  const int pow2 = 1 << (32 - __clz(nwarps - 1));
  const int j = lane & (pow2 - 1);
  v = j < nwarps ? partial[j] : Op::kIdentity;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    if (o < pow2) v = Op()(v, __shfl_xor_sync(0xffffffffu, v, o));
  }
  return v;
}

// A block of a cluster must not exit while another may still read its shared memory.
__device__ __forceinline__ void row_group_done() {
  cg::cluster_group cluster = cg::this_cluster();
  if (cluster.num_blocks() > 1) cluster.sync();
}

// The exact fits' block size, fixed at compile time, from the runtime c.tx: calls
// launch(std::integral_constant<int, TX>{}) for the TX among Txs equal to tx, or refuses
// a block size the launcher does not instantiate.
template <int... Txs, typename Launch>
cudaError_t with_block_size(int tx, Launch&& launch) {
  cudaError_t e = cudaErrorInvalidConfiguration;
  (void)((tx == Txs && ((e = launch(std::integral_constant<int, Txs>{})), true)) || ...);
  return e;
}

// Where a norm's exact-fit kernels read x (and the residual) without allocating in L1
// (ld_x): up to 32 MiB of x. L1 then keeps the weight (and bias) that every block of the
// SM reads again. H200, tune_norms defaults, three rounds each (forty-third session,
// s43b / s43c), us against plain loads: LayerNorm fp16 1024 x 16384 18.44-18.49 against
// 19.00-19.10, bf16 19.01-19.09 against 19.44-19.54; 4096 x 4096 fp16 17.75-17.88 against
// 18.80-18.94, bf16 17.93-18.01 against 19.41-19.63; 16384 x 1024 fp16 17.19-17.28
// against 17.85-17.93; RMSNorm bf16 4096 x 4096 17.17-17.23 against 18.06-18.16. Past 32
// MiB it lost (LayerNorm fp16 2048 x 16384 35.79-35.97 against 35.20-35.36, fp16 4096 x
// 8192 36.60-36.81 against 35.34-35.44, bf16 4096 x 16384 69.39-69.56 against
// 67.09-67.30), as in RMSNorm's split rows at any size (rms bf16 4096 x 16384 69.0
// against 65.7, add + RMSNorm + FP8 1024 x 16384 31.65 against 30.80), which keep plain
// loads.
#ifndef IK_NORM_X_ONCE_BYTES  // another bound, for experiments (h200_session.sh x_once_ncu)
#define IK_NORM_X_ONCE_BYTES (int64_t{32} << 20)
#endif
constexpr int64_t kXOnceBytes = IK_NORM_X_ONCE_BYTES;

// Calls launch(std::true_type{}) or launch(std::false_type{}) as once says.
template <typename Launch>
cudaError_t with_once(bool once, Launch&& launch) {
  return once ? launch(std::true_type{}) : launch(std::false_type{});
}

// Launches kernel(p) with layout c over `rows` rows (a cluster launch when c.cluster > 1).
template <typename Kernel, typename Params>
cudaError_t launch_rows(Kernel kernel, const Params& p, const RowConfig& c, int64_t rows,
                        cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((rows + c.rows_per_block - 1) / c.rows_per_block * c.cluster);
  return launch_kernel({dim3(blocks), dim3(c.tx, c.rows_per_block), 0, stream, unsigned(c.cluster)}, kernel, p);
}

}  // namespace inference_kernels::cuda

#include "gpu_launchers.h"

namespace inference_kernels {
// The launchers with an explicit layout (null: the default), for the tuning program.
int rms_norm_launch_with(const NormParams& p, const cuda::RowConfig* forced, void* stream);
int layer_norm_launch_with(const LayerNormParams& p, const cuda::RowConfig* forced, void* stream);
}  // namespace inference_kernels
