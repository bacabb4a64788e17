// Stand-in for the header kernel-builder generates (metallib_to_header.py), minus the
// metallib bytes: for the parse check of mps_dispatch.mm only.
#pragma once
#include <Metal/Metal.h>
namespace inference_kernels_metal {
static const unsigned char metallib_data[] = {0};
inline id<MTLLibrary> createLibrary(id<MTLDevice> device, NSError** error = nullptr) {
  dispatch_data_t d = dispatch_data_create(metallib_data, sizeof(metallib_data), dispatch_get_main_queue(), ^{});
  NSError* e = nil;
  id<MTLLibrary> lib = [device newLibraryWithData:d error:&e];
  if (error) *error = e;
  return lib;
}
}
