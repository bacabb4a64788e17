// Hand-written stand-in (see Foundation/Foundation.h): NOT Apple's SDK.
#pragma once
@interface MPSGraph : NSObject
@end
@interface MPSGraphExecutionDescriptor : NSObject
@end
@interface MPSGraphCompilationDescriptor : NSObject
@end
