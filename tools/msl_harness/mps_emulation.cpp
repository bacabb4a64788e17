// The Metal host wrappers (metal_kernels/*_torch.cpp) on CPU tensors, their dispatches
// run by the MSL harness: this file stands in for mps_dispatch.mm. mps_emulation.py
// builds it with the wrappers and torch-ext/torch_binding.cpp (METAL_KERNEL, MPS
// registrations redirected to the CPU key) into one torch extension.
//
// What it checks that the shader tests cannot: the wrappers' tensor checks, kernel
// names, the buffer each [[buffer(i)]] receives (tensor, storage offset, scalar type
// and value) and the grid and threadgroup sizes. What it cannot: the Objective-C
// (mps_dispatch.mm) and Apple's compiler and GPU.
#include <dlfcn.h>

#include <mutex>
#include <string>
#include <vector>

#include "mps_launch.h"

namespace {

using DispatchFn = int (*)(const char*, const unsigned*, const unsigned*, int, void* const*, int,
                           int, unsigned, char*, int);

std::mutex g_mu;
std::vector<DispatchFn> g_libs;  // msl_dispatch of each harness-built shader library

}  // namespace

// `paths`: the shader libraries (msl.build), separated by newlines.
extern "C" int ik_emulation_load(const char* paths) {
  const std::lock_guard<std::mutex> lock(g_mu);
  g_libs.clear();
  std::string all(paths), path;
  for (size_t start = 0; start <= all.size();) {
    const size_t end = std::min(all.find('\n', start), all.size());
    path = all.substr(start, end - start);
    start = end + 1;
    if (path.empty()) continue;
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) return -1;
    g_libs.push_back(reinterpret_cast<DispatchFn>(dlsym(h, "msl_dispatch")));
  }
  return 0;
}

namespace inference_kernels::metal {

void dispatch(const Launch& l) {
  std::vector<void*> buffers;
  for (const Arg& a : l.args) {
    if (a.tensor.defined()) {
      TORCH_CHECK(a.tensor.device().is_cpu(), "emulation: CPU tensors only");
      buffers.push_back(static_cast<char*>(a.tensor.storage().mutable_data()) + a.byte_offset());
    } else {
      buffers.push_back(const_cast<unsigned char*>(a.bytes.data()));
    }
  }
  unsigned grid[3], group[3];
  for (int i = 0; i < 3; ++i) {
    TORCH_CHECK(l.grid[i] <= UINT32_MAX && l.threadgroup[i] <= UINT32_MAX, "emulation: grid too large");
    grid[i] = static_cast<unsigned>(l.grid[i]);
    group[i] = static_cast<unsigned>(l.threadgroup[i]);
  }
  std::vector<DispatchFn> libs;
  {
    const std::lock_guard<std::mutex> lock(g_mu);
    libs = g_libs;
  }
  char err[4096];
  std::string why = "no shader library loaded (ik_emulation_load)";
  for (DispatchFn f : libs) {
    if (f(l.kernel.c_str(), grid, group, l.threads, buffers.data(), int(buffers.size()), 0, 0,
          err, sizeof(err)) == 0)
      return;
    why = err;
    if (why.rfind("no kernel named", 0) != 0) break;  // the kernel ran and failed
  }
  TORCH_CHECK(false, "emulated dispatch of ", l.kernel, ": ", why);
}

}  // namespace inference_kernels::metal
