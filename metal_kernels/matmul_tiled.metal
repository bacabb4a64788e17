// C = A x B, row-major, A [M, K], B [K, N], C [M, N]; fp32 accumulation.
//
// One 16x16 threadgroup per 16x16 tile of C, one thread per element. Each step over K
// stages a 16x16 tile of A and one of B in threadgroup memory (zero past the matrix
// edges, so partial tiles need no branches in the inner loop), then every thread
// reads a row of As and a column of Bs. Two barriers per step: after the loads (the
// tiles are complete before anyone reads them) and after the compute (nobody
// overwrites a tile another thread is still reading). Dispatch ceil(N/16) x ceil(M/16)
// threadgroups of 16x16 threads.
#include <metal_stdlib>
using namespace metal;

constant uint TILE = 16;

template <typename T>
void matmul_tile(device const T* A, device const T* B, device T* C, uint M, uint N, uint K,
                 threadgroup T (*As)[16], threadgroup T (*Bs)[16], uint2 tid, uint2 tgid) {
  const uint row = tgid.y * TILE + tid.y;
  const uint col = tgid.x * TILE + tid.x;
  float acc = 0.0f;
  for (uint k0 = 0; k0 < K; k0 += TILE) {
    const uint ka = k0 + tid.x;  // this thread's column of the A tile
    const uint kb = k0 + tid.y;  // and row of the B tile
    As[tid.y][tid.x] = (row < M && ka < K) ? A[row * K + ka] : T(0);
    Bs[tid.y][tid.x] = (kb < K && col < N) ? B[kb * N + col] : T(0);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint k = 0; k < TILE; ++k) {
      acc = fma(float(As[tid.y][k]), float(Bs[k][tid.x]), acc);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (row < M && col < N) {
    C[row * N + col] = T(acc);
  }
}

kernel void matmul_tiled_f32(device const float* A [[buffer(0)]],
                             device const float* B [[buffer(1)]],
                             device float* C [[buffer(2)]],
                             constant uint& M [[buffer(3)]],
                             constant uint& N [[buffer(4)]],
                             constant uint& K [[buffer(5)]],
                             uint2 tid [[thread_position_in_threadgroup]],
                             uint2 tgid [[threadgroup_position_in_grid]]) {
  threadgroup float As[16][16];
  threadgroup float Bs[16][16];
  matmul_tile<float>(A, B, C, M, N, K, As, Bs, tid, tgid);
}

kernel void matmul_tiled_f16(device const half* A [[buffer(0)]],
                             device const half* B [[buffer(1)]],
                             device half* C [[buffer(2)]],
                             constant uint& M [[buffer(3)]],
                             constant uint& N [[buffer(4)]],
                             constant uint& K [[buffer(5)]],
                             uint2 tid [[thread_position_in_threadgroup]],
                             uint2 tgid [[threadgroup_position_in_grid]]) {
  threadgroup half As[16][16];
  threadgroup half Bs[16][16];
  matmul_tile<half>(A, B, C, M, N, K, As, Bs, tid, tgid);
}

kernel void matmul_tiled_bf16(device const bfloat* A [[buffer(0)]],
                              device const bfloat* B [[buffer(1)]],
                              device bfloat* C [[buffer(2)]],
                              constant uint& M [[buffer(3)]],
                              constant uint& N [[buffer(4)]],
                              constant uint& K [[buffer(5)]],
                              uint2 tid [[thread_position_in_threadgroup]],
                              uint2 tgid [[threadgroup_position_in_grid]]) {
  threadgroup bfloat As[16][16];
  threadgroup bfloat Bs[16][16];
  matmul_tile<bfloat>(A, B, C, M, N, K, As, Bs, tid, tgid);
}
