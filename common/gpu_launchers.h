// C launchers exported by the GPU kernel files (.cu, .hip). They take raw pointers,
// sizes and a stream, and include no torch header: the torch-facing wrappers
// (compiled by the host C++ compiler) check the tensors and call them. The CPU
// kernels take the same operand structs, built by the same checks (torch_checks.h).
#pragma once

#include <cstdint>

namespace inference_kernels {

// Activation dtypes, and the fp8 format the *_fp8 ops write: float8_e4m3fn from the
// CUDA launchers, float8_e4m3fnuz from the ROCm ones (common/fp8.h).
enum class DType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2, kFloat8E4M3 = 3 };

// rows x d elements, row_stride elements between rows (last dimension contiguous).
struct Rows {
  void* ptr;
  int64_t stride;
};

// What a norm writes: the normalised row in x's dtype, or its float8_e4m3fn
// quantisation with a static scale (scale[0]) or a scale per row (row_scales).
enum class NormOut : int { kSame = 0, kFp8Static = 1, kFp8Dynamic = 2 };

// With res.ptr: res <- round(x + res), and res is what gets normalised.
// y = weight * round(src * inv_rms), rounded to x's dtype; out <- y (kSame, out may
// be x) or out <- fp8(clamp(y / scale)).
struct NormParams {
  DType dtype;
  NormOut mode;
  Rows out, x, res;
  const void* weight;
  const float* scale;  // kFp8Static, device memory, one element
  float* row_scales;   // kFp8Dynamic, one per row
  int64_t rows, d;
  float eps;
};

// Returns the launch status (a cudaError_t / hipError_t as int; 0 is success).
int rms_norm_launch(const NormParams& p, void* stream);

// LayerNorm over the last dimension: y = (x - mean) * rstd * weight + bias, statistics
// in fp32 (mean, then the biased variance of x - mean: two passes), y rounded once
// to `dtype`. weight and bias may be null (1 and 0); out may be x.
struct LayerNormParams {
  DType dtype;
  Rows out, x;
  const void* weight;  // d elements of `dtype`, or null
  const void* bias;    // d elements of `dtype`, or null
  int64_t rows, d;
  float eps;
};

// Returns the launch status (0 is success).
int layer_norm_launch(const LayerNormParams& p, void* stream);

// silu and SwiGLU over `rows` rows of d elements. up.ptr == nullptr: plain silu.
// silu_and_mul passes x twice: gate at column 0, up at column d of the same rows.
struct SiluOperands {
  Rows out, gate, up;
  int64_t rows, d;
};

// With s = round(silu(float(gate))) and round() to `dtype`, as HF's LlamaMLP and vLLM:
//   up.ptr == nullptr:          out <- s
//   out_dtype == dtype:         out <- round(float(s) * float(up))
//   out_dtype == kFloat8E4M3:   out <- fp8(clamp(float(y) * (1 / *scale), +-448)),
//                               (+-240, e4m3fnuz, on ROCm)
//                               y the rounded product; scale points to one float in
//                               device memory (read by the kernel: no host sync).
// Returns the launch status (0 is success).
int silu_mul_launch(DType dtype, DType out_dtype, const SiluOperands& a, const float* scale,
                    void* stream);

// GGUF k-quant mat-vec: out [m, n] <- x [m, k] @ dequantize(q).T, m in 1..8, fp32
// accumulation, out in x's dtype. q: n rows of k / 256 ggml blocks back to back
// (common/ggml_blocks.h), 16-byte aligned for Q4_K, 2-byte aligned for Q6_K. x: rows
// x_stride elements apart, contiguous within a row, 16-byte aligned rows. out: contiguous.
enum class KQuant : int { kQ4K = 0, kQ6K = 1 };

struct KQuantGemvParams {
  DType dtype;
  KQuant format;
  const void* x;
  int64_t x_stride;  // elements between rows of x
  const void* q;
  void* out;
  int64_t m, n, k;
  bool tiled;  // q in the tiled layout (ggml_blocks.h), else ggml's rows
};

// Returns the launch status (0 is success).
int kquant_gemv_launch(const KQuantGemvParams& p, void* stream);

// FP8 GEMM for decode batch sizes (skinny_gemm.cu):
//   out[m, n] <- round(sum_k a[m, k] * b[n, k] * scale_a * scale_b[n or 0] + bias[n])
// a: float8_e4m3fn [M, K] (row stride lda bytes), b: float8_e4m3fn [N, K] (nn.Linear's
// weight layout, row stride ldb bytes), products summed in fp32 (convert 7 below: 16 at a
// time in f16 first); out [M, N] (row stride ldo elements) fp16 or bf16, bias (optional)
// in out's dtype. Scales live in device memory (read by the kernel: no host sync). Any M
// (the kernel is built for M <= 32; larger M re-reads the weight once per 32 rows), any N
// and K, any alignment: rows that are 16-byte aligned with K % 16 == 0 take the
// 16-byte-load path, anything else a byte path.
struct SkinnyGemmParams {
  DType out_dtype;  // kFloat16 or kBFloat16
  void* out;
  int64_t ldo;
  const void* a;
  int64_t lda;
  const void* b;
  int64_t ldb;
  const float* scale_a;  // one element
  const float* scale_b;  // one element, or N when scale_b_per_channel
  bool scale_b_per_channel;
  const void* bias;  // N elements of out_dtype, or null
  int64_t M, N, K;
  // Work split, 0 = the launcher's choice (benchmarks sweep these): tiles of 32 weight
  // rows per block, K splits among the warps of a block, K splits among the blocks of a
  // thread-block cluster (1..8, reduced through distributed shared memory). Convert 4
  // reads tiles_per_block as warpgroups a block (1, 2) and warps_per_tile as groups of 8
  // chunks each lane keeps in flight (1, 2; 2 at M <= 16 only); convert 5 reads
  // warps_per_tile as its ring's slots (3, 4; tiles_per_block must be 0); convert 6 reads
  // tiles_per_block as consumer warpgroups a block (1, 2; 64 weight rows each) and
  // `cluster`; warps_per_tile must be 0.
  int tiles_per_block, warps_per_tile, cluster;
  // The fast path's kernel, named by how the fp8 activation reaches the tensor cores: 1
  // the conversion instruction in every warp (exact, NaN stays NaN), 2 integer bit
  // operations in every warp (exact for every finite value, an fp8 NaN reads as 480), 3
  // once, by a pre-pass into an f16 copy of a in `workspace` (exact, NaN stays NaN), 4 none:
  // Hopper's fp8 warpgroup MMA with the weight in registers (sm_90a, M <= 32; NaN stays
  // NaN; sums move from the MMA's accumulator, which keeps fewer bits than fp32, into fp32
  // every 8 chunks of 64 K bytes), 5 as 4 in persistent clusters, the weights through a
  // cp.async ring, 6 none: the same MMAs with both operands copied to shared memory by the
  // tensor memory accelerator (sm_90a, M <= 32; sums into fp32 every 256 K bytes; the
  // default at N >= 1024), 7 (M <= kSkinnyGemmRowsMaxM) no tensor cores: whole weight rows a block, no split of
  // K between blocks, products exact in f16 with a scaled by 2^-8, summed 16 at a time in
  // f16, then in fp32, 8 (M = 1, sm_90a, K <= kSkinnyGemmRowsWgmmaMaxK) 7's division with
  // 4's MMAs: whole weight rows a block (tiles_per_block: 1, 2, 4 or 8 rows), the MMA's
  // logical rows those rows cut into slices of K (warps_per_tile: 1 or 2 groups of 8 steps
  // in flight; sums into fp32 every 8 steps). 0 = the launcher's choice; skinny_gemm.cu's
  // convert_for has the rules and their measurements.
  int convert;
  // Workspace of skinny_gemm_fp8_workspace_bytes(p) bytes (16-byte aligned), or null
  // where that is 0: the f16 copy of a for convert 3 (CUDA); the split-K partials and
  // per-tile arrival counters (ROCm; the launcher zeroes the counters itself).
  void* workspace;
};

// Convert 7 takes at most this many rows of a (f16 in registers; in its persistent blocks
// the second row in shared memory).
constexpr int64_t kSkinnyGemmRowsMaxM = 2;

// Convert 8 keeps the activation's whole row in a block's shared memory: K up to this.
constexpr int64_t kSkinnyGemmRowsWgmmaMaxK = 131072;

// Bytes of workspace the launch needs for these operands and options (0: none), on the
// current device (ROCm's split depends on its CU count).
int64_t skinny_gemm_fp8_workspace_bytes(const SkinnyGemmParams& p);

// convert 4, or 5 where p.convert is 5 (CUDA): the smallest `cluster` (K split) whose share
// of the activation fits in a block's shared memory, 0 if none up to 8 does.
int skinny_gemm_fp8_wgmma_min_cluster(const SkinnyGemmParams& p);

// Returns the launch status (0 is success).
int skinny_gemm_fp8_launch(const SkinnyGemmParams& p, void* stream);

}  // namespace inference_kernels
