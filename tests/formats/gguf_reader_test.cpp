// Reader tests on hand-built images: a v2 file, files without tensors, every truncation of a
// valid file, and one corruption per field. Each error must name the field, its byte offset and
// what was found, and nothing may crash or read out of bounds (the truncated images live in
// exactly-sized heap buffers, so a sanitizer build catches any overread).
#include <gtest/gtest.h>

#include "formats/gguf.h"
#include "gguf_bytes.h"

namespace tern::gguf {
namespace {

using testing::ByteBuilder;
using testing::parse_bytes;

// Parses `b` and expects a failure whose message contains every needle.
void expect_error(const ByteBuilder& b, const std::vector<std::string>& needles) {
  auto f = parse_bytes(b.bytes());
  ASSERT_FALSE(f.is_ok()) << "parsed a corrupt image; expected an error mentioning " << needles[0];
  const std::string& msg = f.status().message();
  for (const auto& needle : needles) {
    EXPECT_NE(msg.find(needle), std::string::npos) << "'" << needle << "' not in: " << msg;
  }
}

std::string at(size_t offset) { return "at byte offset " + std::to_string(offset); }

TEST(GgufReader, ReadsAHandBuiltV2File) {
  ByteBuilder b;
  b.header(2, 2, 3);
  b.kv_string("general.architecture", "llama");
  b.str("arr").type(ValueType::ARRAY).type(ValueType::U16).u64(3).put<uint16_t>(1).put<uint16_t>(2).put<uint16_t>(65535);
  b.kv_u32("general.alignment", 64);
  b.tensor_info("a", {4, 2}, DType::F32, 0);
  b.tensor_info("b", {32}, DType::Q8_0, 64);
  b.pad_to(64);
  const size_t data_start = b.size();
  b.fill(32, 0x11).pad_to(64).fill(34, 0x22);  // no padding after the last tensor: still valid

  auto f = parse_bytes(b.bytes());
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset(), data_start);
  EXPECT_EQ(*f->get_string("general.architecture"), "llama");
  auto arr = f->get_array("arr", ValueType::U16);
  ASSERT_TRUE(arr.is_ok()) << arr.status().message();
  ASSERT_EQ((*arr)->items.size(), 3u);
  EXPECT_EQ((*arr)->items[2].as_uint(), 65535u);
  ASSERT_EQ(f->tensors().size(), 2u);
  const TensorInfo* a = f->find_tensor("a");
  const TensorInfo* t_b = f->find_tensor("b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(t_b, nullptr);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(a->numel(), 8);
  EXPECT_EQ(a->n_bytes, 32u);
  EXPECT_EQ(a->data, b.bytes().data() + data_start);
  EXPECT_EQ(t_b->type, DType::Q8_0);
  EXPECT_EQ(t_b->n_bytes, 34u);
  EXPECT_EQ(t_b->data, b.bytes().data() + data_start + 64);
  EXPECT_EQ(t_b->data[33], 0x22);
  EXPECT_EQ(f->find_tensor("c"), nullptr);
}

TEST(GgufReader, FileWithoutTensorsMayEndBeforeThePadding) {
  ByteBuilder b;
  b.header(3, 0, 1).kv_u32("k", 7);  // 24 + 8 + 1 + 4 + 4 = 41 bytes, not a multiple of 32
  auto f = parse_bytes(b.bytes());
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->data_offset(), b.size());
  EXPECT_TRUE(f->tensors().empty());
}

TEST(GgufReader, EveryTruncationIsAnErrorNeverACrash) {
  Writer w;
  w.set("general.architecture", Value::string("llama"));
  w.set("n", Value::array(ValueType::ARRAY, {Value::array(ValueType::STRING, {Value::string("ab")}),
                                               Value::array(ValueType::F32, {Value::f32(1.0f)})}));
  w.set("b", Value::boolean(true));
  const std::vector<uint8_t> q(18 * 2, 0x5a), f32(32, 0x3c);
  w.add_tensor("q", DType::Q4_0, {32, 2}, q.data());
  w.add_tensor("last", DType::F32, {8}, f32.data());  // 32 bytes: the file ends on the data
  auto full = w.to_bytes();
  ASSERT_TRUE(full.is_ok()) << full.status().message();
  ASSERT_TRUE(parse_bytes(*full).is_ok());

  for (size_t n = 0; n < full->size(); ++n) {
    const std::vector<uint8_t> prefix(full->begin(), full->begin() + static_cast<std::ptrdiff_t>(n));
    auto f = File::parse(prefix.data(), prefix.size(), "cut.gguf");
    ASSERT_FALSE(f.is_ok()) << "a prefix of " << n << " of " << full->size() << " bytes parsed";
    EXPECT_NE(f.status().message().find("byte offset"), std::string::npos) << f.status().message();
  }
}

TEST(GgufReader, ErrorMessageNamesTensorFieldOffsetExpectedAndFound) {
  ByteBuilder b;
  b.header(3, 1, 0);
  b.str("blk.0.attn_q.weight").u32(1).u64(32);
  const size_t type_pos = b.size();
  b.u32(99).u64(0);
  auto f = parse_bytes(b.bytes());
  ASSERT_FALSE(f.is_ok());
  EXPECT_EQ(f.status().message(), "test.gguf: tensor \"blk.0.attn_q.weight\" (#0): type id at byte offset " +
                                      std::to_string(type_pos) + ": expected a known GGML type id, found 99");
}

TEST(GgufReader, RejectsCorruptHeaders) {
  expect_error(ByteBuilder().raw("GGUX").u32(3).u64(0).u64(0), {"magic", at(0), "47 47 55 58"});
  expect_error(ByteBuilder().raw("GG"), {"magic", "4 bytes", "only 2"});
  expect_error(ByteBuilder().header(1, 0, 0), {"version", at(4), "v1", "found 1"});
  expect_error(ByteBuilder().header(4, 0, 0), {"version", "2 or 3", "found 4"});
  expect_error(ByteBuilder().header(0x03000000, 0, 0), {"version", "big-endian"});
  expect_error(ByteBuilder().header(3, uint64_t{1} << 62, 0), {"tensor count", at(8), "found 4611686018427387904"});
  expect_error(ByteBuilder().header(3, 0, ~uint64_t{0}), {"metadata key count", at(16), "found 18446744073709551615"});
}

TEST(GgufReader, RejectsCorruptMetadata) {
  // Key lengths: absurd (must not allocate), over the key bound, empty.
  expect_error(ByteBuilder().header(3, 0, 1).u64(uint64_t{1} << 63).u32(0).u32(0),
               {"metadata key #0", "key length", at(24), "found 9223372036854775808"});
  expect_error(ByteBuilder().header(3, 0, 1).u64(70000).fill(70000, 'a').type(ValueType::U8).fill(1, 0),
               {"key length", "1..65535", "found 70000"});
  expect_error(ByteBuilder().header(3, 0, 1).u64(0).type(ValueType::U8).fill(8, 0), {"key length", "found 0"});
  // A string value longer than the rest of the file.
  {
    ByteBuilder b;
    b.header(3, 0, 1).str("k").type(ValueType::STRING);
    const size_t len_pos = b.size();
    b.u64(uint64_t{1} << 63).raw("abc");
    expect_error(b, {"metadata key \"k\" (#0)", "string value length", at(len_pos), "rest of the file",
                     "found 9223372036854775808"});
  }
  expect_error(ByteBuilder().header(3, 0, 1).str("k").u32(13).u32(0), {"\"k\"", "value type", "0..12", "found 13"});
  expect_error(ByteBuilder().header(3, 0, 1).str("k").type(ValueType::ARRAY).u32(200).u64(0),
               {"\"k\"", "array item type", "found 200"});
  expect_error(ByteBuilder().header(3, 0, 1).str("k").type(ValueType::ARRAY).type(ValueType::U32).u64(uint64_t{1} << 60).u32(1),
               {"\"k\"", "array length", "u32 items", "found 1152921504606846976"});
  expect_error(ByteBuilder().header(3, 0, 1).str("k").type(ValueType::BOOL).fill(1, 2), {"bool value", "0 or 1", "found 2"});
  // An error inside an array names the item.
  expect_error(ByteBuilder().header(3, 0, 1).str("k").type(ValueType::ARRAY).type(ValueType::BOOL).u64(2).fill(1, 1).fill(1, 9),
               {"\"k\" (#0)[1]", "bool value"});
  expect_error(ByteBuilder().header(3, 0, 2).kv_u32("k", 1).kv_u32("k", 2), {"metadata key \"k\" (#1)", "repeat of key #0"});
  expect_error(ByteBuilder().header(3, 0, 1).str("k").type(ValueType::U64).u32(5), {"u64 value", "8 bytes", "only 4"});
}

ByteBuilder nested_arrays(int levels) {
  ByteBuilder b;
  b.header(3, 0, 1).str("deep").type(ValueType::ARRAY);
  for (int i = 1; i < levels; ++i) b.type(ValueType::ARRAY).u64(1);
  b.type(ValueType::U8).u64(1).fill(1, 42);
  return b;
}

TEST(GgufReader, LimitsArrayNesting) {
  auto ok = parse_bytes(nested_arrays(kMaxArrayDepth).bytes());
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  const Value* v = ok->find("deep");
  for (int i = 0; i < kMaxArrayDepth; ++i) {
    ASSERT_NE(v->as_array(), nullptr);
    v = &v->as_array()->items[0];
  }
  EXPECT_EQ(v->as_uint(), 42u);
  expect_error(nested_arrays(kMaxArrayDepth + 1), {"array nesting", "at most 8 levels", "level 9"});
}

// A header with one tensor whose info is written by `info`, after a general.alignment key when
// `alignment` is given.
ByteBuilder one_tensor(const std::function<void(ByteBuilder&)>& info, std::optional<uint32_t> alignment = {}) {
  ByteBuilder b;
  b.header(3, 1, alignment ? 1 : 0);
  if (alignment) b.kv_u32("general.alignment", *alignment);
  info(b);
  return b;
}

TEST(GgufReader, RejectsCorruptTensorInfos) {
  // The header promises two tensor infos; the bytes hold one at most.
  expect_error(ByteBuilder().header(3, 2, 0).tensor_info("w", {8}, DType::F32, 0),
               {"tensor count", at(8), "at most 1", "found 2"});
  auto pad = [](ByteBuilder& b) { b.fill(64, 0); };
  expect_error(one_tensor([&](ByteBuilder& b) { b.str("w").u32(5); pad(b); }), {"tensor \"w\" (#0)", "n_dims", at(33), "1..4", "found 5"});
  expect_error(one_tensor([&](ByteBuilder& b) { b.str("w").u32(0); pad(b); }), {"n_dims", "found 0"});
  expect_error(one_tensor([&](ByteBuilder& b) { b.tensor_info("w", {4, 0}, DType::F32, 0); pad(b); }), {"dims[1]", at(45), "found 0"});
  expect_error(one_tensor([&](ByteBuilder& b) { b.tensor_info("w", {uint64_t{1} << 32, uint64_t{1} << 32}, DType::F32, 0); pad(b); }),
               {"dims[1]", "overflows"});
  expect_error(one_tensor([&](ByteBuilder& b) { b.tensor_info("w", {33, 2}, DType::Q4_0, 0); pad(b); }),
               {"\"w\"", "dims[0]", at(37), "q4_0 block size 32", "found 33"});
  expect_error(one_tensor([&](ByteBuilder& b) { b.tensor_info("w", {8}, DType::F32, 4); pad(b); }),
               {"\"w\"", "data offset", at(49), "multiple of the alignment 32", "found 4"});
  expect_error(one_tensor([&](ByteBuilder& b) { b.str("").u32(1).u64(8).u32(0).u64(0); pad(b); }), {"tensor #0", "name length", "found 0"});
  expect_error(one_tensor([&](ByteBuilder& b) { b.str("w").u32(1).u64(8).u32(0).u64(0).raw("x"); }),
               {"padding before the data section", "the file to continue to byte 64", "its end at byte 58"});
}

TEST(GgufReader, RejectsDataOutsideTheFileOrOverlapping) {
  {
    ByteBuilder b;
    b.header(3, 1, 0).tensor_info("w", {8}, DType::F32, 32).pad_to(32);
    b.fill(32, 0);  // the data section holds 32 bytes; the tensor wants bytes 32..64
    expect_error(b, {"\"w\"", "data range", at(49), "32 bytes at offset 32", "data section of 32 bytes",
                     "32 bytes past the end"});
  }
  {
    ByteBuilder b;
    b.header(3, 1, 0).tensor_info("w", {256}, DType::Q4_K, 0).pad_to(32).fill(100, 0);
    expect_error(b, {"\"w\"", "data range", "144 bytes at offset 0", "data section of 100 bytes", "44 bytes past"});
  }
  {
    ByteBuilder b;
    b.header(3, 2, 0).tensor_info("a", {16}, DType::F32, 0).tensor_info("b", {16}, DType::F32, 32).pad_to(32);
    b.fill(96, 0);
    expect_error(b, {"\"b\" (#1)", "data offset", "at least 64", "end of tensor \"a\"", "overlap"});
  }
  {
    ByteBuilder b;
    b.header(3, 2, 0).tensor_info("a", {8}, DType::F32, 0).tensor_info("a", {8}, DType::F32, 32).pad_to(32).fill(64, 0);
    expect_error(b, {"tensor \"a\" (#1)", "repeat of tensor #0"});
  }
}

TEST(GgufReader, RejectsBadAlignment) {
  auto with_alignment = [](uint32_t alignment) {
    return one_tensor([](ByteBuilder& b) { b.tensor_info("w", {8}, DType::F32, 0).pad_to(32).fill(32, 0); },
                      alignment);
  };
  expect_error(with_alignment(48), {"general.alignment", "power of two", "u32 48"});
  expect_error(with_alignment(0), {"general.alignment", "found u32 0"});
  ASSERT_TRUE(parse_bytes(with_alignment(32).bytes()).is_ok());
  ByteBuilder b;
  b.header(3, 0, 1).kv_string("general.alignment", "32");
  expect_error(b, {"general.alignment", "found string \"32\""});
}

TEST(GgufReader, TypedGettersNameKeyExpectedAndFound) {
  ByteBuilder b;
  b.header(3, 0, 5).kv_u32("u", 7).kv_string("s", "text");
  b.str("neg").type(ValueType::I32).put<int32_t>(-3);
  b.str("flag").type(ValueType::BOOL).fill(1, 1);
  b.str("arr").type(ValueType::ARRAY).type(ValueType::I32).u64(1).put<int32_t>(5);
  auto f = parse_bytes(b.bytes());
  ASSERT_TRUE(f.is_ok()) << f.status().message();

  EXPECT_EQ(*f->get_uint("u"), 7u);
  EXPECT_EQ(*f->get_float("u"), 7.0);
  EXPECT_EQ(f->get_string("u").status().message(), "test.gguf: metadata key \"u\": expected a string, found u32 7");
  EXPECT_EQ(f->get_uint("missing").status().message(),
            "test.gguf: metadata key \"missing\": expected a non-negative integer, found no such key");
  EXPECT_NE(f->get_uint("neg").status().message().find("found i32 -3"), std::string::npos);
  EXPECT_NE(f->get_float("s").status().message().find("expected a number, found string \"text\""), std::string::npos);

  EXPECT_EQ(*f->get_uint_opt("missing"), std::nullopt);
  EXPECT_EQ(*f->get_uint_opt("u"), 7u);
  EXPECT_FALSE(f->get_uint_opt("s").is_ok());
  EXPECT_EQ(*f->get_float_opt("missing"), std::nullopt);
  EXPECT_EQ(*f->get_bool_opt("flag"), true);
  EXPECT_FALSE(f->get_bool_opt("u").is_ok());
  EXPECT_EQ(*f->get_string_opt("s"), "text");
  EXPECT_EQ(*f->get_string_opt("missing"), std::nullopt);

  EXPECT_TRUE(f->get_array("arr").is_ok());
  EXPECT_TRUE(f->get_array("arr", ValueType::I32).is_ok());
  EXPECT_NE(f->get_array("arr", ValueType::STRING).status().message().find("expected an array of string, found an array of i32"),
            std::string::npos);
  EXPECT_NE(f->get_array("u").status().message().find("expected an array, found u32 7"), std::string::npos);
}

}  // namespace
}  // namespace tern::gguf
