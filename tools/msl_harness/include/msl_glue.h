// What msl.py's generated code needs after the shader: the per-thread built-in
// values and the binding of a kernel's parameters to buffers and built-ins. The
// parameter types come from the kernel's own signature (decltype), so the pre-pass
// never has to parse C++ types.
#pragma once

#include <metal_stdlib>
#include <tuple>

namespace msl_rt {

using metal::uint3;

// One thread's built-ins, filled by runtime.cpp.
struct ThreadIds {
  uint3 thread_position_in_grid, thread_position_in_threadgroup,
      threadgroup_position_in_grid, threads_per_threadgroup, threadgroups_per_grid,
      threads_per_grid;
  unsigned thread_index_in_threadgroup, thread_index_in_simdgroup,
      simdgroup_index_in_threadgroup, threads_per_simdgroup, simdgroups_per_threadgroup;
};

// A kernel as the runtime sees it: its name and a call for one thread.
struct Kernel {
  const char* name;
  void (*invoke)(const ThreadIds&, void* const* buffers);
  int buffers;  // 1 + the highest buffer index the kernel binds
};

template <class F>
struct params_of;
template <class R, class... A>
struct params_of<R (*)(A...)> {
  using type = std::tuple<A...>;
};
template <class F, unsigned I>
using param_t = std::tuple_element_t<I, typename params_of<F>::type>;

// A built-in as the parameter's type: uint, ushort, uint2, uint3, ...
template <class T>
T builtin(uint3 v) {
  if constexpr (std::is_arithmetic_v<T>) {
    return static_cast<T>(v.x);
  } else {
    T r;
    for (unsigned i = 0; i < sizeof(T) / sizeof(r[0]); ++i)
      r[i] = static_cast<std::remove_reference_t<decltype(r[0])>>(v[i]);
    return r;
  }
}
template <class T>
T builtin(unsigned v) {
  return builtin<T>(uint3(v, 0u, 0u));
}

// [[buffer(i)]]: a `device T*` / `constant T*` pointer or a `constant T&` reference.
template <class T>
T buffer(void* const* b, int i) {
  if constexpr (std::is_pointer_v<T>)
    return reinterpret_cast<T>(b[i]);
  else
    return *reinterpret_cast<std::remove_reference_t<T>*>(b[i]);
}

}  // namespace msl_rt
