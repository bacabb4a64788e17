// How the norm kernels (rms_norm.cu, layer_norm.cu) lay a row over threads, and the
// reductions over that layout (torch-free).
//
// A row of nvec vectors is held in registers, `items` vectors a thread, so HBM sees
// each input byte once and nothing waits on a second pass. Three layouts:
//   * a warp per row (short rows): blockDim = (32, rows_per_block); reductions are
//     warp shuffles, no barrier;
//   * a block per row: blockDim = (tx, 1); one shared-memory step and two barriers;
//   * a cluster of `cluster` blocks per row (Hopper thread-block clusters): each block
//     holds a slice, and the partial results meet in distributed shared memory. Few
//     rows then still spread over many SMs: one SM cannot pull a long row from HBM
//     fast, and at 1 row x 16384 one block per row leaves 131 of 132 SMs idle.
// Thread t of a row group (cluster rank * tx + threadIdx.x) holds vectors t, t + G,
// t + 2G, ... with G = cluster * tx threads per row: a warp's loads are contiguous.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "reduce_ops.h"

namespace inference_kernels::cuda {

namespace cg = cooperative_groups;

// The cached kernels' block size bound (their __launch_bounds__): up to 255 registers
// a thread, room for 8 vectors of x, weight and bias without spilling.
constexpr int kRowThreads = 256;
// Longest row held in registers by one cluster (8 vectors x 256 threads x 8 blocks);
// longer rows take the streaming kernels.
constexpr int kMaxItems = 8;
constexpr int kMaxCluster = 8;  // the portable cluster size limit

struct RowConfig {
  int tx = 32;             // threads across a row, per block (a multiple of 32)
  int rows_per_block = 1;  // > 1 only with tx == 32
  int cluster = 1;         // blocks per row (1, 2, 4 or 8); > 1 only with rows_per_block 1
  int items = 1;           // vectors a thread holds: 1, 2, 4 or 8
  bool cached() const { return items > 0; }
};

inline int round_up(int64_t v, int m) { return static_cast<int>((v + m - 1) / m * m); }
inline int pow2_at_least(int64_t v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}
inline int pow2_at_most(int64_t v) {
  int p = 1;
  while (p * 2 <= v) p *= 2;
  return p;
}

// The default layout for `rows` rows of `nvec` vectors; items == 0 means "too long
// to cache: stream". Reasoning, to be checked against benchmarks/tune_norms.cu:
//   * short rows (<= 128 vectors) take a warp each, 4 rows a block;
//   * otherwise aim for >= 2 blocks a SM (264 on an H200) before caching more per
//     thread: with few rows, split each over a cluster, but keep >= 256 vectors
//     (4 KB) a block so the cluster's exchange stays cheaper than the loads;
//   * then the fewest items (2..8) that fit a row slice in 256 threads.
inline RowConfig pick_row_config(int64_t rows, int64_t nvec) {
  RowConfig c;
  if (nvec <= 32 * 4) {
    c.tx = 32;
    c.rows_per_block = 4;
    c.items = nvec <= 32 ? 1 : (nvec <= 64 ? 2 : 4);
    return c;
  }
  constexpr int64_t kBlocksWanted = 264;
  int cluster = 1;
  if (rows < kBlocksWanted) {
    cluster = std::min<int64_t>(pow2_at_least((kBlocksWanted + rows - 1) / rows),
                                pow2_at_most(std::max<int64_t>(1, nvec / 256)));
    cluster = std::min(cluster, kMaxCluster);
  }
  // A row slice longer than a block can cache needs more blocks, whatever the rows.
  while (cluster < kMaxCluster && (nvec + cluster - 1) / cluster > int64_t{kRowThreads} * kMaxItems)
    cluster *= 2;
  const int64_t per_block = (nvec + cluster - 1) / cluster;
  if (per_block > int64_t{kRowThreads} * kMaxItems) {
    c.items = 0;
    return c;
  }
  int items = 2;
  while (items < kMaxItems && per_block > int64_t{kRowThreads} * items) items *= 2;
  c.cluster = cluster;
  c.items = items;
  c.tx = std::max(32, round_up((per_block + items - 1) / items, 32));
  return c;
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
  __shared__ float partial[kRowThreads / 32];
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

// A block of a cluster must not exit while another may still read its shared memory.
__device__ __forceinline__ void row_group_done() {
  cg::cluster_group cluster = cg::this_cluster();
  if (cluster.num_blocks() > 1) cluster.sync();
}

// Launches kernel(p) with layout c over `rows` rows (a cluster launch when c.cluster > 1).
template <typename Kernel, typename Params>
cudaError_t launch_rows(Kernel kernel, const Params& p, const RowConfig& c, int64_t rows,
                        cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((rows + c.rows_per_block - 1) / c.rows_per_block * c.cluster);
  if (c.cluster == 1) {
    kernel<<<blocks, dim3(c.tx, c.rows_per_block), 0, stream>>>(p);
    return cudaGetLastError();
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(c.tx, c.rows_per_block);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = c.cluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, p);
}

}  // namespace inference_kernels::cuda

#include "gpu_launchers.h"

namespace inference_kernels {
// The launchers with an explicit layout (null: the default), for the tuning program.
int rms_norm_launch_with(const NormParams& p, const cuda::RowConfig* forced, void* stream);
int layer_norm_launch_with(const LayerNormParams& p, const cuda::RowConfig* forced, void* stream);
}  // namespace inference_kernels
