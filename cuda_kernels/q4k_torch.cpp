// Torch-facing wrappers of q4k.cu (q4k_gemv, q6k_gemv on CUDA): check the tensors,
// pick the stream, launch. Compiled by the host C++ compiler.
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <vector>

#include "ggml_blocks.h"
#include "gpu_launchers.h"
#include "torch_binding.h"
#include "torch_checks.h"

namespace {

using namespace inference_kernels;

constexpr int64_t kMaxRows = 8;

void gemv(at::Tensor& out, const at::Tensor& x, const at::Tensor& q, KQuant format) {
  const bool q4 = format == KQuant::kQ4K;
  const char* fmt = q4 ? "Q4_K" : "Q6_K";
  const int64_t bytes = q4 ? sizeof(ggml::BlockQ4K) : sizeof(ggml::BlockQ6K);
  // 16-byte loads of Q4_K blocks (144 bytes: rows stay 16-aligned). Q6_K blocks (210
  // bytes) are read as the aligned words covering them: 2-aligned is enough, as for
  // ggml; a view starting 2 bytes into a word has its storage's bytes before it.
  const int64_t q_align = q4 ? 16 : 2;

  check_device(x, c10::DeviceType::CUDA, "x");
  check_float_dtype(x, "x");
  TORCH_CHECK(x.dim() == 2, "x must be 2-D [M, K], got shape ", dims_str(x.sizes()));
  const int64_t m = x.size(0), k = x.size(1);
  TORCH_CHECK(m >= 1 && m <= kMaxRows, "x must have 1 to 8 rows (M), got ", num(m),
              "; for more rows dequantise and use a matmul");
  TORCH_CHECK(k % ggml::kQK == 0, "K (x's last dimension) must be a multiple of 256, the ", fmt,
              " super-block, got ", num(k));
  TORCH_CHECK(x.stride(1) == 1, "x must be contiguous in its last dimension, got stride ",
              num(x.stride(1)), " (call .contiguous() first)");

  check_same_device(q, x, "q", "x");
  TORCH_CHECK(q.scalar_type() == at::kByte, "q must be uint8 (", fmt, " blocks), got ",
              c10::toString(q.scalar_type()));
  // Two layouts: ggml's rows of blocks [N, K / 256 * bytes], or the tiled one
  // [ceil(N / 16), K / 256, 16 * bytes] (gguf_blocks.tile; N then comes from out).
  const bool tiled = q.dim() == 3;
  const int64_t tile_bytes = q4 ? ggml::kQ4KTileBytes : ggml::kQ6KTileBytes;
  TORCH_CHECK(q.dim() == 2 || tiled, "q must be 2-D [N, K / 256 * ", num(bytes), "] (", fmt,
              " blocks) or the tiled layout [ceil(N / 16), K / 256, ", num(tile_bytes), "], got shape ",
              dims_str(q.sizes()));
  if (tiled) {
    TORCH_CHECK(q.size(2) == tile_bytes, "tiled ", fmt, " must have shape [ceil(N / 16), K / 256, ",
                num(tile_bytes), "], got ", dims_str(q.sizes()));
  } else {
    TORCH_CHECK(q.size(1) % bytes == 0, "q must have shape [N, K / 256 * ", num(bytes), "] (", fmt,
                " blocks of ", num(bytes), " bytes), got ", dims_str(q.sizes()));
  }
  TORCH_CHECK(q.is_contiguous(), "q must be contiguous");
  // Tiled blocks are read in 16-byte loads in either format.
  const int64_t align = tiled ? 16 : q_align;
  TORCH_CHECK(reinterpret_cast<uintptr_t>(q.const_data_ptr()) % align == 0, "q must start at an ",
              "address aligned to ", num(align), " bytes (", fmt, tiled ? " tiled" : "", " on CUDA)");
  const int64_t blocks = tiled ? q.size(1) : q.size(1) / bytes;
  TORCH_CHECK(k == blocks * ggml::kQK, "x must have K = ", num(blocks * ggml::kQK), " columns (q holds ",
              num(blocks), " ", fmt, " blocks of 256 per row), got ", num(k));
  // The kernel splits K's blocks between warps in 32-bit arithmetic (q4k.cu).
  TORCH_CHECK(blocks <= (int64_t{1} << 28), "the CUDA ", fmt, " gemv takes at most 2^28 blocks of 256 a row (K <= ",
              num(int64_t{256} << 28), "), got K = ", num(k));

  check_same(out, x, "out", "x");
  TORCH_CHECK(out.dim() == 2, "out must be 2-D [M, N], got shape ", dims_str(out.sizes()));
  const int64_t n = tiled ? out.size(1) : q.size(0);
  if (tiled) {
    const int64_t tiles = (n + ggml::kTileRows - 1) / ggml::kTileRows;
    TORCH_CHECK(q.size(0) == tiles, "tiled ", fmt, " for N = ", num(n), " (out's columns) must have ",
                num(tiles), " tiles of ", num(ggml::kTileRows), " rows, got ", num(q.size(0)));
  }
  const std::vector<int64_t> want = {m, n};
  TORCH_CHECK(out.sizes() == c10::IntArrayRef(want), "out must have shape ", dims_str(want), ", got ",
              dims_str(out.sizes()));
  TORCH_CHECK(out.is_contiguous(), "out must be contiguous");
  check_no_overlap(out, "out", x, "x");
  check_no_overlap(out, "out", q, "q");
  if (n == 0) return;

  const c10::cuda::CUDAGuard guard(x.device());
  // The kernel reads x in 16-byte vectors: rows must start 16-byte aligned. Other
  // layouts (a view a column in, an odd row stride) are copied first: x is at most
  // 8 x K, tiny next to the weight.
  at::Tensor xs = x;
  constexpr int64_t kVecBytes = 16;
  if (reinterpret_cast<uintptr_t>(x.const_data_ptr()) % kVecBytes != 0 ||
      (m > 1 && (x.stride(0) * x.element_size()) % kVecBytes != 0)) {
    xs = at::empty({m, k}, x.options());
    xs.copy_(x);
  }
  KQuantGemvParams p{};
  p.dtype = gpu_dtype(x);
  p.format = format;
  p.x = xs.const_data_ptr();
  p.x_stride = m > 1 ? xs.stride(0) : k;
  p.q = q.const_data_ptr();
  p.out = out.data_ptr();
  p.m = m;
  p.n = n;
  p.k = k;
  p.tiled = tiled;
  C10_CUDA_CHECK(static_cast<cudaError_t>(
      kquant_gemv_launch(p, c10::cuda::getCurrentCUDAStream().stream())));
}

}  // namespace

void q4k_gemv_cuda(at::Tensor& out, const at::Tensor& x, const at::Tensor& q) {
  gemv(out, x, q, KQuant::kQ4K);
}

void q6k_gemv_cuda(at::Tensor& out, const at::Tensor& x, const at::Tensor& q) {
  gemv(out, x, q, KQuant::kQ6K);
}
