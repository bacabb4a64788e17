// Hand-written stand-ins for the few Apple declarations mps_dispatch.mm and torch's MPS
// headers use: a parse check only, NOT Apple's SDK.
#pragma once
#include <stddef.h>
#include <stdint.h>
typedef unsigned long NSUInteger;
typedef long NSInteger;
#define nil nullptr
@protocol NSObject
@end
@interface NSObject <NSObject>
@end
@interface NSString : NSObject
+ (instancetype)stringWithUTF8String:(const char*)s;
@property(readonly) const char* UTF8String;
@end
@interface NSError : NSObject
@property(readonly) NSString* localizedDescription;
@end
@interface NSDictionary : NSObject
@end
typedef struct dispatch_queue_s* dispatch_queue_t;
typedef struct dispatch_data_s* dispatch_data_t;
typedef void (^dispatch_block_t)(void);
extern "C" void dispatch_sync(dispatch_queue_t q, dispatch_block_t b);
extern "C" dispatch_queue_t dispatch_get_main_queue(void);
extern "C" dispatch_data_t dispatch_data_create(const void*, size_t, dispatch_queue_t, dispatch_block_t);
