// The x86 instruction set the CPU kernels use, chosen at run time. One CPU variant serves
// every x86-64 machine, so code past the baseline is built per instruction set with target
// attributes (q4k_simd.h, row_simd.h) and picked here: AVX-512 (F, BW, VL) when the CPU and
// OS support it, else AVX2 + FMA + F16C, else the baseline (at::vec's portable vectors;
// the only one on aarch64). The environment variable IK_CPU_ISA=baseline|avx2|avx512
// forces one (tests run every path that way; asking for more than the CPU has is an
// error). Read once, at the first call that asks; the cpu_isa op says what was chosen.
#pragma once

#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace inference_kernels::cpu {

enum class Isa { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

inline const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    default: return "baseline";
  }
}

inline Isa best_isa() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl"))
    return Isa::kAvx512;
  if (avx2) return Isa::kAvx2;
#endif
  return Isa::kBaseline;
}

inline Isa choose_isa() {
  const Isa best = best_isa();
  const char* env = std::getenv("IK_CPU_ISA");
  if (env == nullptr || *env == '\0') return best;
  for (Isa isa : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512}) {
    if (std::strcmp(env, isa_name(isa)) != 0) continue;
    TORCH_CHECK(static_cast<int>(isa) <= static_cast<int>(best), "IK_CPU_ISA=", std::string(env),
                " asks for instructions this CPU (or this build) lacks; it supports up to ",
                isa_name(best));
    return isa;
  }
  TORCH_CHECK(false, "IK_CPU_ISA must be baseline, avx2 or avx512 (or unset: the best the CPU has), got '",
              std::string(env), "'");
  return best;
}

// One choice for the whole library (an inline function's static is shared by every
// translation unit).
inline Isa cpu_isa() {
  static const Isa isa = choose_isa();  // a failed check throws and is retried next call
  return isa;
}

}  // namespace inference_kernels::cpu
