// RMSNorm and fused residual-add + RMSNorm on NVIDIA GPUs (torch-free; see
// rms_norm_torch.cpp for the tensor checks).
//
// One block per row. Pass 1 reads the row (adds the residual and writes the
// rounded sum back, when fused) and reduces the sum of squares in fp32; pass 2
// re-reads the row, which the first pass left in L1/L2, and writes the output.
// Rows that are 16-byte aligned move in 16-byte vectors; any other row takes the
// scalar path, so every size and stride the checks accept is handled.
// Rounding matches the CPU backend and HF's LlamaRMSNorm (see cpu_kernels/rms_norm.cpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "gpu_launchers.h"
#include "vec_io.cuh"

namespace {

using inference_kernels::DType;
using inference_kernels::Rows;
using namespace inference_kernels::cuda;

constexpr int kMaxThreads = 1024;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block, returned to every thread.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[kMaxThreads / 32];
  __shared__ float total;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int nwarps = (blockDim.x + 31) / 32;
    v = lane < nwarps ? partial[lane] : 0.0f;
    v = warp_sum(v);
    if (lane == 0) total = v;
  }
  __syncthreads();
  return total;
}

// x and out may be the same row (rms_norm with out=x): every element is read
// before the same thread writes it, so neither pointer is __restrict__.
template <typename T, int VEC, bool FUSED>
__global__ void rms_norm_kernel(T* out, int64_t out_stride, const T* x, int64_t x_stride,
                                T* res, int64_t res_stride, const T* __restrict__ weight,
                                int64_t d, float eps) {
  using P = Pack<T, VEC>;
  const int64_t row = blockIdx.x;
  const P* xr = reinterpret_cast<const P*>(x + row * x_stride);
  P* rr = FUSED ? reinterpret_cast<P*>(res + row * res_stride) : nullptr;
  P* orow = reinterpret_cast<P*>(out + row * out_stride);
  const P* w = reinterpret_cast<const P*>(weight);
  const int64_t nvec = d / VEC;

  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
    P a = xr[i];
    if constexpr (FUSED) {
      const P b = rr[i];
#pragma unroll
      for (int k = 0; k < VEC; ++k) a.v[k] = from_float<T>(to_float(a.v[k]) + to_float(b.v[k]));
      rr[i] = a;
    }
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float f = to_float(a.v[k]);
      sum_sq += f * f;
    }
  }
  const float inv_rms = rsqrtf(block_sum(sum_sq) / float(d) + eps);

  const P* src = FUSED ? rr : xr;
  for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
    const P a = src[i];
    const P g = w[i];
    P y;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float n = to_float(from_float<T>(to_float(a.v[k]) * inv_rms));
      y.v[k] = from_float<T>(n * to_float(g.v[k]));
    }
    orow[i] = y;
  }
}

template <typename T, bool FUSED>
void launch(Rows out, Rows x, Rows res, const void* weight, int64_t rows, int64_t d, float eps,
            cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const bool vec = d % kVec == 0 && out.stride % kVec == 0 && x.stride % kVec == 0 &&
                   (!FUSED || res.stride % kVec == 0) && aligned(out.ptr, 16) && aligned(x.ptr, 16) &&
                   (!FUSED || aligned(res.ptr, 16)) && aligned(weight, 16);
  const int64_t work = vec ? d / kVec : d;
  const int threads = static_cast<int>(std::min<int64_t>(kMaxThreads, (work + 31) / 32 * 32));
  const dim3 grid(static_cast<unsigned>(rows));
  auto args = [&](auto kernel) {
    kernel<<<grid, threads, 0, stream>>>(static_cast<T*>(out.ptr), out.stride,
                                         static_cast<const T*>(x.ptr), x.stride,
                                         static_cast<T*>(res.ptr), res.stride,
                                         static_cast<const T*>(weight), d, eps);
  };
  if (vec) {
    args(rms_norm_kernel<T, kVec, FUSED>);
  } else {
    args(rms_norm_kernel<T, 1, FUSED>);
  }
}

template <typename T>
void launch_any(Rows out, Rows x, Rows res, const void* weight, int64_t rows, int64_t d, float eps,
                cudaStream_t stream) {
  if (res.ptr) {
    launch<T, true>(out, x, res, weight, rows, d, eps, stream);
  } else {
    launch<T, false>(out, x, res, weight, rows, d, eps, stream);
  }
}

}  // namespace

namespace inference_kernels {

int rms_norm_launch(DType dtype, Rows out, Rows x, Rows res, const void* weight, int64_t rows,
                    int64_t d, float eps, void* stream) {
  if (rows <= 0 || d <= 0) return cudaSuccess;
  if (rows > INT32_MAX) return cudaErrorInvalidConfiguration;  // the wrapper refuses first
  const auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DType::kFloat32: launch_any<float>(out, x, res, weight, rows, d, eps, s); break;
    case DType::kFloat16: launch_any<__half>(out, x, res, weight, rows, d, eps, s); break;
    case DType::kBFloat16: launch_any<__nv_bfloat16>(out, x, res, weight, rows, d, eps, s); break;
    case DType::kFloat8E4M3: return cudaErrorInvalidValue;  // norms have no fp8 variant
  }
  return cudaGetLastError();
}

}  // namespace inference_kernels
