// silu, and SwiGLU (silu(gate) * up), rounded as cpu_kernels/activation.cpp (HF's
// LlamaMLP, vLLM): s = round(silu(float(gate))), y = round(float(s) * float(up)),
// round() to the tensor dtype, silu(v) = v / (1 + exp(-v)) in fp32.
//
// One thread per element, dispatched with dispatchThreads over (d, rows): gid.x is
// the column, gid.y the row (columns past d, from a rounded-up grid, return). Rows are
// `*_stride` elements apart, so silu_and_mul's halves are the same buffer bound
// twice (gate at x's offset, up d elements further, both with x's row stride).
#include <metal_stdlib>
using namespace metal;

// Metal compiles with fast math by default, whose exp and division are approximate:
// precise:: keeps the value the CPU computes (to the C library's accuracy).
inline float silu_value(float v) { return precise::divide(v, 1.0f + precise::exp(-v)); }

// out <- round(round(silu(gate)) * up). Buffers: out, gate, up, d, and the row strides
// (elements) of out, gate and up.
template <typename T>
kernel void silu_mul(device T* out [[buffer(0)]],
                     device const T* gate [[buffer(1)]],
                     device const T* up [[buffer(2)]],
                     constant uint& d [[buffer(3)]],
                     constant uint& out_stride [[buffer(4)]],
                     constant uint& gate_stride [[buffer(5)]],
                     constant uint& up_stride [[buffer(6)]],
                     uint2 gid [[thread_position_in_grid]]) {
  if (gid.x >= d) return;
  const ulong row = gid.y;
  const T s = T(silu_value(float(gate[row * gate_stride + gid.x])));  // a T tensor in HF
  out[row * out_stride + gid.x] = T(float(s) * float(up[row * up_stride + gid.x]));
}

// out <- round(silu(x)). Buffers: out, x, d, and the row strides of out and x.
template <typename T>
kernel void silu(device T* out [[buffer(0)]],
                 device const T* x [[buffer(1)]],
                 constant uint& d [[buffer(2)]],
                 constant uint& out_stride [[buffer(3)]],
                 constant uint& x_stride [[buffer(4)]],
                 uint2 gid [[thread_position_in_grid]]) {
  if (gid.x >= d) return;
  const ulong row = gid.y;
  out[row * out_stride + gid.x] = T(silu_value(float(x[row * x_stride + gid.x])));
}

template [[host_name("silu_mul_f32")]] kernel decltype(silu_mul<float>) silu_mul<float>;
template [[host_name("silu_mul_f16")]] kernel decltype(silu_mul<half>) silu_mul<half>;
template [[host_name("silu_mul_bf16")]] kernel decltype(silu_mul<bfloat>) silu_mul<bfloat>;
template [[host_name("silu_f32")]] kernel decltype(silu<float>) silu<float>;
template [[host_name("silu_f16")]] kernel decltype(silu<half>) silu<half>;
template [[host_name("silu_bf16")]] kernel decltype(silu<bfloat>) silu<bfloat>;
