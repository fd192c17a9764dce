// Runtime CPU detection for the CPU backend's SIMD kernels. Kernels compiled with ISA flags
// (*_avx2.cpp, *_avx512.cpp) may only run after active_isa() says the machine and the OS support
// them; everything else is baseline x86-64.
//
// TERN_CPU_ISA=scalar|avx2|avx512 lowers the level the process uses (tests, A/B comparisons). It
// never raises it past what the machine supports.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace tern::cpu {

// Kernel levels, lowest first. Each level implies every feature of the ones below it.
enum class Isa : uint8_t {
  kScalar = 0,  // baseline x86-64 (SSE2)
  kAvx2 = 1,    // AVX2 + FMA + F16C
  kAvx512 = 2,  // kAvx2 + AVX-512 F/BW/VL/DQ + VNNI
};

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512vnni = false;
  bool os_avx = false;     // XCR0 enables the YMM state
  bool os_avx512 = false;  // XCR0 enables the opmask and ZMM state
};

// Detected once per process (cpuid + xgetbv).
const CpuFeatures& cpu_features();
// The highest level the machine and OS support.
Isa best_supported_isa();
// best_supported_isa(), lowered by TERN_CPU_ISA if set. Read once per process.
Isa active_isa();
// Every supported level, lowest first (tests run each of them against the reference).
std::vector<Isa> supported_isas();
bool isa_supported(Isa isa);

std::string_view isa_name(Isa isa);  // "scalar", "avx2", "avx512"
std::optional<Isa> isa_from_name(std::string_view name);

}  // namespace tern::cpu
