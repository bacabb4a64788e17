// The one Objective-C++ file: encodes a Launch (mps_launch.h) on PyTorch's current MPS
// stream. kernel-builder compiles every .metal file of build.toml's Metal kernels into
// one metallib and embeds it in the extension (EMBEDDED_METALLIB_HEADER, with
// createLibrary in EMBEDDED_METALLIB_NAMESPACE); pipelines are created from it once
// per kernel name and kept for the life of the process.
//
// As ATen's own Metal kernels do, the work goes into the stream's shared compute
// encoder, on the stream's serial dispatch queue, and is committed when the stream
// next commits (torch.mps.synchronize(), a copy to the CPU, ...): no commit per op.
//
// NEVER COMPILED HERE: no Linux tool compiles Objective-C++ against Metal. Written
// after kernel-builder's examples/relu and kernels-community's Metal kernels.
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <ATen/mps/MPSStream.h>

#include <mutex>
#include <string>
#include <unordered_map>

#include "mps_launch.h"

#ifdef EMBEDDED_METALLIB_HEADER
#include EMBEDDED_METALLIB_HEADER
#else
#error "EMBEDDED_METALLIB_HEADER not defined (kernel-builder defines it for Metal kernels)"
#endif

namespace inference_kernels::metal {
namespace {

// An MPS tensor's storage is its MTLBuffer (as ATen's getMTLBufferStorage reads it).
id<MTLBuffer> buffer_of(const at::Tensor& t) {
  return __builtin_bit_cast(id<MTLBuffer>, t.storage().data());
}

std::string describe(NSError* error) {
  return error ? std::string(error.localizedDescription.UTF8String) : std::string("no reason given");
}

// The pipeline of kernel `name`. `new...` returns retained objects and the static map
// keeps them, so this holds with or without ARC and never releases them.
id<MTLComputePipelineState> pipeline(id<MTLDevice> device, const std::string& name) {
  static std::mutex mu;
  static id<MTLLibrary> library = nil;
  static std::unordered_map<std::string, id<MTLComputePipelineState>> cache;
  const std::lock_guard<std::mutex> lock(mu);
  const auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  NSError* error = nil;
  if (library == nil) {
    library = EMBEDDED_METALLIB_NAMESPACE::createLibrary(device, &error);
    TORCH_CHECK(library != nil, "inference-kernels: cannot load the embedded Metal library: ",
                describe(error));
  }
  id<MTLFunction> function = [library newFunctionWithName:[NSString stringWithUTF8String:name.c_str()]];
  TORCH_CHECK(function != nil, "inference-kernels: the embedded Metal library has no kernel ", name);
  id<MTLComputePipelineState> state = [device newComputePipelineStateWithFunction:function
                                                                             error:&error];
  TORCH_CHECK(state != nil, "inference-kernels: cannot create the Metal pipeline of ", name, ": ",
              describe(error));
  cache.emplace(name, state);
  return state;
}

}  // namespace

void dispatch(const Launch& launch) {
  at::mps::MPSStream* stream = at::mps::getCurrentMPSStream();
  TORCH_CHECK(stream != nullptr, "inference-kernels: no current MPS stream");
  id<MTLComputePipelineState> state = pipeline(stream->device(), launch.kernel);
  const uint64_t threads = launch.threadgroup[0] * launch.threadgroup[1] * launch.threadgroup[2];
  TORCH_CHECK(threads <= state.maxTotalThreadsPerThreadgroup, "inference-kernels: ", launch.kernel,
              " needs ", num(static_cast<int64_t>(threads)),
              " threads per threadgroup; this GPU's pipeline allows ",
              num(static_cast<int64_t>(state.maxTotalThreadsPerThreadgroup)));
  // Nothing in the block throws: every check above ran on the calling thread.
  const Launch* l = &launch;
  dispatch_sync(stream->queue(), ^() {
    @autoreleasepool {
      id<MTLComputeCommandEncoder> encoder = stream->commandEncoder();
      [encoder setComputePipelineState:state];
      for (NSUInteger i = 0; i < l->args.size(); ++i) {
        const Arg& a = l->args[i];
        if (a.tensor.defined()) {
          [encoder setBuffer:buffer_of(a.tensor) offset:a.byte_offset() atIndex:i];
        } else {
          [encoder setBytes:a.bytes.data() length:a.bytes.size() atIndex:i];
        }
      }
      const MTLSize grid = MTLSizeMake(l->grid[0], l->grid[1], l->grid[2]);
      const MTLSize group = MTLSizeMake(l->threadgroup[0], l->threadgroup[1], l->threadgroup[2]);
      if (l->threads) {
        [encoder dispatchThreads:grid threadsPerThreadgroup:group];
      } else {
        [encoder dispatchThreadgroups:grid threadsPerThreadgroup:group];
      }
    }
  });
}

}  // namespace inference_kernels::metal
