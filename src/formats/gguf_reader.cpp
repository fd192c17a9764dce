// GGUF v2/v3 reader. The bytes are untrusted: every read goes through a bounds check against the
// end of the image, every length or count is compared with what the rest of the file could hold
// before anything is allocated, and every failure is a Status that names the record ("tensor
// 'blk.0.attn_q.weight' (#3)"), the field, its byte offset, what was expected and what was found.
//
// Layout (all little-endian):
//   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv x   { string key | u32 value type | value }
//   n_tensors x { string name | u32 n_dims | u64 dims[n_dims] | u32 type | u64 offset }
//   zero padding to general.alignment | data section (tensor offsets are relative to its start)
// where string = u64 length + bytes, and an array value = u32 item type | u64 n | n values.
// v2 and v3 share this layout (v3 only added big-endian files, which tern does not read); v1
// used 32-bit counts and lengths and is rejected.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>

#include "formats/gguf.h"

namespace tern::gguf {
namespace {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

constexpr uint8_t kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint32_t kMaxValueTypeId = static_cast<uint32_t>(ValueType::F64);
// The smallest on-disk record of each kind; a count larger than (bytes left) / (this) is a lie
// and is rejected before anything is reserved.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;                  // key len, 1-byte key, type, u8
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;  // name len, name, n_dims, dim, type, offset

// Bytes one item of type `t` occupies at the least (exactly, for fixed-size types).
uint64_t min_item_bytes(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    case ValueType::STRING: return 8;      // the length field of an empty string
    case ValueType::ARRAY: return 4 + 8;   // item type and length of an empty array
  }
  return 1;
}

// Names and keys are arbitrary bytes; messages show them escaped and cut to a readable length.
std::string printable(const std::string& s) { return summarize(Value::string(s), 0, 80); }

std::string hex_bytes(const uint8_t* p, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out.push_back(' ');
    out.push_back(kDigits[p[i] >> 4]);
    out.push_back(kDigits[p[i] & 15]);
  }
  return out;
}

std::string str(uint64_t v) { return std::to_string(v); }

}  // namespace

// Friend of File; fills it in one pass over the image.
class Parser {
 public:
  Parser(const uint8_t* bytes, size_t size, std::string name)
      : bytes_(bytes), size_(size), name_(std::move(name)) {}

  Result<File> run() {
    uint64_t n_tensors = 0, n_kv = 0;
    TERN_RETURN_IF_ERROR(parse_header(&n_tensors, &n_kv));
    file_.metadata_.reserve(n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) TERN_RETURN_IF_ERROR(parse_kv(i));
    file_.tensors_.reserve(n_tensors);
    offset_field_pos_.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) TERN_RETURN_IF_ERROR(parse_tensor_info(i));
    TERN_RETURN_IF_ERROR(place_tensors());
    file_.path_ = name_;
    file_.file_size_ = size_;
    return std::move(file_);
  }

 private:
  uint64_t remaining() const { return size_ - pos_; }

  // "<file>: <record>[i][j]: <what> at byte offset <at>: expected <expected>, found <found>"
  Status fail(uint64_t at, std::string_view what, std::string_view expected, std::string_view found) const {
    std::string msg = name_ + ": ";
    if (!field_.empty()) {
      msg += field_;
      for (uint64_t i : item_path_) msg += "[" + str(i) + "]";
      msg += ": ";
    }
    msg += std::string(what) + " at byte offset " + str(at) + ": expected " + std::string(expected) +
           ", found " + std::string(found);
    return error(std::move(msg));
  }

  Status need(uint64_t n_bytes, std::string_view what) const {
    if (n_bytes <= remaining()) return Status::ok();
    return fail(pos_, what, str(n_bytes) + " bytes", "only " + str(remaining()) + " before the end of the file");
  }

  template <typename T>
  Status read(T* out, std::string_view what) {
    TERN_RETURN_IF_ERROR(need(sizeof(T), what));
    std::memcpy(out, bytes_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::ok();
  }

  // A u64 length and that many bytes; the length is checked before anything is allocated.
  Status read_string(std::string* out, std::string_view what, uint64_t min_len, uint64_t max_len) {
    const uint64_t len_pos = pos_;
    uint64_t len = 0;
    // note: the label is built only on the error path; this runs once per vocab entry.
    if (remaining() < sizeof(len)) return need(sizeof(len), std::string(what) + " length");
    std::memcpy(&len, bytes_ + pos_, sizeof(len));
    pos_ += sizeof(len);
    if (len < min_len || len > max_len) {
      return fail(len_pos, std::string(what) + " length", str(min_len) + ".." + str(max_len) + " bytes", str(len));
    }
    if (len > remaining()) {
      return fail(len_pos, std::string(what) + " length",
                  "at most " + str(remaining()) + " bytes (the rest of the file)", str(len));
    }
    out->assign(reinterpret_cast<const char*>(bytes_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return Status::ok();
  }

  Status read_value_type(ValueType* out, std::string_view what) {
    const uint64_t at = pos_;
    uint32_t id = 0;
    TERN_RETURN_IF_ERROR(read(&id, what));
    if (id > kMaxValueTypeId) return fail(at, what, "a GGUF value type id 0..12", str(id));
    *out = static_cast<ValueType>(id);
    return Status::ok();
  }

  template <typename Disk, typename Stored>
  Status read_scalar(Value* out, std::string_view what) {
    Disk v{};
    TERN_RETURN_IF_ERROR(read(&v, what));
    out->data = static_cast<Stored>(v);
    return Status::ok();
  }

  // `depth` counts the arrays enclosing this value.
  Status read_value(ValueType type, int depth, Value* out) {
    out->type = type;
    switch (type) {
      case ValueType::U8: return read_scalar<uint8_t, uint64_t>(out, "u8 value");
      case ValueType::I8: return read_scalar<int8_t, int64_t>(out, "i8 value");
      case ValueType::U16: return read_scalar<uint16_t, uint64_t>(out, "u16 value");
      case ValueType::I16: return read_scalar<int16_t, int64_t>(out, "i16 value");
      case ValueType::U32: return read_scalar<uint32_t, uint64_t>(out, "u32 value");
      case ValueType::I32: return read_scalar<int32_t, int64_t>(out, "i32 value");
      case ValueType::U64: return read_scalar<uint64_t, uint64_t>(out, "u64 value");
      case ValueType::I64: return read_scalar<int64_t, int64_t>(out, "i64 value");
      case ValueType::F32: return read_scalar<float, double>(out, "f32 value");
      case ValueType::F64: return read_scalar<double, double>(out, "f64 value");
      case ValueType::BOOL: {
        const uint64_t at = pos_;
        uint8_t b = 0;
        TERN_RETURN_IF_ERROR(read(&b, "bool value"));
        if (b > 1) return fail(at, "bool value", "0 or 1", str(b));
        out->data = b == 1;
        return Status::ok();
      }
      case ValueType::STRING: {
        std::string s;
        TERN_RETURN_IF_ERROR(read_string(&s, "string value", 0, std::numeric_limits<uint64_t>::max()));
        out->data = std::move(s);
        return Status::ok();
      }
      case ValueType::ARRAY: return read_array(depth + 1, out);
    }
    return fail(pos_, "value type", "a GGUF value type id 0..12", str(static_cast<uint32_t>(type)));
  }

  Status read_array(int depth, Value* out) {
    const uint64_t type_pos = pos_;
    ValueType elem_type = ValueType::U8;
    TERN_RETURN_IF_ERROR(read_value_type(&elem_type, "array item type"));
    if (depth > kMaxArrayDepth) {
      return fail(type_pos, "array nesting", "at most " + str(kMaxArrayDepth) + " levels of arrays",
                  "level " + str(depth));
    }
    const uint64_t len_pos = pos_;
    uint64_t n_items = 0;
    TERN_RETURN_IF_ERROR(read(&n_items, "array length"));
    const uint64_t item_bytes = min_item_bytes(elem_type);
    if (n_items > remaining() / item_bytes) {
      return fail(len_pos, "array length",
                  "at most " + str(remaining() / item_bytes) + " " + value_type_name(elem_type) +
                      " items (what the rest of the file can hold)",
                  str(n_items));
    }
    auto arr = std::make_shared<Array>();
    arr->elem_type = elem_type;
    arr->items.resize(static_cast<size_t>(n_items));
    item_path_.push_back(0);
    for (uint64_t i = 0; i < n_items; ++i) {
      item_path_.back() = i;
      TERN_RETURN_IF_ERROR(read_value(elem_type, depth, &arr->items[i]));
    }
    item_path_.pop_back();
    out->data = std::move(arr);
    return Status::ok();
  }

  Status parse_header(uint64_t* n_tensors, uint64_t* n_kv) {
    TERN_RETURN_IF_ERROR(need(4, "magic"));
    if (std::memcmp(bytes_, kMagic, 4) != 0) {
      return fail(0, "magic", "\"GGUF\" (47 47 55 46)", hex_bytes(bytes_, 4));
    }
    pos_ = 4;
    uint32_t version = 0;
    TERN_RETURN_IF_ERROR(read(&version, "version"));
    if (version == 1) {
      return fail(4, "version", "2 or 3 (GGUF v1 used 32-bit counts and is not supported)", "1");
    }
    if (version != 2 && version != 3) {
      const uint32_t swapped = __builtin_bswap32(version);
      if (swapped == 2 || swapped == 3) {
        return fail(4, "version", "2 or 3 stored little-endian",
                    str(version) + ", which is version " + str(swapped) + " stored big-endian (not supported)");
      }
      return fail(4, "version", "2 or 3", str(version));
    }
    file_.version_ = version;
    TERN_RETURN_IF_ERROR(read(n_tensors, "tensor count"));
    TERN_RETURN_IF_ERROR(read(n_kv, "metadata key count"));
    if (*n_kv > remaining() / kMinKvBytes) {
      return fail(16, "metadata key count",
                  "at most " + str(remaining() / kMinKvBytes) + " (what the rest of the file can hold)", str(*n_kv));
    }
    if (*n_tensors > remaining() / kMinTensorInfoBytes) {
      return fail(8, "tensor count",
                  "at most " + str(remaining() / kMinTensorInfoBytes) + " (what the rest of the file can hold)",
                  str(*n_tensors));
    }
    return Status::ok();
  }

  Status parse_kv(uint64_t index) {
    field_ = "metadata key #" + str(index);
    const uint64_t key_pos = pos_;
    std::string key;
    TERN_RETURN_IF_ERROR(read_string(&key, "key", 1, kMaxKeyBytes));
    field_ = "metadata key " + printable(key) + " (#" + str(index) + ")";
    if (auto it = file_.metadata_index_.find(key); it != file_.metadata_index_.end()) {
      return fail(key_pos, "key", "a key not seen before", "a repeat of key #" + str(it->second));
    }
    ValueType type = ValueType::U8;
    TERN_RETURN_IF_ERROR(read_value_type(&type, "value type"));
    const uint64_t value_pos = pos_;
    Value value;
    TERN_RETURN_IF_ERROR(read_value(type, 0, &value));
    if (key == "general.alignment") {
      // Tensor offsets below are checked against this, so it is settled as soon as it is read.
      const std::optional<uint64_t> alignment = value.as_uint();
      if (!alignment || !std::has_single_bit(*alignment) || *alignment > kMaxAlignment) {
        return fail(value_pos, "value", "a power of two in 1..2^30",
                    std::string(value_type_name(type)) + " " + summarize(value, 4, 32));
      }
      file_.alignment_ = *alignment;
    }
    file_.metadata_index_.emplace(key, file_.metadata_.size());
    file_.metadata_.emplace_back(std::move(key), std::move(value));
    field_.clear();
    return Status::ok();
  }

  Status parse_tensor_info(uint64_t index) {
    TensorInfo info;
    info.info_offset = pos_;
    field_ = "tensor #" + str(index);
    TERN_RETURN_IF_ERROR(read_string(&info.name, "name", 1, kMaxTensorNameBytes));
    field_ = "tensor " + printable(info.name) + " (#" + str(index) + ")";
    if (auto it = file_.tensor_index_.find(info.name); it != file_.tensor_index_.end()) {
      return fail(info.info_offset, "name", "a name not seen before", "a repeat of tensor #" + str(it->second));
    }

    const uint64_t n_dims_pos = pos_;
    uint32_t n_dims = 0;
    TERN_RETURN_IF_ERROR(read(&n_dims, "n_dims"));
    if (n_dims < 1 || n_dims > kMaxDims) return fail(n_dims_pos, "n_dims", "1.." + str(kMaxDims), str(n_dims));
    info.shape.resize(n_dims);
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim_pos = pos_;
      const std::string what = "dims[" + str(d) + "]";
      uint64_t dim = 0;
      TERN_RETURN_IF_ERROR(read(&dim, what));
      if (dim < 1 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return fail(dim_pos, what, "1..2^63-1", str(dim));
      }
      info.shape[d] = static_cast<int64_t>(dim);
      if (__builtin_mul_overflow(numel, info.shape[d], &numel)) {
        return fail(dim_pos, what, "dims whose product fits in 63 bits", str(dim) + " (the product overflows)");
      }
    }

    const uint64_t type_pos = pos_;
    uint32_t type_id = 0;
    TERN_RETURN_IF_ERROR(read(&type_id, "type id"));
    const std::optional<DType> type = dtype_from_gguf_id(type_id);
    if (!type) return fail(type_pos, "type id", "a known GGML type id", str(type_id));
    info.type = *type;
    const DTypeInfo type_info = *dtype_info(*type);
    if (info.shape[0] % type_info.block_elems != 0) {
      return fail(n_dims_pos + 4, "dims[0]",
                  "a multiple of the " + std::string(type_info.name) + " block size " + str(type_info.block_elems),
                  str(info.shape[0]));
    }
    // Checked: a row of a huge block type can overflow before the file-size check catches it.
    const uint64_t n_rows = static_cast<uint64_t>(numel / info.shape[0]);
    const uint64_t n_blocks_per_row = static_cast<uint64_t>(info.shape[0] / type_info.block_elems);
    uint64_t row_bytes = 0;
    if (__builtin_mul_overflow(n_blocks_per_row, type_info.block_bytes, &row_bytes) ||
        __builtin_mul_overflow(row_bytes, n_rows, &info.n_bytes)) {
      return fail(n_dims_pos, "shape", "a byte size that fits in 64 bits", "an overflow");
    }

    offset_field_pos_.push_back(pos_);
    TERN_RETURN_IF_ERROR(read(&info.offset, "data offset"));
    if (info.offset % file_.alignment_ != 0) {
      return fail(offset_field_pos_.back(), "data offset",
                  "a multiple of the alignment " + str(file_.alignment_), str(info.offset));
    }
    file_.tensor_index_.emplace(info.name, file_.tensors_.size());
    file_.tensors_.push_back(std::move(info));
    field_.clear();
    return Status::ok();
  }

  // Finds the data section and checks that every tensor's bytes lie inside it, without overlap.
  Status place_tensors() {
    const uint64_t alignment = file_.alignment_;
    const uint64_t pad = (alignment - pos_ % alignment) % alignment;
    const uint64_t data_start = pos_ + pad;  // pos_ <= size_, pad < alignment: cannot overflow 2^64
    if (file_.tensors_.empty()) {
      // Vocab-only files from llama.cpp end right after the metadata, without the padding.
      file_.data_offset_ = std::min<uint64_t>(data_start, size_);
      return Status::ok();
    }
    if (data_start > size_) {
      return fail(pos_, "padding before the data section",
                  "the file to continue to byte " + str(data_start) + " (alignment " + str(alignment) + ")",
                  "its end at byte " + str(size_));
    }
    file_.data_offset_ = data_start;
    const uint64_t data_bytes = size_ - data_start;
    auto& tensors = file_.tensors_;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TensorInfo& t = tensors[i];
      if (t.offset > data_bytes || t.n_bytes > data_bytes - t.offset) {
        field_ = "tensor " + printable(t.name) + " (#" + str(i) + ")";
        return fail(offset_field_pos_[i], "data range",
                    str(t.n_bytes) + " bytes at offset " + str(t.offset) + " inside the data section of " +
                        str(data_bytes) + " bytes",
                    "they would end " +
                        (t.offset > data_bytes ? str(t.offset - data_bytes)
                                               : str(t.n_bytes - (data_bytes - t.offset))) +
                        " bytes past the end of the file");
      }
    }
    std::vector<size_t> order(tensors.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tensors[a].offset < tensors[b].offset; });
    for (size_t k = 1; k < order.size(); ++k) {
      const TensorInfo& prev = tensors[order[k - 1]];
      const TensorInfo& cur = tensors[order[k]];
      if (prev.offset + prev.n_bytes > cur.offset) {  // both in range, so no overflow
        field_ = "tensor " + printable(cur.name) + " (#" + str(order[k]) + ")";
        return fail(offset_field_pos_[order[k]], "data offset",
                    "at least " + str(prev.offset + prev.n_bytes) + " (the end of tensor " + printable(prev.name) +
                        ", #" + str(order[k - 1]) + ")",
                    str(cur.offset) + " (the data overlap)");
      }
    }
    for (TensorInfo& t : tensors) t.data = bytes_ + data_start + t.offset;
    return Status::ok();
  }

  const uint8_t* bytes_;
  uint64_t size_;
  uint64_t pos_ = 0;
  std::string name_;
  std::string field_;                   // the record being parsed, for messages
  std::vector<uint64_t> item_path_;     // indices into the (nested) array being parsed
  std::vector<uint64_t> offset_field_pos_;  // byte offset of each tensor's offset field
  File file_;
};

Result<File> File::parse(const uint8_t* bytes, size_t size, std::string name) {
  return Parser(bytes, size, std::move(name)).run();
}

Result<File> File::open(const std::string& path) {
  TERN_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> map, MappedFile::open(path));
  TERN_ASSIGN_OR_RETURN(File file, parse(map->data(), map->size(), path));
  file.map_ = std::move(map);
  return file;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const Value* File::find(const std::string& key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const TensorInfo* File::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

Status key_error(const std::string& path, const std::string& key, std::string_view expected, const Value* found) {
  std::string msg = path + ": metadata key " + printable(key) + ": expected " + std::string(expected) + ", found ";
  msg += found == nullptr ? "no such key" : std::string(value_type_name(found->type)) + " " + summarize(*found, 4, 32);
  return error(std::move(msg));
}

}  // namespace

Result<std::optional<std::string>> File::get_string_opt(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::optional<std::string>();
  if (const std::string* s = v->as_string()) return std::optional<std::string>(*s);
  return key_error(path_, key, "a string", v);
}

Result<std::string> File::get_string(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr || v->as_string() == nullptr) return key_error(path_, key, "a string", v);
  return *v->as_string();
}

Result<std::optional<uint64_t>> File::get_uint_opt(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::optional<uint64_t>();
  if (auto u = v->as_uint()) return std::optional<uint64_t>(*u);
  return key_error(path_, key, "a non-negative integer", v);
}

Result<uint64_t> File::get_uint(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr || !v->as_uint()) return key_error(path_, key, "a non-negative integer", v);
  return *v->as_uint();
}

Result<std::optional<double>> File::get_float_opt(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::optional<double>();
  if (auto f = v->as_float()) return std::optional<double>(*f);
  return key_error(path_, key, "a number", v);
}

Result<double> File::get_float(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr || !v->as_float()) return key_error(path_, key, "a number", v);
  return *v->as_float();
}

Result<std::optional<bool>> File::get_bool_opt(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::optional<bool>();
  if (auto b = v->as_bool()) return std::optional<bool>(*b);
  return key_error(path_, key, "a bool", v);
}

Result<const Array*> File::get_array(const std::string& key, std::optional<ValueType> elem_type) const {
  const Value* v = find(key);
  const Array* arr = v == nullptr ? nullptr : v->as_array();
  if (arr == nullptr || (elem_type && arr->elem_type != *elem_type)) {
    const std::string expected =
        elem_type ? std::string("an array of ") + value_type_name(*elem_type) : std::string("an array");
    if (arr != nullptr) {
      return error(path_ + ": metadata key " + printable(key) + ": expected " + expected + ", found an array of " +
                   value_type_name(arr->elem_type));
    }
    return key_error(path_, key, expected, v);
  }
  return arr;
}

}  // namespace tern::gguf
