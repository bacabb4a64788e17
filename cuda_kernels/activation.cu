// silu, and SwiGLU (silu(gate) * up, optionally quantised to fp8) on NVIDIA GPUs
// (torch-free; see activation_torch.cpp for the tensor checks).
//
// Element-wise, two kernels. Up to 65535 rows (fp32: and 8 MB of input) silu_mul_lean:
// one vector a thread, column chunks on the grid's x and rows on y. Beyond,
// silu_mul_kernel: a block covers `ty` rows and `tx` vectors of each (rows on x, column
// chunks on y). Neither divides to find a row, and each thread issues the loads of
// both inputs before it computes. A
// thread moves one 4-, 8- or 16-byte vector of each input: launch picks the width from
// the input's size, or the widest below it that every row of every operand is aligned
// to (d a multiple of its width); any other layout takes the one-element path, so every
// size and stride the checks accept is handled. The checks refuse an out that overlaps
// an input, so inputs are const __restrict__.
//
// Rounding matches the CPU backend, HF's LlamaMLP and vLLM (see
// cpu_kernels/activation.cpp): s = round(silu(float(gate))), y = round(float(s) *
// float(up)). For fp16/bf16, silu(v) = v * rcp(1 + exp(-v)) with the hardware
// exp2 and reciprocal (each within ~2 ulps of fp32): relative error ~2^-21, far below
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
#include "launch.cuh"
#include "ptx.cuh"
#include "vec_io.cuh"

namespace {

using namespace inference_kernels;
using namespace inference_kernels::cuda;
using inference_kernels::cuda::SiluConfig;
using Fp8 = __nv_fp8_storage_t;

constexpr int kMaxThreads = 512;   // what a forced shape may ask (tune_norms)
constexpr int kMaxChunks = 65535;  // gridDim.y limit; more chunks loop

template <typename T>
__device__ __forceinline__ float silu(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v / (1.0f + expf(-v));  // torch's own formula and accuracy
  } else {
    // exp(-v) with ex2.approx.ftz: a flushed (subnormal) exp leaves 1 + exp(-v) = 1
    // and a flushed argument gives exp = 1, as unflushed ones would: no fix-ups needed.
    // Past v = -88.7 exp(-v) overflows to inf and the result is -0, as torch's. bf16
    // keeps subnormal reciprocals (no .ftz), so the range just above that (1 + exp(-v)
    // > 2^126) stays a normal bf16 as torch's division gives; in fp16 those results
    // round to -0 anyway, so fp16 flushes and skips the fix-up.
    float e, r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(v * -1.4426950408889634f));
    if constexpr (std::is_same_v<T, __half>) {
      asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
    } else {
      asm("rcp.approx.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
    }
    return v * r;
  }
}

// The fp8 product's factor: rn(1 / scale), vLLM's convention. __frcp_rn branches on the
// scale before its fast path, and every element's math waited on that branch (s28a, one
// row: 1.25 us, against 1.18 with the fast path alone and no branch; 1.23 in this form,
// s28b); here the fast path runs straight (it overlaps the silu math) and the rare
// scales it does not round correctly take __frcp_rn afterwards (swiglu_scaled redoes the
// vector). The fast path is __frcp_rn's own: exact for normal scales
// whose reciprocal is normal, 2^-126 <= |scale| < 2^126.
__device__ __forceinline__ float rcp_fast(float s) {
  float a;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(a) : "f"(s));
  return fmaf(a, fmaf(-s, a, 1.0f), a);
}
__device__ __forceinline__ bool rcp_fast_exact(float s) {
  return ((__float_as_uint(s) + 0x1800000u) & 0x7f800000u) > 0x1ffffffu;
}

// A thread's output vector: fp8 in 16-bit pairs, as cvt.e4m3x2 makes them (a vector of
// bytes was split and put back together around the rare-scale branch: 3 more instructions).
template <typename Out, int VEC>
using OutVec = std::conditional_t<std::is_same_v<Out, Fp8> && VEC >= 2, Pack<uint16_t, VEC / 2>, Pack<Out, VEC>>;

// One VEC-element vector. MUL: out <- round(round(silu(gate)) * up); otherwise out <-
// round(silu(gate)). Out is T, or Fp8 (MUL only): the product times inv_scale, saturated.
template <typename T, typename Out, int VEC, bool MUL>
__device__ __forceinline__ OutVec<Out, VEC> swiglu_vec(const Pack<T, VEC>& gv, const Pack<T, VEC>& uv,
                                                       float inv_scale) {
  OutVec<Out, VEC> y;
  if constexpr (sizeof(T) == 2 && VEC % 2 == 0) {
    // 16-bit pairs: silu's two roundings in one packed cvt, the product with up in one
    // packed multiply (Pair16::mul: the same bits as the fp32 product rounded to T).
    uint32_t gu[VEC / 2], uu[VEC / 2];
    __builtin_memcpy(gu, &gv, sizeof gu);
    if constexpr (MUL) __builtin_memcpy(uu, &uv, sizeof uu);
#pragma unroll
    for (int j = 0; j < VEC / 2; ++j) {
      const float2 g = Pair16<T>::unpack(gu[j]);
      uint32_t s = Pair16<T>::pack(silu<T>(g.x), silu<T>(g.y));
      if constexpr (MUL) s = Pair16<T>::mul(s, uu[j]);
      if constexpr (std::is_same_v<Out, Fp8>) {
        const float2 q = Pair16<T>::unpack(s);
        // satfinite: saturates to +-448 and keeps NaN, clamp_fp8's semantics.
        y.v[j] = __nv_cvt_float2_to_fp8x2(make_float2(q.x * inv_scale, q.y * inv_scale), __NV_SATFINITE,
                                          __NV_E4M3);  // low byte: element 2j
      } else {
        __builtin_memcpy(&y.v[2 * j], &s, 4);
      }
    }
  } else if constexpr (std::is_same_v<Out, Fp8>) {
    // Two at a time: one cvt.rn.satfinite.e4m3x2 a pair. satfinite saturates to +-448 and
    // keeps NaN, the semantics clamp_fp8 gives the other backends.
#pragma unroll
    for (int j = 0; j < VEC; j += 2) {
      float2 q;
      q.x = to_float(from_float<T>(to_float(from_float<T>(silu<T>(to_float(gv.v[j])))) *
                                   to_float(uv.v[j]))) * inv_scale;
      if constexpr (VEC > 1) {
        q.y = to_float(from_float<T>(to_float(from_float<T>(silu<T>(to_float(gv.v[j + 1])))) *
                                     to_float(uv.v[j + 1]))) * inv_scale;
        y.v[j / 2] = __nv_cvt_float2_to_fp8x2(q, __NV_SATFINITE, __NV_E4M3);  // low byte: element j
      } else {
        y.v[j] = __nv_cvt_float_to_fp8(q.x, __NV_SATFINITE, __NV_E4M3);
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      float v = silu<T>(to_float(gv.v[j]));
      if constexpr (MUL) v = to_float(from_float<T>(v)) * to_float(uv.v[j]);
      y.v[j] = from_float<T>(v);
    }
  }
  return y;
}

// The vector again with __frcp_rn's factor, out of line: inlined, its code sat between
// the fast path's last conversion and the store.
template <typename T, typename Out, int VEC, bool MUL>
__device__ __noinline__ OutVec<Out, VEC> swiglu_exact_scale(const Pack<T, VEC> gv, const Pack<T, VEC> uv, float s) {
  return swiglu_vec<T, Out, VEC, MUL>(gv, uv, __frcp_rn(s));
}

// swiglu_vec with the fp8 factor rn(1 / scale): the fast path's for every vector, redone
// with __frcp_rn for the rare scales outside its range (rcp_fast).
template <typename T, typename Out, int VEC, bool MUL>
__device__ __forceinline__ OutVec<Out, VEC> swiglu_scaled(const Pack<T, VEC>& gv, const Pack<T, VEC>& uv, float s) {
  if constexpr (std::is_same_v<Out, Fp8>) {
    OutVec<Out, VEC> y = swiglu_vec<T, Out, VEC, MUL>(gv, uv, rcp_fast(s));
    if (__builtin_expect(!rcp_fast_exact(s), 0)) y = swiglu_exact_scale<T, Out, VEC, MUL>(gv, uv, s);
    return y;
  } else {
    return swiglu_vec<T, Out, VEC, MUL>(gv, uv, 1.0f);
  }
}

// The general kernel: a block covers `ty` rows (rows on the grid's x) and a thread loops
// over its row's vectors with the grid's y stride.
template <typename T, typename Out, int VEC, bool MUL>
__global__ void __launch_bounds__(kMaxThreads)
    silu_mul_kernel(Out* __restrict__ out, int64_t out_stride, const T* __restrict__ gate,
                    int64_t gate_stride, const T* __restrict__ up, int64_t up_stride,
                    const float* __restrict__ scale, int64_t rows, int nvec) {
  using In = Pack<T, VEC>;
  using O = OutVec<Out, VEC>;
  constexpr bool kFp8 = std::is_same_v<Out, Fp8>;
  pdl_enter();
  // The scale is read from device memory (no host sync; a CUDA graph replays a new
  // scale). Issued first, and every load is ld_ordered (ptx.cuh), so all are in flight
  // before any arithmetic: at decode sizes the kernel is one memory latency long, not three.
  float scale_in = kFp8 ? ld_ordered(scale) : 1.0f;

  const int64_t r = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  if (r >= rows) return;
  const In* g = reinterpret_cast<const In*>(gate + r * gate_stride);
  const In* u = reinterpret_cast<const In*>(MUL ? up + r * up_stride : gate);
  O* o = reinterpret_cast<O*>(out + r * out_stride);
  for (int c = blockIdx.y * blockDim.x + threadIdx.x; c < nvec; c += gridDim.y * blockDim.x) {
    const In gv = ld_ordered(g + c);
    In uv;
    if constexpr (MUL) uv = ld_ordered(u + c);
    const float s = after_loads(scale_in);
    const O y = swiglu_scaled<T, Out, VEC, MUL>(gv, uv, s);
    o[c] = y;
  }
}

// Up to 65535 rows (the grid's y): one vector a thread, column chunks on the grid's x
// and rows on y, no loop and no exit before the loads (threads past the row's end load
// its last vector again and store nothing), so the loads issue
// 22-31 instructions in, against 33-44 in the general kernel (its row and range checks
// and exits, 64-bit row math; nvcc 13.0, sm_90a, fp16 in, fp8 out). silu_and_mul_fp8
// fp16 against the general kernel (s28d, us): 1 x 13312 1.23 against 1.34, 32 rows 1.97
// against 2.15, 128 rows 2.74 against 2.96; the general kernel with __frcp_rn took 1.42
// at one row (s28a). Past 8 MB, with 16-byte vectors, it beat the general kernel's loop
// too (s38a, us): 512 x 13312 fp8 5.60-5.67 against 5.82, 2048 rows 17.4 against 17.75;
// silu_mul bf16 512 x 14336 11.2 against 11.41, 4096 rows 82.1 against 85.8.
// The output's address and the store's predicate are pinned before the loads (ptx.cuh
// global_addr), and BLOCK (0: blockDim.x) is the launcher's default block as a constant:
// silu_and_mul_fp8 fp16 at 1 / 8 / 32 rows of 13312, 1.19 / 1.81 / 1.93 us against
// 1.24 / 1.88 / 1.96 (s46b, 256 input copies; torch.compile 1.19 / 1.80 / 1.94).
template <typename T, typename Out, int VEC, bool MUL, int BLOCK>
__global__ void __launch_bounds__(BLOCK ? BLOCK : 256)
    silu_mul_lean(Out* __restrict__ out, int64_t out_stride, const T* __restrict__ gate,
                  int64_t gate_stride, const T* __restrict__ up, int64_t up_stride,
                  const float* __restrict__ scale, int64_t, int nvec) {
  using In = Pack<T, VEC>;
  using O = OutVec<Out, VEC>;
  constexpr bool kFp8 = std::is_same_v<Out, Fp8>;
  pdl_enter();
  float scale_in = kFp8 ? ld_ordered(scale) : 1.0f;
  const int c = blockIdx.x * (BLOCK ? BLOCK : blockDim.x) + threadIdx.x;
  const int cc = min(c, nvec - 1);
  const int64_t r = blockIdx.y;
  const uint64_t o = global_addr(reinterpret_cast<O*>(out + r * out_stride) + cc);
  int store = c < nvec;
  pin_here(store);
  const In gv = ld_ordered(reinterpret_cast<const In*>(gate + r * gate_stride) + cc);
  In uv;
  if constexpr (MUL) uv = ld_ordered(reinterpret_cast<const In*>(up + r * up_stride) + cc);
  const float s = after_loads(scale_in);
  const O y = swiglu_scaled<T, Out, VEC, MUL>(gv, uv, s);
  if (store) st_global(o, y);
}

template <typename T, typename Out, bool MUL>
int launch(const SiluOperands& a, const float* scale, const SiluConfig* forced, cudaStream_t stream) {
  // A thread's work is one vector of each input. At decode sizes the kernel is one
  // memory latency plus a thread's chain of math, done in order over its vector's
  // elements: 16-byte vectors (8 fp16) made that chain the kernel's length, and 4-byte
  // vectors over 256-thread blocks spread a row over 4x the threads and SMs (2 fp16 a
  // thread, as Triton's kernel there). With more bytes, wider vectors: past 8 MB, 4- and
  // 8-byte loads were 1.5-2x and 1.1x slower than 16-byte ones. The tiers are the best
  // of the tune_norms sweep at 1 to 4096 rows (BENCHMARKS.md, seventh session), within 2%.
  // Every tier runs silu_mul_lean where the rows fit the grid's y (and a vector holds
  // two elements at least; fp32 up to 8 MB); the seventh session's sweep ran the general
  // kernel. 8-byte vectors at 8
  // rows timed 5% faster in sweeps over 256 input copies (54 MB, about the L2), but as
  // the default the same launch took 1.90 us, as before, while forced later in the same
  // sweep it took 1.82 (s37b): the L2's state, not the shape.
  const int64_t in_bytes = a.rows * a.d * int64_t(sizeof(T)) * (MUL ? 2 : 1);
  const bool small = in_bytes <= (int64_t{2} << 20), mid = in_bytes <= (int64_t{8} << 20);
  int vec_bytes = forced ? forced->vec_bytes : small ? 4 : mid ? 8 : 16;
  const int threads = forced ? forced->threads : small ? 256 : 128;
  if (threads < 32 || threads > kMaxThreads || threads % 32 ||
      (vec_bytes != 4 && vec_bytes != 8 && vec_bytes != 16))
    return cudaErrorInvalidConfiguration;
  if (forced && forced->lean && (threads > 256 || a.rows > 65535)) return cudaErrorInvalidConfiguration;
  // The widest vector up to vec_bytes that every row of every operand is aligned to
  // (and d a multiple of); none: one element a thread, any layout.
  int width = 1;
  for (int bytes = vec_bytes; bytes >= 4 && width == 1; bytes /= 2) {
    const int64_t vec = bytes / int64_t(sizeof(T));
    if (vec < 2) break;
    const bool fits = a.d % vec == 0 && a.gate.stride % vec == 0 && aligned(a.gate.ptr, bytes) &&
                      (!MUL || (a.up.stride % vec == 0 && aligned(a.up.ptr, bytes))) &&
                      a.out.stride % vec == 0 && aligned(a.out.ptr, vec * sizeof(Out));
    if (fits) width = static_cast<int>(vec);
  }
  const int64_t nvec = a.d / width;
  // gridDim.y: rows. fp32 past 8 MB keeps the general kernel: not measured there.
  const bool lean = forced ? forced->lean : width > 1 && a.rows <= 65535 && (mid || sizeof(T) == 2);
  if (lean && width == 1) return cudaErrorInvalidConfiguration;
  // Threads across a row: enough for the row's vectors (a warp at least); the rest
  // of the block's threads take further rows, so short rows still fill whole blocks.
  const int tx = static_cast<int>(std::min<int64_t>(threads, (nvec + 31) / 32 * 32));
  const int ty = std::max(1, threads / tx);
  const int64_t chunks = std::min<int64_t>((nvec + tx - 1) / tx, kMaxChunks);
  dim3 grid(static_cast<unsigned>((a.rows + ty - 1) / ty), static_cast<unsigned>(chunks));
  dim3 block(tx, ty);
  if (lean) {
    // Past 8 MB 256 threads: 128 timed 17.30-18.46 us at 2048 x 13312 fp8 across s38a /
    // s38b, 256 17.38-17.45; at 512 rows 256 is within 1% (5.60-5.67 against 5.55-5.61).
    const int lt = forced || mid ? threads : 256;
    grid = dim3(static_cast<unsigned>((nvec + lt - 1) / lt), static_cast<unsigned>(a.rows));
    block = dim3(lt);
  }
  auto run = [&](auto kernel) {
    return launch_kernel({grid, block, 0, stream}, kernel, static_cast<Out*>(a.out.ptr), a.out.stride,
                  static_cast<const T*>(a.gate.ptr), a.gate.stride, static_cast<const T*>(a.up.ptr),
                  a.up.stride, scale, a.rows, static_cast<int>(nvec));
  };
  constexpr int k16 = 16 / sizeof(T), k8 = 8 / sizeof(T), k4 = 4 / sizeof(T);
  if (lean) {  // width: k4, k8 or (forced) k16, at least 2 elements
    // The default's 256 threads as a constant; forced shapes and the mid tier's 128: blockDim.
    auto lean_kernel = [&](auto vec) {
      constexpr int V = decltype(vec)::value;
      return run(!forced && block.x == 256 ? silu_mul_lean<T, Out, V, MUL, 256> : silu_mul_lean<T, Out, V, MUL, 0>);
    };
    if constexpr (k4 > 1) {
      if (width == k4) return lean_kernel(std::integral_constant<int, k4>{});
    }
    if (width == k8) return lean_kernel(std::integral_constant<int, k8>{});
    return lean_kernel(std::integral_constant<int, k16>{});
  }
  if (width == k16) return run(silu_mul_kernel<T, Out, k16, MUL>);
  if (width == k8) return run(silu_mul_kernel<T, Out, k8, MUL>);
  if (width == k4) return run(silu_mul_kernel<T, Out, k4, MUL>);
  return run(silu_mul_kernel<T, Out, 1, MUL>);
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
