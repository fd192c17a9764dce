// Writes the seed corpus for fuzz_gguf (fuzz/corpus/gguf/): small valid images that reach every
// part of the reader. Regenerate with `build-fuzz/fuzz/make_gguf_seeds fuzz/corpus/gguf`.
#include <cstdio>
#include <string>
#include <vector>

#include "formats/gguf.h"

using tern::DType;
using tern::gguf::Value;
using tern::gguf::ValueType;
using tern::gguf::Writer;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::vector<uint8_t> bytes(256);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i);

  // Every scalar type, strings, nested and empty arrays; two small tensors.
  Writer all_types;
  all_types.set("general.architecture", Value::string("llama"));
  all_types.set("u8", Value::u8(1));
  all_types.set("i8", Value::i8(-1));
  all_types.set("u16", Value::u16(2));
  all_types.set("i16", Value::i16(-2));
  all_types.set("u32", Value::u32(3));
  all_types.set("i32", Value::i32(-3));
  all_types.set("u64", Value::u64(4));
  all_types.set("i64", Value::i64(-4));
  all_types.set("f32", Value::f32(0.5f));
  all_types.set("f64", Value::f64(0.25));
  all_types.set("bool", Value::boolean(true));
  all_types.set("nested", Value::array(ValueType::ARRAY, {Value::array(ValueType::STRING, {Value::string("a")}),
                                                         Value::array(ValueType::U8, {})}));
  all_types.add_tensor("w", DType::Q4_0, {32, 2}, bytes.data());
  all_types.add_tensor("b", DType::F32, {8}, bytes.data());

  // A vocab-only file: token, score and type arrays, no tensors.
  Writer vocab;
  vocab.set("tokenizer.ggml.model", Value::string("llama"));
  vocab.set("tokenizer.ggml.tokens", Value::array(ValueType::STRING, {Value::string("<s>"), Value::string("x")}));
  vocab.set("tokenizer.ggml.scores", Value::array(ValueType::F32, {Value::f32(0), Value::f32(-1)}));
  vocab.set("tokenizer.ggml.token_type", Value::array(ValueType::I32, {Value::i32(3), Value::i32(1)}));

  // Custom alignment, a k-quant and a 4-dim tensor.
  Writer aligned;
  aligned.set("general.alignment", Value::u32(64));
  aligned.add_tensor("k", DType::Q4_K, {256}, bytes.data());
  aligned.add_tensor("e", DType::F16, {2, 1, 1, 3}, bytes.data());

  const std::pair<const char*, const Writer*> seeds[] = {
      {"all_types.gguf", &all_types}, {"vocab_only.gguf", &vocab}, {"aligned_64.gguf", &aligned}};
  for (const auto& [name, writer] : seeds) {
    const tern::Status st = writer->write(dir + "/" + name);
    if (!st.is_ok()) {
      std::fprintf(stderr, "make_gguf_seeds: %s\n", st.message().c_str());
      return 1;
    }
  }
  return 0;
}
