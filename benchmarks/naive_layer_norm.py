"""A deliberately naive CUDA LayerNorm, for the benchmarks and the roofline report only
(not part of the package): the starting point of the path from naive to roofline.

One thread per row, so a warp's 32 loads hit 32 different rows, d elements apart: every
load is its own 32-byte sector (uncoalesced), and the row is read three times (mean,
variance, output) with little of it left in L1. fp32 statistics, two passes, the same
formula as the package's kernel, so its results are comparable.

Compiled at run time with torch.utils.cpp_extension.load_inline (nvcc and ninja; the
H200 image has both); `load()` returns None, after saying why, when that fails.
"""

from __future__ import annotations

CUDA_SRC = r"""
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

template <typename T>
__global__ void naive_layer_norm_kernel(const T* x, const T* w, const T* b, T* out,
                                        int64_t rows, int64_t d, float eps) {
  const int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  const T* xr = x + r * d;
  float s = 0.0f;
  for (int64_t i = 0; i < d; ++i) s += static_cast<float>(xr[i]);
  const float mean = s / d;
  float v = 0.0f;
  for (int64_t i = 0; i < d; ++i) {
    const float c = static_cast<float>(xr[i]) - mean;
    v += c * c;
  }
  const float rstd = rsqrtf(v / d + eps);
  for (int64_t i = 0; i < d; ++i)
    out[r * d + i] = static_cast<T>((static_cast<float>(xr[i]) - mean) * rstd *
                                    static_cast<float>(w[i]) + static_cast<float>(b[i]));
}

torch::Tensor naive_layer_norm(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && w.is_contiguous() && b.is_contiguous(),
              "naive_layer_norm: contiguous CUDA tensors only");
  auto out = torch::empty_like(x);
  const int64_t d = x.size(-1), rows = x.numel() / d;
  if (rows == 0) return out;
  const int threads = 128;
  const auto blocks = static_cast<unsigned>((rows + threads - 1) / threads);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "naive_layer_norm", [&] {
    naive_layer_norm_kernel<scalar_t><<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(), b.data_ptr<scalar_t>(),
        out.data_ptr<scalar_t>(), rows, d, static_cast<float>(eps));
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
"""

CPP_SRC = "torch::Tensor naive_layer_norm(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps);"


def load():
    """The compiled `naive_layer_norm(x, w, b, eps)`, or None (printing why) if it cannot build."""
    try:
        import torch
        from torch.utils.cpp_extension import load_inline

        if not torch.cuda.is_available():
            print("naive: no CUDA device, column dropped")
            return None
        mod = load_inline(name="ik_naive_layer_norm", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                          functions=["naive_layer_norm"], extra_cuda_cflags=["-O3"], verbose=False)
        return mod.naive_layer_norm
    except Exception as e:  # noqa: BLE001 - no nvcc, no Python headers...: drop the column
        print(f"naive: could not compile ({type(e).__name__}: {str(e).splitlines()[0][:200]})")
        return None
