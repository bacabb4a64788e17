// silu, and SwiGLU (silu(gate) * up, optionally quantised to fp8) on NVIDIA GPUs
// (torch-free; see activation_torch.cpp for the tensor checks).
//
// Element-wise. A block covers `ty` rows and `tx * kItems` vectors of each (a 2-D
// grid: rows on x, column chunks on y), so no thread divides to find its row, and
// each thread issues all kItems 16-byte loads of both inputs before it computes:
// 64 bytes in flight a thread (kItems 2) keep HBM busy with fewer threads; decode
// sizes take one vector a thread over smaller blocks instead. When every row of
// every operand is aligned to its vector and d is a multiple of the vector width,
// a thread moves 16 bytes of each input per item; any other layout takes the
// one-element path, so every size and stride the checks accept is handled. The
// checks refuse an out that overlaps an input, so inputs are const __restrict__.
//
// Rounding matches the CPU backend, HF's LlamaMLP and vLLM (see
// cpu_kernels/activation.cpp): s = round(silu(float(gate))), y = round(float(s) *
// float(up)). For fp16/bf16, silu(v) = v * rcp(1 + exp(-v)) with the hardware
// exp2 and a correctly rounded reciprocal: relative error ~2^-21 in fp32, far below
// the dtype's 2^-8..2^-11 rounding, so s is torch's on all but ~0.1% of elements
// (one ulp off there). torch's accurate expf and IEEE division cost ~30 instructions
// an element, which made the fp8 kernel issue-bound (12 us of instructions against
// a 16 us memory floor at 2048 x 13312 on an H200). fp32 keeps the accurate path:
// nothing rounds its error away, and it moves twice the bytes an element.
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "activation.cuh"
#include "gpu_launchers.h"
#include "ptx.cuh"
#include "vec_io.cuh"

namespace {

using namespace inference_kernels;
using namespace inference_kernels::cuda;
using inference_kernels::cuda::SiluConfig;
using Fp8 = __nv_fp8_storage_t;

constexpr int kThreads = 256;  // the default block
constexpr int kMaxThreads = 512;   // what a forced layout may ask (tune_norms)
constexpr int kMaxChunks = 65535;  // gridDim.y limit; more chunks loop

template <typename T>
__device__ __forceinline__ float silu(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v / (1.0f + expf(-v));  // torch's own formula and accuracy
  } else {
    // Past v = -88.7 exp(-v) overflows to inf and the result is -0, as torch's; the
    // reciprocal keeps subnormal results (no .ftz), so the range just above that
    // (1 + exp(-v) > 2^126) stays a normal bf16 as torch's division gives.
    float r;
    asm("rcp.approx.f32 %0, %1;" : "=f"(r) : "f"(1.0f + __expf(-v)));
    return v * r;
  }
}

// MUL: out <- round(round(silu(gate)) * up); otherwise out <- round(silu(gate)).
// Out is T, or Fp8 (MUL only) for the quantised product.
// kItems 16-byte vectors of each input a thread loads at once.
template <typename T, typename Out, int VEC, int kItems, bool MUL>
__global__ void __launch_bounds__(kMaxThreads)
    silu_mul_kernel(Out* __restrict__ out, int64_t out_stride, const T* __restrict__ gate,
                    int64_t gate_stride, const T* __restrict__ up, int64_t up_stride,
                    const float* __restrict__ scale, int64_t rows, int nvec) {
  using In = Pack<T, VEC>;
  using O = Pack<Out, VEC>;
  constexpr bool kFp8 = std::is_same_v<Out, Fp8>;
  // vLLM's convention: multiply by the reciprocal of the scale, read from device
  // memory (no host sync; a CUDA graph replays a new scale). Issued first, and every
  // load is ld_ordered (ptx.cuh), so all are in flight before any arithmetic: at decode
  // sizes the kernel is one memory latency long, not three.
  float scale_in = kFp8 ? ld_ordered(scale) : 1.0f;

  const int64_t r = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  if (r >= rows) return;
  const In* g = reinterpret_cast<const In*>(gate + r * gate_stride);
  const In* u = reinterpret_cast<const In*>(MUL ? up + r * up_stride : gate);
  O* o = reinterpret_cast<O*>(out + r * out_stride);
  const int chunk = blockDim.x * kItems;
  for (int c0 = blockIdx.y * chunk + threadIdx.x; c0 < nvec; c0 += gridDim.y * chunk) {
    In gv[kItems], uv[kItems];
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int c = c0 + k * blockDim.x;
      if (c < nvec) {
        gv[k] = ld_ordered(g + c);
        if constexpr (MUL) uv[k] = ld_ordered(u + c);
      }
    }
    // After the loads: the correctly rounded reciprocal has a slow-path call.
    const float inv_scale = kFp8 ? __frcp_rn(after_loads(scale_in)) : 1.0f;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int c = c0 + k * blockDim.x;
      if (c >= nvec) break;
      O y;
      if constexpr (kFp8) {
        // Two at a time: one cvt.rn.satfinite.e4m3x2 a pair. satfinite saturates to
        // +-448 and keeps NaN, the semantics clamp_fp8 gives the other backends.
#pragma unroll
        for (int j = 0; j < VEC; j += 2) {
          float2 q;
          q.x = to_float(from_float<T>(to_float(from_float<T>(silu<T>(to_float(gv[k].v[j])))) *
                                       to_float(uv[k].v[j]))) * inv_scale;
          if constexpr (VEC > 1) {
            q.y = to_float(from_float<T>(to_float(from_float<T>(silu<T>(to_float(gv[k].v[j + 1])))) *
                                         to_float(uv[k].v[j + 1]))) * inv_scale;
            const __nv_fp8x2_storage_t p = __nv_cvt_float2_to_fp8x2(q, __NV_SATFINITE, __NV_E4M3);
            y.v[j] = static_cast<Fp8>(p & 0xFF);
            y.v[j + 1] = static_cast<Fp8>(p >> 8);
          } else {
            y.v[j] = __nv_cvt_float_to_fp8(q.x, __NV_SATFINITE, __NV_E4M3);
          }
        }
      } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          float v = silu<T>(to_float(gv[k].v[j]));
          if constexpr (MUL) v = to_float(from_float<T>(v)) * to_float(uv[k].v[j]);
          y.v[j] = from_float<T>(v);
        }
      }
      o[c] = y;
    }
  }
}

template <typename T, typename Out, bool MUL>
int launch(const SiluOperands& a, const float* scale, const SiluConfig* forced, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const bool vec = a.d % kVec == 0 && a.gate.stride % kVec == 0 && aligned(a.gate.ptr, 16) &&
                   (!MUL || (a.up.stride % kVec == 0 && aligned(a.up.ptr, 16))) &&
                   a.out.stride % kVec == 0 && aligned(a.out.ptr, sizeof(Pack<Out, kVec>));
  const int64_t nvec = vec ? a.d / kVec : a.d;
  // Two vectors a thread when there is work for every SM many times over; for
  // decode-sized inputs one, over blocks of at most 128 threads across a row: the
  // work then spreads over more SMs and each thread's chain of math is shorter (the
  // time is latency there, not bandwidth).
  const bool small = a.rows * nvec < int64_t{132} * kThreads * 4;
  const int items = forced ? forced->items : small ? 1 : 2;
  const int max_tx = forced ? forced->threads : small ? 128 : kThreads;
  if (max_tx < 32 || max_tx > kMaxThreads || max_tx % 32 || (items != 1 && items != 2 && items != 4))
    return cudaErrorInvalidConfiguration;
  // Threads across a row: enough for the row's vectors (a warp at least); the rest
  // of the block's threads take further rows, so short rows still fill whole blocks.
  const int64_t per_row = (nvec + items - 1) / items;
  const int tx = static_cast<int>(std::min<int64_t>(max_tx, (per_row + 31) / 32 * 32));
  const int ty = std::max(1, max_tx / tx);
  const int64_t chunks = std::min<int64_t>((nvec + int64_t(tx) * items - 1) / (int64_t(tx) * items),
                                           kMaxChunks);
  const dim3 grid(static_cast<unsigned>((a.rows + ty - 1) / ty), static_cast<unsigned>(chunks));
  const dim3 block(tx, ty);
  auto run = [&](auto kernel) {
    kernel<<<grid, block, 0, stream>>>(static_cast<Out*>(a.out.ptr), a.out.stride,
                                       static_cast<const T*>(a.gate.ptr), a.gate.stride,
                                       static_cast<const T*>(a.up.ptr), a.up.stride, scale, a.rows,
                                       static_cast<int>(nvec));
  };
  auto by_items = [&](auto vec_c) {
    constexpr int V = decltype(vec_c)::value;
    if (items == 1) run(silu_mul_kernel<T, Out, V, 1, MUL>);
    else if (items == 2) run(silu_mul_kernel<T, Out, V, 2, MUL>);
    else run(silu_mul_kernel<T, Out, V, 4, MUL>);
  };
  vec ? by_items(std::integral_constant<int, kVec>{}) : by_items(std::integral_constant<int, 1>{});
  return cudaSuccess;
}

template <typename T>
int launch_any(DType out_dtype, const SiluOperands& a, const float* scale, const SiluConfig* forced,
               cudaStream_t stream) {
  const bool mul = a.up.ptr != nullptr;
  if (out_dtype == DType::kFloat8E4M3) {
    if (!mul || !scale) return cudaErrorInvalidValue;  // fp8 only for the product, with a scale
    return launch<T, Fp8, true>(a, scale, forced, stream);
  }
  return mul ? launch<T, T, true>(a, nullptr, forced, stream) : launch<T, T, false>(a, nullptr, forced, stream);
}

}  // namespace

namespace inference_kernels {

int silu_mul_launch_with(DType dtype, DType out_dtype, const SiluOperands& a, const float* scale,
                         const cuda::SiluConfig* forced, void* stream) {
  if (a.rows <= 0 || a.d <= 0) return cudaSuccess;
  if (out_dtype != dtype && out_dtype != DType::kFloat8E4M3) return cudaErrorInvalidValue;
  // Rows go on the grid's x (up to 2^31 - 1 blocks), a row's vectors are int-indexed.
  if (a.rows > INT32_MAX || a.d > INT32_MAX) return cudaErrorInvalidConfiguration;
  const auto s = static_cast<cudaStream_t>(stream);
  int err = cudaErrorInvalidValue;
  switch (dtype) {
    case DType::kFloat32: err = launch_any<float>(out_dtype, a, scale, forced, s); break;
    case DType::kFloat16: err = launch_any<__half>(out_dtype, a, scale, forced, s); break;
    case DType::kBFloat16: err = launch_any<__nv_bfloat16>(out_dtype, a, scale, forced, s); break;
    case DType::kFloat8E4M3: break;  // not an input dtype
  }
  return err != cudaSuccess ? err : cudaGetLastError();
}

int silu_mul_launch(DType dtype, DType out_dtype, const SiluOperands& a, const float* scale,
                    void* stream) {
  return silu_mul_launch_with(dtype, out_dtype, a, scale, nullptr, stream);
}

}  // namespace inference_kernels
