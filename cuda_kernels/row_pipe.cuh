// Rows streamed through shared memory for the norm kernels (torch-free): the piped
// layout (RowConfig::stages > 0).
//
// The flat layout (row_kernel.cuh) holds one row a block in registers and exits; long
// rows then need many registers a thread and leave few blocks an SM (RMSNorm at 4096 x
// 16384 bf16 on the H200: 104.3 us for 512 threads x 4 vectors), and the streaming
// kernel reads each row twice (84.6 us). Here a block is persistent: it walks rows
// blockIdx.x, + gridDim.x, ..., and keeps the next stages - 1 of them on the way by
// cp.async into a ring of `stages` row buffers in dynamic shared memory, and loads the
// weight once (72.7 us; 37.9 against 50.2 streaming at 4096 x 8192). One row ahead (2
// stages) measured best; 3 and 4 were slower at every shape, so bytes in flight are
// not what limits these kernels (tune_norms, BENCHMARKS.md, sixth session). Each
// thread copies, and later reads, only its own vectors (t + k * tx, the flat layout's),
// so its own cp.async.wait_group orders them and the ring needs no barrier. The row's
// reductions alternate between two shared arrays (row_reduce_piped), so one barrier a
// reduction still suffices from one row to the next.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "device_info.cuh"
#include "ptx.cuh"
#include "row_kernel.cuh"

namespace inference_kernels::cuda {

constexpr int kMaxStages = 4;
constexpr size_t kMaxRingBytes = 227 * 1024;  // sm_90's dynamic shared memory a block

// A ring of `stages` buffers of ARRAYS rows of nvec 16-byte vectors (x, and the
// residual for fused ops) in dynamic shared memory.
template <int ARRAYS>
struct RowRing {
  uint32_t base;
  int nvec, stages;

  __device__ __forceinline__ RowRing(const void* smem, int nvec_, int stages_)
      : base(smem_addr(smem)), nvec(nvec_), stages(stages_) {}

  __device__ __forceinline__ uint32_t at(int stage, int arr, int i) const {
    return base + static_cast<uint32_t>(((stage * ARRAYS + arr) * nvec + i) * 16);
  }

  // Starts the copies of this thread's vectors of the rows src[0..ARRAYS) into `stage`
  // (none when !valid) and closes a group either way, so that wait() counts rows.
  template <int ITEMS, typename P>
  __device__ __forceinline__ void fetch(int stage, const P* const (&src)[ARRAYS], bool valid) const {
    static_assert(sizeof(P) == 16, "the ring moves 16-byte vectors");
    if (valid) {
#pragma unroll
      for (int arr = 0; arr < ARRAYS; ++arr) {
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
          const int i = threadIdx.x + k * blockDim.x;
          if (i < nvec) cp_async16(at(stage, arr, i), src[arr] + i);
        }
      }
    }
    cp_async_commit();
  }

  // Until this thread's copies of the oldest row in flight have landed.
  __device__ __forceinline__ void wait() const {
    switch (stages) {
      case 2: cp_async_wait<1>(); break;
      case 3: cp_async_wait<2>(); break;
      default: cp_async_wait<3>(); break;
    }
  }

  // This thread's vector k of row `arr` in `stage` (k * blockDim.x + threadIdx.x < nvec).
  template <typename P>
  __device__ __forceinline__ P read(int stage, int arr, int k) const {
    const uint4 v = lds16(at(stage, arr, threadIdx.x + k * blockDim.x));
    P a;
    __builtin_memcpy(&a, &v, 16);
    return a;
  }
};

// RowRing for the exact fits: rows of exactly ITEMS x TX vectors, TX threads a block,
// 2 stages, all known at compile time, so every offset is an immediate and no vector
// needs a bounds test.
template <int ARRAYS, int ITEMS, int TX>
struct FixedRing {
  static constexpr int kNvec = ITEMS * TX;
  uint32_t mine;  // this thread's vector 0 of array 0 in stage 0

  __device__ __forceinline__ explicit FixedRing(const void* smem) : mine(smem_addr(smem) + threadIdx.x * 16) {}

  __device__ __forceinline__ uint32_t at(int stage, int arr, int k) const {
    return mine + static_cast<uint32_t>(((stage * ARRAYS + arr) * kNvec + k * TX) * 16);
  }

  // As RowRing::fetch.
  template <typename P>
  __device__ __forceinline__ void fetch(int stage, const P* const (&src)[ARRAYS], bool valid) const {
    if (valid) {
#pragma unroll
      for (int arr = 0; arr < ARRAYS; ++arr) {
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) cp_async16(at(stage, arr, k), src[arr] + static_cast<int>(threadIdx.x) + k * TX);
      }
    }
    cp_async_commit();
  }

  template <typename P>
  __device__ __forceinline__ P read(int stage, int arr, int k) const {
    const uint4 v = lds16(at(stage, arr, k));
    P a;
    __builtin_memcpy(&a, &v, 16);
    return a;
  }
};

// row_reduce_flat with its shared array picked by the row's parity: a warp that runs
// ahead into the next row writes the other array, while slower warps may still read
// this one; the row after next waits behind the next row's barrier.
template <typename Op, int ID>
__device__ __forceinline__ float row_reduce_piped(float v, int parity) {
  return parity ? row_reduce_flat<Op, ID + 8>(v) : row_reduce_flat<Op, ID>(v);
}

// row_reduce_piped for a block size known at compile time (TX threads, TX / 32 a power
// of two): the same tree, so the same result bit for bit, without the warp-count tests.
// partial: this reduction's two arrays, one per row parity.
template <typename Op, int TX>
__device__ __forceinline__ float row_reduce_fixed(float v, float (&partial)[2][TX / 32], int parity) {
  constexpr int kWarps = TX / 32;
  static_assert((kWarps & (kWarps - 1)) == 0, "a power-of-two warp count");
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = Op()(v, __shfl_xor_sync(0xffffffffu, v, o));
  if constexpr (kWarps > 1) {
    const int lane = threadIdx.x % 32;
    if (lane == 0) partial[parity][threadIdx.x / 32] = v;
    __syncthreads();
    v = partial[parity][lane % kWarps];
#pragma unroll
    for (int o = kWarps / 2; o > 0; o >>= 1) v = Op()(v, __shfl_xor_sync(0xffffffffu, v, o));
  }
  return v;
}

// Block size bound of the piped kernels: 8 vectors a thread need more than the 128
// registers that 512 threads leave.
__host__ __device__ constexpr int piped_threads(int items) { return items >= 8 ? 256 : kFlatThreads; }

// Launches kernel(p, stages) as persistent blocks of c.tx threads: as many as fit on
// the GPU at once, at most one a row. arrays: rows staged per row index (1, or 2 with
// a residual); nvec: 16-byte vectors a row.
template <typename Params>
cudaError_t launch_piped(void (*kernel)(Params, int), const Params& p, const RowConfig& c, int64_t rows,
                         int64_t nvec, int arrays, cudaStream_t stream) {
  const size_t smem = size_t(c.stages) * arrays * nvec * 16;
  if (c.stages < 2 || c.stages > kMaxStages || smem > kMaxRingBytes) return cudaErrorInvalidConfiguration;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (e != cudaSuccess) return e;
  int per_sm = 0;
  e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, c.tx, smem);
  if (e != cudaSuccess) return e;
  if (per_sm < 1) return cudaErrorInvalidConfiguration;
  const int64_t blocks = std::min<int64_t>(rows, int64_t{per_sm} * sm_count());
  return launch_kernel({dim3(static_cast<unsigned>(blocks)), dim3(c.tx), smem, stream}, kernel, p, c.stages);
}

}  // namespace inference_kernels::cuda
