// Torch-facing wrapper of skinny_gemm.cu: check the tensors, pick the stream, launch.
// Compiled by the host C++ compiler, so no torch header goes through nvcc.
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>

#include "gpu_launchers.h"
#include "skinny_gemm_checks.h"
#include "torch_binding.h"

using namespace inference_kernels;

// config (benchmarks and tests; empty = the launcher's choice): [tiles_per_block,
// warps_per_tile, cluster, convert], 0 = the launcher's choice for that field (convert:
// gpu_launchers.h; 3 takes a workspace of 2 * M * K bytes, allocated here; 4 takes
// `cluster`, its K split, tiles_per_block, its warpgroups a block, and warps_per_tile,
// its groups of chunks in flight; 5 takes `cluster` and warps_per_tile, its ring slots;
// 6 takes `cluster`, its K split, tiles_per_block, its consumer warpgroups a block, and
// warps_per_tile, its epilogue: the partials by element (1) or by weight row (2), direct
// (3: no K split, persistent blocks), pushed rank to rank (4; without a split, 3) or
// swapped between two ranks (5; at splits other than 2, 4)); 7 (M = 1) takes tiles_per_block,
// its weight rows a block, and warps_per_tile, the 16-byte segments of each row a thread
// keeps in flight; 8 (M = 1, sm_90a) takes tiles_per_block, its weight rows a block, and
// warps_per_tile, its groups of 8 steps in flight a lane. On
// ROCm, warps_per_tile is the K splits across work items and cluster and convert are ignored.
void skinny_gemm_fp8_cuda(at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                          const at::Tensor& scale_a, const at::Tensor& scale_b,
                          const std::optional<at::Tensor>& bias, at::IntArrayRef config) {
  SkinnyGemmParams p = skinny_gemm_params(out, a, b, scale_a, scale_b, bias, c10::DeviceType::CUDA);
  TORCH_CHECK(p.M <= int64_t(65535) * 32, "a may have at most 2097120 rows, got ", num(p.M));
  TORCH_CHECK(config.size() <= 4, "config holds at most 4 values [tiles_per_block, warps_per_tile, ",
              "cluster, convert], got ", num(int64_t(config.size())));
  const auto field = [&](size_t i) { return i < config.size() ? config[i] : int64_t(0); };
  const int64_t rb = field(0), kw = field(1), nc = field(2), cvt = field(3);
#ifdef CUDA_KERNEL
  // convert 6 and 7 read both fields otherwise (their own checks below)
  TORCH_CHECK(rb >= 0 && kw >= 0 && (cvt >= 6 || std::max<int64_t>(rb, 1) * std::max<int64_t>(kw, 1) <= 8),
              "config: tiles_per_block * warps_per_tile must be at most 8 (0 = automatic), got ",
              num(rb), " and ", num(kw));
#else
  TORCH_CHECK(rb >= 0 && rb <= 2 && kw >= 0 && kw <= 32, "config: tiles_per_block must be 0 (automatic), 1 or 2 ",
              "(n-tiles of 16 rows a work item) and warps_per_tile 0 (automatic) to 32 (K splits a tile), got ",
              num(rb), " and ", num(kw));
#endif
  TORCH_CHECK(nc >= 0 && nc <= 8, "config: cluster must be 0 (automatic) to 8, got ", num(nc));
  TORCH_CHECK(cvt >= 0 && cvt <= 8, "config: convert must be 0 (automatic) or 1 to 8, got ", num(cvt));
#ifdef CUDA_KERNEL
  TORCH_CHECK(cvt < 4 || cvt >= 7 || p.M <= 32, "config: convert ", num(cvt), " (wgmma) takes at most 32 rows of a, got ",
              num(p.M));
  TORCH_CHECK(cvt != 7 || p.M <= kSkinnyGemmRowsMaxM, "config: convert 7 (whole weight rows a block) takes at most ",
              num(kSkinnyGemmRowsMaxM), " rows of a, got ", num(p.M));
  TORCH_CHECK(cvt != 7 || ((rb == 0 || rb == 1 || rb == 2 || rb == 4) && (kw == 0 || kw == 1 || kw == 2 || kw == 4) &&
                           nc <= 1),
              "config: convert 7 takes tiles_per_block 0 (automatic), 1, 2 or 4 (weight rows a block), warps_per_tile ",
              "0 (automatic), 1, 2 or 4 (16-byte segments of each row a thread keeps in flight) and cluster 0 or 1, ",
              "got ", num(rb), ", ", num(kw), " and ", num(nc));
  TORCH_CHECK(cvt != 8 || p.M == 1, "config: convert 8 (whole weight rows a block, wgmma) takes one row of a, got ",
              num(p.M));
  TORCH_CHECK(cvt != 8 || ((rb == 0 || rb == 1 || rb == 2 || rb == 4 || rb == 8) && kw <= 2 && nc <= 1),
              "config: convert 8 takes tiles_per_block 0 (automatic), 1, 2, 4 or 8 (weight rows a block), warps_per_tile 0 ",
              "(automatic), 1 or 2 (groups of 8 steps in flight a lane) and cluster 0 or 1, got ", num(rb), ", ",
              num(kw), " and ", num(nc));
  TORCH_CHECK(cvt != 8 || p.K <= kSkinnyGemmRowsWgmmaMaxK, "config: convert 8 keeps the row of a in shared memory: K ",
              "at most ", num(kSkinnyGemmRowsWgmmaMaxK), ", got ", num(p.K));
  if (cvt == 8) {
    int major = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, a.get_device()));
    TORCH_CHECK(major == 9, "config: convert 8 runs Hopper's warpgroup MMA (compute capability 9.x), got ",
                num(int64_t(major)), ".x");
  }
  TORCH_CHECK(cvt != 6 || (rb <= 2 && kw <= 5), "config: convert 6 takes tiles_per_block 0 (automatic), 1 or 2 ",
              "(consumer warpgroups of 64 weight rows a block) and warps_per_tile 0 (automatic), 1, 2, 3, 4 or 5 (the ",
              "epilogue: partials by element, by weight row, direct, pushed rank to rank, or swapped between two ",
              "ranks), got ", num(rb), " and ", num(kw));
  TORCH_CHECK(cvt != 6 || kw != 3 || nc <= 1, "config: convert 6's direct epilogue (warps_per_tile 3) takes no K ",
              "split (cluster 0 or 1), got cluster ", num(nc));
#endif
  p.tiles_per_block = int(rb);
  p.warps_per_tile = int(kw);
  p.cluster = int(nc);
  p.convert = int(cvt);
  if (p.M == 0 || p.N == 0) return;
  const c10::cuda::CUDAGuard guard(a.device());
#ifdef CUDA_KERNEL
  if (cvt == 4) {  // each block keeps its share of the activation's K in shared memory
    TORCH_CHECK(rb <= 2 && kw <= 2, "config: convert 4 takes tiles_per_block 0 (automatic), 1 or 2 (warpgroups ",
                "of 32 weight rows a block) and warps_per_tile 0 (automatic), 1 or 2 (groups of 8 chunks in flight ",
                "a lane), got ", num(rb), " and ", num(kw));
    TORCH_CHECK(kw <= 1 || p.M <= 16, "config: convert 4 keeps one group of chunks in flight past 16 rows of a ",
                "(warps_per_tile 0 or 1), got warps_per_tile ", num(kw), " at ", num(p.M), " rows");
    const int min_nc = skinny_gemm_fp8_wgmma_min_cluster(p);
    TORCH_CHECK(min_nc > 0, "config: convert 4 keeps each block's share of K of every row of a in shared ",
                "memory; K = ", num(p.K), " at ", num(p.M), " rows does not fit even at a cluster of 8");
    TORCH_CHECK(nc == 0 || nc >= min_nc, "config: convert 4 at K = ", num(p.K), " and ", num(p.M),
                " rows of a needs a cluster (K split) of at least ", num(min_nc), ", got ", num(nc));
  }
  if (cvt == 5) {  // as 4, with the weights through a ring of 3 or 4 slots of 32 KB
    TORCH_CHECK(rb == 0 && (kw == 0 || kw == 3 || kw == 4), "config: convert 5 takes tiles_per_block 0 and ",
                "warps_per_tile 0 (automatic), 3 or 4 (ring slots), got ", num(rb), " and ", num(kw));
    const int min_nc = skinny_gemm_fp8_wgmma_min_cluster(p);
    TORCH_CHECK(min_nc > 0, "config: convert 5 keeps each block's share of K of every row of a in shared ",
                "memory beside its ring; K = ", num(p.K), " at ", num(p.M), " rows does not fit even at a cluster of 8");
    TORCH_CHECK(nc == 0 || nc >= min_nc, "config: convert 5 at K = ", num(p.K), " and ", num(p.M),
                " rows of a needs a cluster (K split) of at least ", num(min_nc), ", got ", num(nc));
  }
#endif
  // The launcher's workspace (CUDA: the f16 copy of a for convert 3; ROCm: the split-K
  // partials and tile counters): from the caching allocator, stream-ordered, so it is
  // safe to free on return and is captured into graphs like any temporary.
  at::Tensor workspace;
  if (const int64_t bytes = skinny_gemm_fp8_workspace_bytes(p); bytes > 0) {
    workspace = at::empty({bytes}, a.options().dtype(at::kByte));
    p.workspace = workspace.data_ptr();
  }
  C10_CUDA_CHECK(static_cast<cudaError_t>(
      skinny_gemm_fp8_launch(p, c10::cuda::getCurrentCUDAStream().stream())));
}
