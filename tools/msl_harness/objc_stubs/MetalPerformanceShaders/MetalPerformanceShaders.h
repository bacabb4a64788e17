// Hand-written stand-in (see Foundation/Foundation.h): NOT Apple's SDK.
#pragma once
#include <Metal/Metal.h>
@interface MPSCommandBuffer : NSObject
@end
