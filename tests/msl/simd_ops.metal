// Each SIMD collective of the harness's metal_stdlib, one output per thread, checked
// against numpy in tests/test_metal_harness.py.
#include <metal_stdlib>
using namespace metal;

// out: [n, 6] per thread: simd_sum, simd_max, simd_shuffle from lane (lane+5)%32,
// simd_shuffle_xor by 1, simd_broadcast from lane 3, simd_shuffle_down by 1.
kernel void simd_ops(device const float* in [[buffer(0)]],
                     device float* out [[buffer(1)]],
                     uint gid [[thread_position_in_grid]],
                     uint lane [[thread_index_in_simdgroup]]) {
  const float v = in[gid];
  device float* o = out + gid * 6;
  o[0] = simd_sum(v);
  o[1] = simd_max(v);
  o[2] = simd_shuffle(v, ushort((lane + 5) % 32));
  o[3] = simd_shuffle_xor(v, ushort(1));
  o[4] = simd_broadcast(v, ushort(3));
  o[5] = simd_shuffle_down(v, ushort(1));
}

// A vector through a collective: float4 lanes summed component-wise.
kernel void simd_sum4(device const float4* in [[buffer(0)]],
                      device float4* out [[buffer(1)]],
                      uint gid [[thread_position_in_grid]]) {
  out[gid] = simd_sum(in[gid]);
}
