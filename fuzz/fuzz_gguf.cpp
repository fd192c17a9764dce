// libFuzzer target for the GGUF reader (untrusted bytes). Beyond "no crash, no out-of-bounds read"
// it checks properties a correct reader must have:
//   - a rejected image yields a message that names a byte offset;
//   - an accepted image's tensors lie inside the image, aligned, with the declared sizes;
//   - anything the reader accepts, the writer writes, and reading that back gives equal metadata
//     and tensors (the reader and writer agree on every limit).
// A failed property is a TERN_CHECK, which aborts, so libFuzzer records it as a crash.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/check.h"
#include "formats/gguf.h"

namespace {

using tern::gguf::File;
using tern::gguf::Writer;

// Above this the round trip would pad the header to a huge alignment; the reader part still ran.
constexpr uint64_t kMaxRoundTripAlignment = 1 << 16;

void check_round_trip(const File& f) {
  Writer w;
  for (const auto& [key, value] : f.metadata()) w.set(key, value);
  for (const auto& t : f.tensors()) w.add_tensor(t.name, t.type, t.shape, t.data);
  auto bytes = w.to_bytes();
  TERN_CHECK_MSG(bytes.is_ok(), "the writer rejected what the reader accepted");
  auto again = File::parse(bytes->data(), bytes->size(), "rewritten");
  TERN_CHECK_MSG(again.is_ok(), "the reader rejected what the writer wrote");
  TERN_CHECK(again->metadata().size() == f.metadata().size());
  for (size_t i = 0; i < f.metadata().size(); ++i) {
    TERN_CHECK(again->metadata()[i].first == f.metadata()[i].first);
    TERN_CHECK(again->metadata()[i].second == f.metadata()[i].second);
  }
  TERN_CHECK(again->tensors().size() == f.tensors().size());
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const auto& a = f.tensors()[i];
    const auto& b = again->tensors()[i];
    TERN_CHECK(a.name == b.name && a.type == b.type && a.shape == b.shape && a.n_bytes == b.n_bytes);
    TERN_CHECK(std::memcmp(a.data, b.data, a.n_bytes) == 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = File::parse(data, size, "fuzz.gguf");
  if (!f.is_ok()) {
    TERN_CHECK(f.status().message().find("byte offset") != std::string::npos);
    return 0;
  }
  for (const auto& [key, value] : f->metadata()) {
    TERN_CHECK(f->find(key) == &value);
    (void)tern::gguf::summarize(value, 4, 16);
  }
  // Touching the first and last byte of each tensor lets ASan catch a range check that is off.
  volatile uint8_t sink = 0;
  for (const auto& t : f->tensors()) {
    TERN_CHECK(t.offset % f->alignment() == 0);
    TERN_CHECK(t.data >= data && t.data + t.n_bytes <= data + size);
    TERN_CHECK(t.n_bytes > 0);
    TERN_CHECK(f->find_tensor(t.name) == &t);
    sink = sink + t.data[0] + t.data[t.n_bytes - 1];
  }
  if (f->alignment() <= kMaxRoundTripAlignment) check_round_trip(*f);
  return 0;
}
