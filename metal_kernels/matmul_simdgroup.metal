// C = A x B with simdgroup matrices: one SIMD-group per 8x8 tile of C, stepping over K
// by 8 with simdgroup_multiply_accumulate. A first simdgroup-matrix kernel, for the
// harness's 8x8 matrices: M, N and K must be multiples of 8 (no edge handling yet).
// Dispatch (N/8) x (M/8) threadgroups of 32 threads.
#include <metal_stdlib>
using namespace metal;

kernel void matmul_simdgroup_f32(device const float* A [[buffer(0)]],
                                 device const float* B [[buffer(1)]],
                                 device float* C [[buffer(2)]],
                                 constant uint& M [[buffer(3)]],
                                 constant uint& N [[buffer(4)]],
                                 constant uint& K [[buffer(5)]],
                                 uint2 tgid [[threadgroup_position_in_grid]]) {
  simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  simdgroup_float8x8 a, b;
  for (uint k = 0; k < K; k += 8) {
    simdgroup_load(a, A, K, ulong2(k, tgid.y * 8));
    simdgroup_load(b, B, N, ulong2(tgid.x * 8, k));
    simdgroup_multiply_accumulate(acc, a, b, acc);
  }
  simdgroup_store(acc, C, N, ulong2(tgid.x * 8, tgid.y * 8));
}
