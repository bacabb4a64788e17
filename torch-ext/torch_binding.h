// Entry points of each backend, as the op registrations in torch_binding.cpp see
// them. A build compiles one backend, so only its block is declared.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

#if defined(CPU_KERNEL)
void rms_norm_cpu(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, double eps);
void fused_add_rms_norm_cpu(at::Tensor& x, at::Tensor& residual, const at::Tensor& weight,
                            double eps);
void rms_norm_fp8_cpu(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight,
                      const at::Tensor& scale, double eps,
                      const std::optional<at::Tensor>& residual);
void rms_norm_fp8_dynamic_cpu(at::Tensor& out, at::Tensor& scales, const at::Tensor& x,
                              const at::Tensor& weight, double eps,
                              const std::optional<at::Tensor>& residual);
void layer_norm_cpu(at::Tensor& out, const at::Tensor& x, const std::optional<at::Tensor>& weight,
                    const std::optional<at::Tensor>& bias, double eps);
void silu_and_mul_cpu(at::Tensor& out, const at::Tensor& x);
void silu_and_mul_fp8_cpu(at::Tensor& out, const at::Tensor& x, const at::Tensor& scale);
void silu_mul_cpu(at::Tensor& out, const at::Tensor& gate, const at::Tensor& up);
void silu_cpu(at::Tensor& out, const at::Tensor& x);
void matmul_cpu(at::Tensor& out, const at::Tensor& a, const at::Tensor& b);
void skinny_gemm_fp8_cpu(at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                         const at::Tensor& scale_a, const at::Tensor& scale_b,
                         const std::optional<at::Tensor>& bias, at::IntArrayRef config);
#endif

// ROCm shares the CUDA wrappers (cuda_kernels/*_torch.cpp): a ROCm build of torch
// serves the c10/cuda API on HIP devices, which it registers as kCUDA.
#if defined(CUDA_KERNEL) || defined(ROCM_KERNEL)
void rms_norm_cuda(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, double eps);
void fused_add_rms_norm_cuda(at::Tensor& x, at::Tensor& residual, const at::Tensor& weight,
                             double eps);
void rms_norm_fp8_cuda(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight,
                       const at::Tensor& scale, double eps,
                       const std::optional<at::Tensor>& residual);
void rms_norm_fp8_dynamic_cuda(at::Tensor& out, at::Tensor& scales, const at::Tensor& x,
                               const at::Tensor& weight, double eps,
                               const std::optional<at::Tensor>& residual);
void layer_norm_cuda(at::Tensor& out, const at::Tensor& x, const std::optional<at::Tensor>& weight,
                     const std::optional<at::Tensor>& bias, double eps);
void silu_and_mul_cuda(at::Tensor& out, const at::Tensor& x);
void silu_and_mul_fp8_cuda(at::Tensor& out, const at::Tensor& x, const at::Tensor& scale);
void silu_mul_cuda(at::Tensor& out, const at::Tensor& gate, const at::Tensor& up);
void silu_cuda(at::Tensor& out, const at::Tensor& x);
void q4k_gemv_cuda(at::Tensor& out, const at::Tensor& x, const at::Tensor& q);
void q6k_gemv_cuda(at::Tensor& out, const at::Tensor& x, const at::Tensor& q);
void skinny_gemm_fp8_cuda(at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                          const at::Tensor& scale_a, const at::Tensor& scale_b,
                          const std::optional<at::Tensor>& bias, at::IntArrayRef config);
#endif

// GGUF k-quants: the CPU kernels (cpu_kernels/q4k.cpp) are in every variant but Metal's.
// A GPU build quantises weights on the CPU and checks its gemv against the CPU one.
#if defined(CPU_KERNEL) || defined(CUDA_KERNEL) || defined(ROCM_KERNEL)
void quantize_q4_k_cpu(at::Tensor& out, const at::Tensor& weight,
                       const std::optional<at::Tensor>& imatrix);
void quantize_q6_k_cpu(at::Tensor& out, const at::Tensor& weight,
                       const std::optional<at::Tensor>& imatrix);
void dequantize_q4_k_cpu(at::Tensor& out, const at::Tensor& q);
void dequantize_q6_k_cpu(at::Tensor& out, const at::Tensor& q);
void q4k_gemv_cpu(at::Tensor& out, const at::Tensor& x, const at::Tensor& q);
void q6k_gemv_cpu(at::Tensor& out, const at::Tensor& x, const at::Tensor& q);
std::string cpu_isa_cpu();
#endif

// Metal (torch::kMPS): metal_kernels/*_mps.cpp check the tensors and describe each
// dispatch; metal_kernels/mps_dispatch.mm encodes it on PyTorch's MPS stream.
#if defined(METAL_KERNEL)
void rms_norm_mps(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, double eps);
void fused_add_rms_norm_mps(at::Tensor& x, at::Tensor& residual, const at::Tensor& weight,
                            double eps);
void layer_norm_mps(at::Tensor& out, const at::Tensor& x, const std::optional<at::Tensor>& weight,
                    const std::optional<at::Tensor>& bias, double eps);
void silu_and_mul_mps(at::Tensor& out, const at::Tensor& x);
void silu_mul_mps(at::Tensor& out, const at::Tensor& gate, const at::Tensor& up);
void silu_mps(at::Tensor& out, const at::Tensor& x);
void q4k_gemv_mps(at::Tensor& out, const at::Tensor& x, const at::Tensor& q);
void q6k_gemv_mps(at::Tensor& out, const at::Tensor& x, const at::Tensor& q);
void matmul_mps(at::Tensor& out, const at::Tensor& a, const at::Tensor& b);
#endif
