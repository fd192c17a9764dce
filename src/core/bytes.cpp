#include "core/bytes.h"

#include <cinttypes>
#include <cstdio>

namespace tern {

std::string human_bytes(uint64_t n_bytes) {
  struct Unit {
    uint64_t size;
    const char* name;
  };
  constexpr Unit kUnits[] = {{uint64_t{1} << 40, "TiB"}, {uint64_t{1} << 30, "GiB"}, {uint64_t{1} << 20, "MiB"},
                             {uint64_t{1} << 10, "KiB"}};
  char buf[48];
  for (const Unit& u : kUnits) {
    if (n_bytes >= u.size) {
      std::snprintf(buf, sizeof(buf), "%.2f %s", static_cast<double>(n_bytes) / static_cast<double>(u.size), u.name);
      return buf;
    }
  }
  std::snprintf(buf, sizeof(buf), "%" PRIu64 " B", n_bytes);
  return buf;
}

}  // namespace tern
