// 16-byte vectors for the GPU kernels (CUDA and HIP alike): N elements moved as one
// aligned load or store (16 bytes for N = 16 / sizeof(T): LDG.128 on NVIDIA,
// global_load_dwordx4 on CDNA), and the alignment test that picks that path.
#pragma once

#include <cstddef>
#include <cstdint>

namespace inference_kernels {

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

inline bool aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

}  // namespace inference_kernels
