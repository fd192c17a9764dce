#include "backends/cpu/cpu_features.h"

#include <cpuid.h>

#include <cstdio>
#include <cstdlib>

namespace tern::cpu {
namespace {

bool bit(uint32_t reg, int index) { return (reg >> index) & 1u; }

uint64_t read_xcr0() {
  uint32_t lo = 0, hi = 0;
  // xgetbv is only legal once cpuid says the OS set CR4.OSXSAVE; the caller checks that.
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

CpuFeatures detect() {
  CpuFeatures f;
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  f.fma = bit(ecx, 12);
  f.f16c = bit(ecx, 29);
  const bool osxsave = bit(ecx, 27);
  if (osxsave) {
    const uint64_t xcr0 = read_xcr0();
    f.os_avx = (xcr0 & 0x6) == 0x6;        // XMM and YMM state
    f.os_avx512 = (xcr0 & 0xe6) == 0xe6;   // plus opmask, ZMM_Hi256, Hi16_ZMM
  }
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    f.avx2 = bit(ebx, 5);
    f.avx512f = bit(ebx, 16);
    f.avx512dq = bit(ebx, 17);
    f.avx512bw = bit(ebx, 30);
    f.avx512vl = bit(ebx, 31);
    f.avx512vnni = bit(ecx, 11);
  }
  return f;
}

Isa detect_best() {
  const CpuFeatures& f = cpu_features();
  const bool avx2 = f.os_avx && f.avx2 && f.fma && f.f16c;
  if (!avx2) return Isa::kScalar;
  const bool avx512 = f.os_avx512 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni;
  return avx512 ? Isa::kAvx512 : Isa::kAvx2;
}

Isa detect_active() {
  const Isa best = best_supported_isa();
  const char* env = std::getenv("TERN_CPU_ISA");
  if (env == nullptr || *env == '\0') return best;
  const std::optional<Isa> wanted = isa_from_name(env);
  if (!wanted) {
    std::fprintf(stderr, "tern: ignoring TERN_CPU_ISA=%s (expected scalar, avx2 or avx512)\n", env);
    return best;
  }
  return *wanted < best ? *wanted : best;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

Isa best_supported_isa() {
  static const Isa best = detect_best();
  return best;
}

Isa active_isa() {
  static const Isa active = detect_active();
  return active;
}

bool isa_supported(Isa isa) { return isa <= best_supported_isa(); }

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "unknown";
}

std::optional<Isa> isa_from_name(std::string_view name) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (isa_name(isa) == name) return isa;
  return std::nullopt;
}

}  // namespace tern::cpu
