// Torch-facing wrappers of activation.cu: check the tensors, pick the stream, launch.
// Compiled by the host C++ compiler, so no torch header goes through nvcc.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "gpu_launchers.h"
#include "torch_binding.h"
#include "torch_checks.h"

namespace {

using namespace inference_kernels;

// scale (silu_and_mul_fp8 only) stays on the device: the kernel reads it there.
void run(const at::Tensor& x, const SiluOperands& a, const at::Tensor* scale = nullptr) {
  if (a.rows == 0 || a.d == 0) return;
  const c10::cuda::CUDAGuard guard(x.device());
  const DType dtype = gpu_dtype(x);
  const int err = silu_mul_launch(dtype, scale ? DType::kFloat8E4M3 : dtype, a,
                                  scale ? scale->const_data_ptr<float>() : nullptr,
                                  c10::cuda::getCurrentCUDAStream().stream());
  C10_CUDA_CHECK(static_cast<cudaError_t>(err));
}

}  // namespace

void silu_and_mul_cuda(at::Tensor& out, const at::Tensor& x) {
  run(x, silu_and_mul_operands(out, x, nullptr, c10::DeviceType::CUDA));
}

void silu_and_mul_fp8_cuda(at::Tensor& out, const at::Tensor& x, const at::Tensor& scale) {
  run(x, silu_and_mul_operands(out, x, &scale, c10::DeviceType::CUDA), &scale);
}

void silu_mul_cuda(at::Tensor& out, const at::Tensor& gate, const at::Tensor& up) {
  run(gate, silu_mul_operands(out, gate, up, c10::DeviceType::CUDA));
}

void silu_cuda(at::Tensor& out, const at::Tensor& x) {
  run(x, silu_operands(out, x, c10::DeviceType::CUDA));
}
