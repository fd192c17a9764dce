// Writer -> reader round trips: every value type (nested and empty arrays included), tensors of
// plain, legacy-quant and k-quant types, streamed tensors, custom alignment, the on-disk path
// (temp file + rename) and the writer's own validation.
#include <gtest/gtest.h>

#include <dirent.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>

#include "formats/gguf.h"
#include "gguf_bytes.h"

namespace tern::gguf {
namespace {

using testing::parse_bytes;

std::vector<std::pair<std::string, Value>> every_value_type() {
  std::vector<std::pair<std::string, Value>> kv;
  kv.emplace_back("t.u8", Value::u8(255));
  kv.emplace_back("t.i8", Value::i8(-128));
  kv.emplace_back("t.u16", Value::u16(65535));
  kv.emplace_back("t.i16", Value::i16(-32768));
  kv.emplace_back("t.u32", Value::u32(4000000000u));
  kv.emplace_back("t.i32", Value::i32(std::numeric_limits<int32_t>::min()));
  kv.emplace_back("t.u64", Value::u64(std::numeric_limits<uint64_t>::max()));
  kv.emplace_back("t.i64", Value::i64(std::numeric_limits<int64_t>::min()));
  kv.emplace_back("t.f32", Value::f32(-1.5e-7f));
  kv.emplace_back("t.f32.nan", Value::f32(std::numeric_limits<float>::quiet_NaN()));
  kv.emplace_back("t.f64", Value::f64(3.141592653589793));
  kv.emplace_back("t.bool.true", Value::boolean(true));
  kv.emplace_back("t.bool.false", Value::boolean(false));
  kv.emplace_back("t.string", Value::string("h\xc3\xa9llo\nworld"));
  kv.emplace_back("t.string.empty", Value::string(""));
  kv.emplace_back("t.string.binary", Value::string(std::string("a\0b\xff", 4)));
  kv.emplace_back("t.arr.u8", Value::array(ValueType::U8, {Value::u8(1), Value::u8(2)}));
  kv.emplace_back("t.arr.i16", Value::array(ValueType::I16, {Value::i16(-3)}));
  kv.emplace_back("t.arr.i32", Value::array(ValueType::I32, {Value::i32(-1), Value::i32(7)}));
  kv.emplace_back("t.arr.u64", Value::array(ValueType::U64, {Value::u64(1ull << 40)}));
  kv.emplace_back("t.arr.f32", Value::array(ValueType::F32, {Value::f32(0.25f), Value::f32(-0.0f)}));
  kv.emplace_back("t.arr.f64", Value::array(ValueType::F64, {Value::f64(1e300)}));
  kv.emplace_back("t.arr.bool", Value::array(ValueType::BOOL, {Value::boolean(true), Value::boolean(false)}));
  kv.emplace_back("t.arr.string", Value::array(ValueType::STRING, {Value::string("a"), Value::string("")}));
  // Empty arrays keep their item type, which only the array header carries.
  kv.emplace_back("t.arr.empty.f64", Value::array(ValueType::F64, {}));
  kv.emplace_back("t.arr.empty.string", Value::array(ValueType::STRING, {}));
  kv.emplace_back("t.arr.empty.array", Value::array(ValueType::ARRAY, {}));
  // Arrays of arrays, with differing inner item types, empty inner arrays and a third level.
  kv.emplace_back("t.arr.nested",
                  Value::array(ValueType::ARRAY,
                               {Value::array(ValueType::U32, {Value::u32(1), Value::u32(2), Value::u32(3)}),
                                Value::array(ValueType::STRING, {Value::string("x")}),
                                Value::array(ValueType::I8, {}),
                                Value::array(ValueType::ARRAY, {Value::array(ValueType::BOOL, {Value::boolean(true)})})}));
  return kv;
}

struct TestTensor {
  std::string name;
  DType type;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

std::vector<TestTensor> test_tensors() {
  auto make = [](std::string name, DType type, std::vector<int64_t> shape) {
    TestTensor t{std::move(name), type, std::move(shape), {}};
    int64_t rows = 1;
    for (size_t i = 1; i < t.shape.size(); ++i) rows *= t.shape[i];
    t.bytes.resize(row_bytes(type, t.shape[0]) * static_cast<size_t>(rows));
    for (size_t i = 0; i < t.bytes.size(); ++i) t.bytes[i] = static_cast<uint8_t>(i * 7 + t.name.size());
    return t;
  };
  return {make("tok_embd.weight", DType::F32, {8, 3}),   // 96 bytes
          make("blk.0.q4", DType::Q4_0, {64, 2}),         // 4 blocks of 18 bytes: not aligned
          make("blk.0.h", DType::F16, {5}),               // 10 bytes
          make("blk.0.k", DType::Q4_K, {256, 1, 1, 2}),   // 4 dims
          make("last", DType::F32, {8})};                 // 32 bytes: the file ends on it
}

Writer make_writer(const std::vector<TestTensor>& tensors) {
  Writer w;
  for (auto& [k, v] : every_value_type()) w.set(k, v);
  for (const auto& t : tensors) w.add_tensor(t.name, t.type, t.shape, t.bytes.data());
  return w;
}

void expect_same_file(const File& f, const std::vector<TestTensor>& tensors, uint64_t alignment) {
  const auto expected_kv = every_value_type();
  ASSERT_GE(f.metadata().size(), expected_kv.size());
  for (size_t i = 0; i < expected_kv.size(); ++i) {
    EXPECT_EQ(f.metadata()[i].first, expected_kv[i].first);
    EXPECT_TRUE(f.metadata()[i].second == expected_kv[i].second)
        << expected_kv[i].first << ": wrote " << summarize(expected_kv[i].second) << ", read "
        << summarize(f.metadata()[i].second);
  }
  ASSERT_EQ(f.tensors().size(), tensors.size());
  EXPECT_EQ(f.data_offset() % alignment, 0u);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& t = f.tensors()[i];
    EXPECT_EQ(t.name, tensors[i].name);
    EXPECT_EQ(t.type, tensors[i].type);
    EXPECT_EQ(t.shape, tensors[i].shape);
    EXPECT_EQ(t.n_bytes, tensors[i].bytes.size());
    EXPECT_EQ(t.offset % alignment, 0u) << t.name;
    ASSERT_NE(t.data, nullptr);
    EXPECT_EQ(0, std::memcmp(t.data, tensors[i].bytes.data(), t.n_bytes)) << t.name;
    EXPECT_EQ(f.find_tensor(t.name), &t);
  }
}

TEST(GgufRoundTrip, EveryValueTypeAndTensorSurvivesInMemory) {
  const auto tensors = test_tensors();
  auto bytes = make_writer(tensors).to_bytes();
  ASSERT_TRUE(bytes.is_ok()) << bytes.status().message();
  auto f = parse_bytes(*bytes);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->file_size(), bytes->size());
  expect_same_file(*f, tensors, 32);
  // The last tensor is followed by padding, so the file is a whole number of alignment units.
  EXPECT_EQ(bytes->size() % 32, 0u);
  // Re-writing what was read gives the same image, byte for byte.
  Writer again;
  for (const auto& [k, v] : f->metadata()) again.set(k, v);
  for (const auto& t : f->tensors()) again.add_tensor(t.name, t.type, t.shape, t.data);
  auto bytes2 = again.to_bytes();
  ASSERT_TRUE(bytes2.is_ok()) << bytes2.status().message();
  EXPECT_EQ(*bytes2, *bytes);
}

TEST(GgufRoundTrip, CustomAlignmentIsHonoured) {
  const auto tensors = test_tensors();
  Writer w = make_writer(tensors);
  w.set("general.alignment", Value::u32(256));
  auto bytes = w.to_bytes();
  ASSERT_TRUE(bytes.is_ok()) << bytes.status().message();
  auto f = parse_bytes(*bytes);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->alignment(), 256u);
  expect_same_file(*f, tensors, 256);
  EXPECT_EQ(f->tensors()[1].offset, 256u);  // the 96-byte first tensor is padded to 256
}

TEST(GgufRoundTrip, SetReplacesAKeyInPlace) {
  Writer w;
  w.set("a", Value::u32(1));
  w.set("b", Value::u32(2));
  w.set("a", Value::string("one"));
  auto bytes = w.to_bytes();
  ASSERT_TRUE(bytes.is_ok());
  auto f = parse_bytes(*bytes);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  ASSERT_EQ(f->metadata().size(), 2u);
  EXPECT_EQ(f->metadata()[0].first, "a");
  EXPECT_EQ(*f->get_string("a"), "one");
  EXPECT_EQ(f->metadata()[1].first, "b");
}

TEST(GgufRoundTrip, GeneratedTensorsAreFilledOneAtATime) {
  Writer w;
  int n_calls = 0;
  for (int i = 0; i < 3; ++i) {
    w.add_tensor_generated("gen." + std::to_string(i), DType::Q8_0, {32 * (i + 1), 2}, [i, &n_calls](uint8_t* dst) {
      ++n_calls;
      const size_t n = row_bytes(DType::Q8_0, 32 * (i + 1)) * 2;
      for (size_t k = 0; k < n; ++k) dst[k] = static_cast<uint8_t>(k + i);
    });
  }
  auto bytes = w.to_bytes();
  ASSERT_TRUE(bytes.is_ok()) << bytes.status().message();
  EXPECT_EQ(n_calls, 3);
  auto f = parse_bytes(*bytes);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  for (int i = 0; i < 3; ++i) {
    const TensorInfo& t = f->tensors()[i];
    ASSERT_EQ(t.n_bytes, 34u * (i + 1) * 2);
    for (size_t k = 0; k < t.n_bytes; ++k) ASSERT_EQ(t.data[k], static_cast<uint8_t>(k + i)) << t.name << " byte " << k;
  }
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    closedir(d);
  }
  return names;
}

class GgufWriteFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tern_gguf_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const auto& n : list_dir(dir_)) std::remove((dir_ + "/" + n).c_str());
    rmdir(dir_.c_str());
  }
  std::string dir_;
};

TEST_F(GgufWriteFile, WriteThenOpenMatchesTheInMemoryImage) {
  const auto tensors = test_tensors();
  const Writer w = make_writer(tensors);
  const std::string path = dir_ + "/model.gguf";
  ASSERT_TRUE(w.write(path).is_ok());
  EXPECT_EQ(list_dir(dir_), std::vector<std::string>{"model.gguf"});  // no temp file left behind

  auto f = File::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->path(), path);
  expect_same_file(*f, tensors, 32);

  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> on_disk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(on_disk, *w.to_bytes());
}

TEST_F(GgufWriteFile, FailedWriteLeavesTheOldFileAndNoTemp) {
  const std::string path = dir_ + "/model.gguf";
  Writer good;
  good.set("k", Value::u32(1));
  ASSERT_TRUE(good.write(path).is_ok());

  Writer bad;
  bad.set("k", Value{ValueType::U8, uint64_t{300}});
  Status st = bad.write(path);
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(list_dir(dir_), std::vector<std::string>{"model.gguf"});
  auto f = File::open(path);
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ(*f->get_uint("k"), 1u);
}

// Each invalid writer input gives an error naming the offending key or tensor.
TEST(GgufWriterValidation, RejectsWhatTheReaderWouldReject) {
  const uint8_t data[64] = {};
  struct Case {
    const char* what;
    std::function<void(Writer&)> build;
    std::vector<std::string> expect_in_message;
  };
  const std::vector<Case> cases = {
      {"u8 out of range", [](Writer& w) { w.set("x.u8", Value{ValueType::U8, uint64_t{300}}); }, {"\"x.u8\"", "at most 255", "300"}},
      {"i16 out of range", [](Writer& w) { w.set("x.i16", Value{ValueType::I16, int64_t{-40000}}); }, {"\"x.i16\"", "-32768..32767"}},
      {"payload mismatch", [](Writer& w) { w.set("x.s", Value{ValueType::STRING, uint64_t{1}}); }, {"\"x.s\"", "std::string payload"}},
      {"f32 overflow", [](Writer& w) { w.set("x.f", Value{ValueType::F32, 1e300}); }, {"\"x.f\"", "float range"}},
      {"mixed array", [](Writer& w) { w.set("x.arr", Value::array(ValueType::U32, {Value::u32(1), Value::i32(2)})); }, {"\"x.arr\"", "[1]", "u32", "i32"}},
      {"empty key", [](Writer& w) { w.set("", Value::u32(1)); }, {"key", "found 0"}},
      {"alignment not a power of two", [](Writer& w) { w.set("general.alignment", Value::u32(48)); }, {"general.alignment", "power of two", "48"}},
      {"duplicate tensor", [&](Writer& w) {
         w.add_tensor("t", DType::F32, {4}, data);
         w.add_tensor("t", DType::F32, {4}, data);
       }, {"\"t\" (#1)", "unique"}},
      {"block size", [&](Writer& w) { w.add_tensor("q", DType::Q4_0, {33}, data); }, {"\"q\"", "block size 32", "33"}},
      {"too many dims", [&](Writer& w) { w.add_tensor("d", DType::F32, {1, 1, 1, 1, 1}, data); }, {"\"d\"", "1..4 dims", "5"}},
      {"zero dim", [&](Writer& w) { w.add_tensor("z", DType::F32, {4, 0}, data); }, {"\"z\"", "shape[1]", "found 0"}},
      {"no data", [&](Writer& w) { w.add_tensor("n", DType::F32, {4}, nullptr); }, {"\"n\"", "found neither"}},
  };
  for (const Case& c : cases) {
    Writer w;
    c.build(w);
    auto bytes = w.to_bytes();
    ASSERT_FALSE(bytes.is_ok()) << c.what;
    for (const auto& needle : c.expect_in_message) {
      EXPECT_NE(bytes.status().message().find(needle), std::string::npos)
          << c.what << ": '" << needle << "' not in: " << bytes.status().message();
    }
  }
}

TEST(GgufValue, AccessorsConvertOnlyWhatFits) {
  EXPECT_EQ(Value::i32(5).as_uint(), 5u);
  EXPECT_EQ(Value::i32(-5).as_uint(), std::nullopt);
  EXPECT_EQ(Value::u64(std::numeric_limits<uint64_t>::max()).as_int(), std::nullopt);
  EXPECT_EQ(Value::u8(7).as_int(), 7);
  EXPECT_EQ(Value::u32(3).as_float(), 3.0);
  EXPECT_EQ(Value::f32(0.5f).as_float(), 0.5);
  EXPECT_EQ(Value::f32(0.5f).as_uint(), std::nullopt);
  EXPECT_EQ(Value::string("x").as_bool(), std::nullopt);
  EXPECT_EQ(Value::u8(1).as_bool(), std::nullopt);
  EXPECT_EQ(Value::boolean(true).as_bool(), true);
  EXPECT_EQ(Value::u32(1).as_string(), nullptr);
  EXPECT_EQ(Value::string("x").as_array(), nullptr);
  // A payload that disagrees with the declared type reads as "not that kind", never throws.
  EXPECT_EQ((Value{ValueType::U32, std::string("x")}).as_uint(), std::nullopt);
  EXPECT_EQ((Value{ValueType::STRING, uint64_t{1}}).as_string(), nullptr);
}

TEST(GgufValue, EqualityIsDeep) {
  const Value a = Value::array(ValueType::ARRAY, {Value::array(ValueType::U8, {Value::u8(1)})});
  const Value b = Value::array(ValueType::ARRAY, {Value::array(ValueType::U8, {Value::u8(1)})});
  const Value c = Value::array(ValueType::ARRAY, {Value::array(ValueType::U8, {Value::u8(2)})});
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(a == c);
  EXPECT_FALSE(Value::u32(1) == Value::u64(1));  // same number, different type
  EXPECT_FALSE(Value::array(ValueType::U8, {}) == Value::array(ValueType::I8, {}));
  EXPECT_TRUE(Value::f32(NAN) == Value::f32(NAN));
  EXPECT_FALSE(Value::f32(0.0f) == Value::f32(-0.0f));
}

TEST(GgufValue, SummarizeIsOneReadableLine) {
  EXPECT_EQ(summarize(Value::u32(30)), "30");
  EXPECT_EQ(summarize(Value::i8(-3)), "-3");
  EXPECT_EQ(summarize(Value::f32(1e-5f)), "9.99999975e-06");
  EXPECT_EQ(summarize(Value::boolean(false)), "false");
  EXPECT_EQ(summarize(Value::string("a\"b\n\x01")), "\"a\\\"b\\n\\x01\"");
  EXPECT_EQ(summarize(Value::string("abcdefgh"), 8, 3), "\"abc\"... (8 bytes)");
  EXPECT_EQ(summarize(Value::string("abcdefgh"), 8, 0), "\"abcdefgh\"");
  const Value arr = Value::array(ValueType::STRING, {Value::string("x"), Value::string("y"), Value::string("z")});
  EXPECT_EQ(summarize(arr, 2), "[string; 3 items] \"x\", \"y\", ...");
  EXPECT_EQ(summarize(arr, 3), "[string; 3 items] \"x\", \"y\", \"z\"");
  EXPECT_EQ(summarize(Value::array(ValueType::F64, {})), "[f64; 0 items]");
  const Value nested = Value::array(ValueType::ARRAY, {Value::array(ValueType::U8, {Value::u8(1)})});
  EXPECT_EQ(summarize(nested), "[array; 1 item] ([u8; 1 item] 1)");
}

}  // namespace
}  // namespace tern::gguf
