// Byte counts as people read them ("16.07 GiB"), for messages and reports.
#pragma once

#include <cstdint>
#include <string>

namespace tern {

// Binary units with two decimals above 1 KiB ("512 B", "1.50 KiB", "16.07 GiB").
std::string human_bytes(uint64_t n_bytes);

}  // namespace tern
