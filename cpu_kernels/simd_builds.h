// Includes IK_SIMD_FILE (q4k_simd.h, row_simd.h) twice: with IK_SIMD_BITS 256 (its avx2
// namespace) and 512 (its avx512 namespace); each function there carries its own target
// attribute, and cpu_isa() (cpu_isa.h) picks one at run time. x86-64 only.
// GCC 12's AVX-512 intrinsics fill their unused pass-through operand with
// _mm512_undefined_*(), a self-initialised variable its -Wmaybe-uninitialized then
// reports once inlined (GCC bug 105593): silenced for these inclusions only.
// No include guard on purpose: an includer defines IK_SIMD_FILE first, and includes
// <immintrin.h> at file scope (this file goes inside its anonymous namespace).

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define IK_SIMD_BITS 256
#include IK_SIMD_FILE
#undef IK_SIMD_BITS
#define IK_SIMD_BITS 512
#include IK_SIMD_FILE
#undef IK_SIMD_BITS
#pragma GCC diagnostic pop
#undef IK_SIMD_FILE
