// GGUF v2/v3 reader (memory-mapped) and the in-memory metadata model shared with the writer.
// The reader validates every length, offset and type against the file size before it touches
// the bytes, so a truncated or corrupt file yields an error naming the field, the byte offset,
// what was expected and what was found. Tensor data is used in place from the map.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/status.h"

namespace tern::gguf {

// Limits the reader enforces (and the writer honours, so whatever it writes reads back).
inline constexpr uint64_t kDefaultAlignment = 32;   // when general.alignment is absent
inline constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;  // sanity bound; real files use 32..4096
inline constexpr uint32_t kMaxDims = 4;             // GGML tensors have at most 4 dims
inline constexpr int kMaxArrayDepth = 8;            // arrays of arrays of ... at most this deep
inline constexpr uint64_t kMaxKeyBytes = 65535;     // metadata key length (GGUF spec bound)
inline constexpr uint64_t kMaxTensorNameBytes = 65535;

// GGUF metadata value types (the on-disk ids).
enum class ValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
const char* value_type_name(ValueType t);  // "u32", "string", ...; "unknown" past F64

struct Value;
// An array keeps its element type (needed to write it back and for empty arrays).
struct Array {
  ValueType elem_type = ValueType::U8;
  std::vector<Value> items;
};

struct Value {
  ValueType type = ValueType::U8;
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<Array>> data;

  static Value u8(uint8_t v) { return Value{ValueType::U8, uint64_t{v}}; }
  static Value i8(int8_t v) { return Value{ValueType::I8, int64_t{v}}; }
  static Value u16(uint16_t v) { return Value{ValueType::U16, uint64_t{v}}; }
  static Value i16(int16_t v) { return Value{ValueType::I16, int64_t{v}}; }
  static Value u32(uint32_t v) { return Value{ValueType::U32, uint64_t{v}}; }
  static Value i32(int32_t v) { return Value{ValueType::I32, int64_t{v}}; }
  static Value u64(uint64_t v) { return Value{ValueType::U64, v}; }
  static Value i64(int64_t v) { return Value{ValueType::I64, v}; }
  static Value f32(float v) { return Value{ValueType::F32, double{v}}; }
  static Value f64(double v) { return Value{ValueType::F64, v}; }
  static Value boolean(bool v) { return Value{ValueType::BOOL, v}; }
  static Value string(std::string v) { return Value{ValueType::STRING, std::move(v)}; }
  static Value array(ValueType elem_type, std::vector<Value> items);

  // Typed access; nullopt when the value is not of a compatible kind.
  std::optional<uint64_t> as_uint() const;   // any unsigned or non-negative signed integer
  std::optional<int64_t> as_int() const;     // any integer that fits
  std::optional<double> as_float() const;    // F32/F64 (and integers)
  std::optional<bool> as_bool() const;
  const std::string* as_string() const;
  const Array* as_array() const;
};

// Deep equality: same type, same payload, arrays item by item. Floats compare by bit pattern,
// so a NaN equals itself (what a round trip needs).
bool operator==(const Value& a, const Value& b);
bool operator==(const Array& a, const Array& b);

// One-line rendering for tools and error messages: strings quoted and escaped, cut to
// `max_string_bytes` (0 = no limit); arrays as `[string; 49152 items] "a", "b", ...` showing at
// most `max_items` items.
std::string summarize(const Value& v, size_t max_items = 8, size_t max_string_bytes = 64);

struct TensorInfo {
  std::string name;
  DType type = DType::F32;
  std::vector<int64_t> shape;  // GGUF order: shape[0] is the innermost (contiguous) dimension
  uint64_t offset = 0;         // relative to the start of the data section
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // into the map (reader only)
  uint64_t info_offset = 0;       // byte offset of this tensor's info record (reader only; for errors)

  int64_t numel() const;
};

class File {
 public:
  // Opens and validates `path`. Never reads out of bounds; all failures are Status errors.
  static Result<File> open(const std::string& path);
  // Parses a GGUF image already in memory (fuzzing, tests). `bytes` must outlive the File.
  static Result<File> parse(const uint8_t* bytes, size_t size, std::string name = "<memory>");

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  // Start of the data section. A file without tensors may end before the aligned offset
  // (llama.cpp's vocab-only files do); then this is the file size.
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return file_size_; }
  const std::string& path() const { return path_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return metadata_; }
  const Value* find(const std::string& key) const;
  // Typed helpers: error (naming the key, expected and found type) when missing or mistyped.
  Result<std::string> get_string(const std::string& key) const;
  Result<uint64_t> get_uint(const std::string& key) const;
  Result<double> get_float(const std::string& key) const;
  // Optional variants: nullopt when missing, error when present with a wrong type.
  Result<std::optional<uint64_t>> get_uint_opt(const std::string& key) const;
  Result<std::optional<double>> get_float_opt(const std::string& key) const;
  Result<std::optional<bool>> get_bool_opt(const std::string& key) const;
  Result<std::optional<std::string>> get_string_opt(const std::string& key) const;
  // An array value; when `elem_type` is given the array must hold items of that type.
  Result<const Array*> get_array(const std::string& key,
                                 std::optional<ValueType> elem_type = std::nullopt) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // Bytes of all tensor data (what a backend that copies weights must hold).
  uint64_t tensor_bytes() const {
    uint64_t n = 0;
    for (const TensorInfo& t : tensors_) n += t.n_bytes;
    return n;
  }
  const TensorInfo* find_tensor(const std::string& name) const;

 private:
  std::shared_ptr<MappedFile> map_;  // null for parse()
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  uint64_t file_size_ = 0;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::map<std::string, size_t> metadata_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;

  friend class Parser;
};

// Writer: collects metadata and tensors, then writes a GGUF v3 file (alignment 32 unless
// general.alignment says otherwise). Tensor bytes are copied from caller memory at write().
// Tensors are laid out in the order added, each at an aligned offset and each (the last too)
// followed by zero padding up to the alignment. Everything is validated at write(): a value whose
// payload does not fit its declared type, a bad shape or a duplicate name is an error there.
class Writer {
 public:
  void set(const std::string& key, Value value);  // replaces an existing key, keeps order
  // `data` must hold row_bytes(type, shape[0]) * (product of the other dims) bytes and stay
  // alive until write(). Shape in GGUF order (innermost first).
  void add_tensor(const std::string& name, DType type, std::vector<int64_t> shape, const void* data);
  // Streams tensors through a callback instead of holding them (for multi-GB synthesized models):
  // fill(dst) writes exactly the tensor's bytes.
  void add_tensor_generated(const std::string& name, DType type, std::vector<int64_t> shape,
                            std::function<void(uint8_t* dst)> fill);
  // Writes to a temp file next to `path` and renames it into place.
  Status write(const std::string& path) const;
  // The same image in memory (tests, fuzzing, small files). Generated tensors are filled here.
  Result<std::vector<uint8_t>> to_bytes() const;

 private:
  class Sink;
  Status write_to(Sink& sink) const;
  struct PendingTensor {
    std::string name;
    DType type;
    std::vector<int64_t> shape;
    const void* data = nullptr;
    std::function<void(uint8_t*)> fill;
  };
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace tern::gguf
