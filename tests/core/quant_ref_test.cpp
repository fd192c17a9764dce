// Reference (de)quantizers against goldens from the gguf Python package
// (tools/gen_quant_goldens.py writes tests/data/quant/*.bin; the file format is described there).
// Dequantization must be bit-exact (0 ULP) for every type; quantization must be byte-identical
// where gguf-py has an encoder. Round-trip bounds for all types live in quant_roundtrip_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/fp16.h"
#include "core/quant_ref.h"

namespace tern {
namespace {

struct Golden {
  uint32_t direction = 0;  // 0: values = dequantize(blocks); 1: blocks = quantize(values)
  DType type = DType::F32;
  std::vector<uint8_t> blocks;
  std::vector<float> values;
};

uint32_t read_u32(const std::vector<uint8_t>& bytes, size_t offset) {
  uint32_t v;
  std::memcpy(&v, bytes.data() + offset, 4);
  return v;
}

// Loads tests/data/quant/<name>.<direction>.bin; fails the test on any malformed field.
Golden load_golden(const std::string& name, const std::string& direction) {
  const std::string path = std::string(TERN_TEST_DATA) + "/quant/" + name + "." + direction + ".bin";
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "missing golden " << path << " (run tools/gen_quant_goldens.py)";
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Golden g;
  if (bytes.size() < 20 || std::memcmp(bytes.data(), "TQG1", 4) != 0) {
    ADD_FAILURE() << path << ": expected magic TQG1 and a 20-byte header, got " << bytes.size() << " bytes";
    return g;
  }
  g.direction = read_u32(bytes, 4);
  g.type = static_cast<DType>(read_u32(bytes, 8));
  const uint32_t n_elems = read_u32(bytes, 12), n_bytes = read_u32(bytes, 16);
  EXPECT_EQ(dtype_name(g.type), name) << path << ": type id " << read_u32(bytes, 8);
  EXPECT_EQ(g.direction, direction == "quant" ? 1u : 0u) << path;
  if (bytes.size() != 20 + n_bytes + size_t{4} * n_elems) {
    ADD_FAILURE() << path << ": expected " << 20 + n_bytes + 4 * n_elems << " bytes, got " << bytes.size();
    return g;
  }
  EXPECT_EQ(row_bytes(g.type, n_elems), n_bytes) << path << ": n_bytes";
  g.blocks.assign(bytes.begin() + 20, bytes.begin() + 20 + n_bytes);
  g.values.resize(n_elems);
  std::memcpy(g.values.data(), bytes.data() + 20 + n_bytes, size_t{4} * n_elems);
  return g;
}

const char* const kAllTypes[] = {"f32",  "f16",  "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0",
                                 "q8_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "q8_k"};
const char* const kPythonEncodedTypes[] = {"f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0"};

class DequantGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(DequantGolden, BitExact) {
  const Golden g = load_golden(GetParam(), "dequant");
  ASSERT_FALSE(g.values.empty());
  std::vector<float> out(g.values.size(), -12345.0f);
  ASSERT_TRUE(dequantize_row_ref(g.type, g.blocks.data(), out.data(), static_cast<int64_t>(out.size())));
  const int64_t block = block_elems(g.type);
  int n_mismatch = 0;
  for (size_t i = 0; i < out.size() && n_mismatch < 8; ++i) {
    if (f32_to_bits(out[i]) != f32_to_bits(g.values[i])) {
      ++n_mismatch;
      ADD_FAILURE() << GetParam() << " element " << i << " (block " << i / block << ", slot " << i % block
                    << "): expected " << g.values[i] << " (bits " << std::hex << f32_to_bits(g.values[i])
                    << "), got " << out[i] << " (bits " << f32_to_bits(out[i]) << std::dec << ")";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DequantGolden, ::testing::ValuesIn(kAllTypes),
                         [](const auto& info) { return std::string(info.param); });

class QuantGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(QuantGolden, ByteIdenticalToGgufPy) {
  const Golden g = load_golden(GetParam(), "quant");
  ASSERT_FALSE(g.values.empty());
  std::vector<uint8_t> out(g.blocks.size(), 0xcd);
  ASSERT_TRUE(quantize_row_ref(g.type, g.values.data(), out.data(), static_cast<int64_t>(g.values.size())));
  const size_t block_bytes = g.blocks.size() / (g.values.size() / block_elems(g.type));
  int n_mismatch = 0;
  for (size_t i = 0; i < out.size() && n_mismatch < 8; ++i) {
    if (out[i] != g.blocks[i]) {
      ++n_mismatch;
      ADD_FAILURE() << GetParam() << " byte " << i << " (block " << i / block_bytes << ", offset "
                    << i % block_bytes << "): expected 0x" << std::hex << int{g.blocks[i]} << ", got 0x"
                    << int{out[i]} << std::dec;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(PythonEncoders, QuantGolden, ::testing::ValuesIn(kPythonEncodedTypes),
                         [](const auto& info) { return std::string(info.param); });

TEST(QuantRef, SupportsExactlyTheListedTypes) {
  EXPECT_EQ(quant_ref_types().size(), std::size(kAllTypes));
  for (const char* name : kAllTypes) EXPECT_TRUE(quant_ref_supports(*dtype_from_name(name))) << name;
  float dst[4] = {};
  const int32_t src[4] = {1, 2, 3, 4};
  EXPECT_FALSE(quant_ref_supports(DType::I32));
  EXPECT_FALSE(dequantize_row_ref(DType::I32, src, dst, 4));
  EXPECT_FALSE(quantize_row_ref(DType::I32, dst, dst, 4));
}

}  // namespace
}  // namespace tern
