// Hand-written stand-in (see Foundation/Foundation.h): NOT Apple's SDK.
#pragma once
#include <Foundation/Foundation.h>
typedef struct { NSUInteger width, height, depth; } MTLSize;
static inline MTLSize MTLSizeMake(NSUInteger w, NSUInteger h, NSUInteger d) { MTLSize s = {w, h, d}; return s; }
@protocol MTLBuffer <NSObject>
@end
@protocol MTLFunction <NSObject>
@end
@protocol MTLComputePipelineState <NSObject>
@property(readonly) NSUInteger maxTotalThreadsPerThreadgroup;
@end
@protocol MTLLibrary <NSObject>
- (id<MTLFunction>)newFunctionWithName:(NSString*)name;
@end
@protocol MTLDevice <NSObject>
- (id<MTLComputePipelineState>)newComputePipelineStateWithFunction:(id<MTLFunction>)f error:(NSError**)e;
- (id<MTLLibrary>)newLibraryWithData:(dispatch_data_t)data error:(NSError**)e;
@end
@protocol MTLComputeCommandEncoder <NSObject>
- (void)setComputePipelineState:(id<MTLComputePipelineState>)s;
- (void)setBuffer:(id<MTLBuffer>)b offset:(NSUInteger)o atIndex:(NSUInteger)i;
- (void)setBytes:(const void*)p length:(NSUInteger)n atIndex:(NSUInteger)i;
- (void)dispatchThreads:(MTLSize)g threadsPerThreadgroup:(MTLSize)t;
- (void)dispatchThreadgroups:(MTLSize)g threadsPerThreadgroup:(MTLSize)t;
@end
@protocol MTLCommandQueue <NSObject>
@end
@protocol MTLSharedEvent <NSObject>
@end
@protocol MTLCommandBuffer <NSObject>
@end
typedef void (^MTLCommandBufferHandler)(id<MTLCommandBuffer>);
