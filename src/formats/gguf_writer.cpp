// GGUF v3 writer. Everything is validated before the first byte is written, with the same limits
// the reader enforces, so whatever write() accepts File::parse reads back to equal values.
// Files appear atomically: the image goes to a temp file next to the target, which is fsynced and
// renamed over it; a crash or an error leaves either the old file or none, never half of one.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "formats/gguf.h"

namespace tern::gguf {

// Where the image goes: a file descriptor or a byte vector. Counts bytes so padding can be
// computed from the absolute position.
class Writer::Sink {
 public:
  explicit Sink(std::vector<uint8_t>* memory) : memory_(memory) {}
  Sink(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}

  uint64_t size() const { return written_; }

  Status append(const void* data, size_t n_bytes) {
    written_ += n_bytes;
    if (memory_ != nullptr) {
      const auto* p = static_cast<const uint8_t*>(data);
      memory_->insert(memory_->end(), p, p + n_bytes);
      return Status::ok();
    }
    const auto* p = static_cast<const char*>(data);
    while (n_bytes > 0) {
      const ssize_t n = ::write(fd_, p, n_bytes);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return error("cannot write '" + path_ + "': " + std::strerror(n < 0 ? errno : EIO));
      p += n;
      n_bytes -= static_cast<size_t>(n);
    }
    return Status::ok();
  }

  // Zero bytes up to the next multiple of `alignment` (a power of two).
  Status pad_to(uint64_t alignment) {
    static const uint8_t kZeros[256] = {};
    uint64_t n_pad = (alignment - written_ % alignment) % alignment;
    while (n_pad > 0) {
      const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n_pad, sizeof(kZeros)));
      TERN_RETURN_IF_ERROR(append(kZeros, chunk));
      n_pad -= chunk;
    }
    return Status::ok();
  }

 private:
  std::vector<uint8_t>* memory_ = nullptr;
  int fd_ = -1;
  std::string path_;
  uint64_t written_ = 0;
};

namespace {

template <typename T>
void put(std::string* out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  out->append(bytes, sizeof(T));
}

void put_string(std::string* out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out->append(s);
}

std::string printable(const std::string& s) { return summarize(Value::string(s), 0, 80); }

Status payload_error(const Value& v, const char* expected) {
  return error(std::string("a ") + value_type_name(v.type) + " value: expected " + expected + ", found " +
               (v.type == ValueType::ARRAY ? "another payload" : summarize(v, 4, 32)));
}

template <typename T>
Status put_unsigned(std::string* out, const Value& v) {
  const auto* u = std::get_if<uint64_t>(&v.data);
  if (u == nullptr) return payload_error(v, "a uint64_t payload");
  if (*u > std::numeric_limits<T>::max()) {
    return error(std::string("a ") + value_type_name(v.type) + " value: expected at most " +
                 std::to_string(std::numeric_limits<T>::max()) + ", found " + std::to_string(*u));
  }
  put<T>(out, static_cast<T>(*u));
  return Status::ok();
}

template <typename T>
Status put_signed(std::string* out, const Value& v) {
  const auto* i = std::get_if<int64_t>(&v.data);
  if (i == nullptr) return payload_error(v, "an int64_t payload");
  if (*i < std::numeric_limits<T>::min() || *i > std::numeric_limits<T>::max()) {
    return error(std::string("a ") + value_type_name(v.type) + " value: expected " +
                 std::to_string(std::numeric_limits<T>::min()) + ".." + std::to_string(std::numeric_limits<T>::max()) +
                 ", found " + std::to_string(*i));
  }
  put<T>(out, static_cast<T>(*i));
  return Status::ok();
}

// Appends the encoding of `v` (without its type id). `depth` counts the arrays enclosing `v`.
// Errors name the offending item by its index path, prepended as they bubble up.
Status put_value(std::string* out, const Value& v, int depth) {
  switch (v.type) {
    case ValueType::U8: return put_unsigned<uint8_t>(out, v);
    case ValueType::U16: return put_unsigned<uint16_t>(out, v);
    case ValueType::U32: return put_unsigned<uint32_t>(out, v);
    case ValueType::U64: return put_unsigned<uint64_t>(out, v);
    case ValueType::I8: return put_signed<int8_t>(out, v);
    case ValueType::I16: return put_signed<int16_t>(out, v);
    case ValueType::I32: return put_signed<int32_t>(out, v);
    case ValueType::I64: return put_signed<int64_t>(out, v);
    case ValueType::F32: {
      const auto* d = std::get_if<double>(&v.data);
      if (d == nullptr) return payload_error(v, "a double payload");
      // Narrowing a finite double beyond float range is undefined behaviour, so refuse it.
      if (std::isfinite(*d) && std::fabs(*d) > std::numeric_limits<float>::max()) {
        return error("a f32 value: expected a magnitude within float range, found " + summarize(v, 4, 32));
      }
      put<float>(out, static_cast<float>(*d));
      return Status::ok();
    }
    case ValueType::F64: {
      const auto* d = std::get_if<double>(&v.data);
      if (d == nullptr) return payload_error(v, "a double payload");
      put<double>(out, *d);
      return Status::ok();
    }
    case ValueType::BOOL: {
      const auto* b = std::get_if<bool>(&v.data);
      if (b == nullptr) return payload_error(v, "a bool payload");
      put<uint8_t>(out, *b ? 1 : 0);
      return Status::ok();
    }
    case ValueType::STRING: {
      const auto* s = std::get_if<std::string>(&v.data);
      if (s == nullptr) return payload_error(v, "a std::string payload");
      put_string(out, *s);
      return Status::ok();
    }
    case ValueType::ARRAY: {
      const auto* p = std::get_if<std::shared_ptr<Array>>(&v.data);
      if (p == nullptr || *p == nullptr) return error("an array value: expected an Array payload, found none");
      const Array& arr = **p;
      if (depth + 1 > kMaxArrayDepth) {
        return error("an array: expected at most " + std::to_string(kMaxArrayDepth) +
                     " levels of nested arrays, found more");
      }
      if (static_cast<uint32_t>(arr.elem_type) > static_cast<uint32_t>(ValueType::F64)) {
        return error("an array: expected an item type id 0..12, found " +
                     std::to_string(static_cast<uint32_t>(arr.elem_type)));
      }
      put<uint32_t>(out, static_cast<uint32_t>(arr.elem_type));
      put<uint64_t>(out, arr.items.size());
      for (size_t i = 0; i < arr.items.size(); ++i) {
        const Value& item = arr.items[i];
        Status st = item.type == arr.elem_type
                        ? put_value(out, item, depth + 1)
                        : error(std::string("expected an item of the array's type ") + value_type_name(arr.elem_type) +
                                ", found " + value_type_name(item.type));
        if (!st.is_ok()) return error("[" + std::to_string(i) + "]: " + st.message());
      }
      return Status::ok();
    }
  }
  return error("a value: expected a value type id 0..12, found " + std::to_string(static_cast<uint32_t>(v.type)));
}

}  // namespace

void Writer::set(const std::string& key, Value value) {
  for (auto& kv : metadata_) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(key, std::move(value));
}

void Writer::add_tensor(const std::string& name, DType type, std::vector<int64_t> shape, const void* data) {
  tensors_.push_back(PendingTensor{name, type, std::move(shape), data, nullptr});
}

void Writer::add_tensor_generated(const std::string& name, DType type, std::vector<int64_t> shape,
                                  std::function<void(uint8_t* dst)> fill) {
  tensors_.push_back(PendingTensor{name, type, std::move(shape), nullptr, std::move(fill)});
}

Status Writer::write_to(Sink& sink) const {
  const std::string where = "gguf writer: ";

  uint64_t alignment = kDefaultAlignment;
  for (const auto& [key, value] : metadata_) {
    if (key != "general.alignment") continue;
    const std::optional<uint64_t> a = value.as_uint();
    if (!a || !std::has_single_bit(*a) || *a > kMaxAlignment) {
      return error(where + "metadata key 'general.alignment': expected a power of two in 1..2^30, found " +
                   value_type_name(value.type) + " " + summarize(value, 4, 32));
    }
    alignment = *a;
  }

  std::string header;
  header.append("GGUF", 4);
  put<uint32_t>(&header, 3);
  put<uint64_t>(&header, tensors_.size());
  put<uint64_t>(&header, metadata_.size());
  for (const auto& [key, value] : metadata_) {
    if (key.empty() || key.size() > kMaxKeyBytes) {
      return error(where + "metadata key " + printable(key) + ": expected a key of 1.." +
                   std::to_string(kMaxKeyBytes) + " bytes, found " + std::to_string(key.size()));
    }
    put_string(&header, key);
    put<uint32_t>(&header, static_cast<uint32_t>(value.type));
    Status st = put_value(&header, value, 0);
    if (!st.is_ok()) return error(where + "metadata key " + printable(key) + ": " + st.message());
  }

  // Tensor infos; offsets pack the tensors in order, each starting on an aligned offset.
  std::vector<uint64_t> n_bytes(tensors_.size());
  std::unordered_set<std::string> names;
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const PendingTensor& t = tensors_[i];
    const std::string what = where + "tensor " + printable(t.name) + " (#" + std::to_string(i) + "): ";
    if (t.name.empty() || t.name.size() > kMaxTensorNameBytes) {
      return error(what + "expected a name of 1.." + std::to_string(kMaxTensorNameBytes) + " bytes, found " +
                   std::to_string(t.name.size()));
    }
    if (!names.insert(t.name).second) return error(what + "expected a unique name, found a repeat");
    const std::optional<DTypeInfo> info = dtype_info(t.type);
    if (!info) return error(what + "expected a known type, found id " + std::to_string(static_cast<uint32_t>(t.type)));
    if (t.shape.empty() || t.shape.size() > kMaxDims) {
      return error(what + "expected 1.." + std::to_string(kMaxDims) + " dims, found " + std::to_string(t.shape.size()));
    }
    int64_t numel = 1;
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (t.shape[d] < 1 || __builtin_mul_overflow(numel, t.shape[d], &numel)) {
        return error(what + "shape[" + std::to_string(d) + "]: expected a positive size whose product with the " +
                     "others fits in 63 bits, found " + std::to_string(t.shape[d]));
      }
    }
    if (t.shape[0] % info->block_elems != 0) {
      return error(what + "shape[0]: expected a multiple of the " + std::string(info->name) + " block size " +
                   std::to_string(info->block_elems) + ", found " + std::to_string(t.shape[0]));
    }
    if (t.data == nullptr && !t.fill) return error(what + "expected data or a fill callback, found neither");
    const uint64_t rows = static_cast<uint64_t>(numel / t.shape[0]);
    const uint64_t blocks_per_row = static_cast<uint64_t>(t.shape[0] / info->block_elems);
    uint64_t padded = 0;
    if (__builtin_mul_overflow(blocks_per_row, info->block_bytes, &n_bytes[i]) ||
        __builtin_mul_overflow(n_bytes[i], rows, &n_bytes[i]) ||
        __builtin_add_overflow(n_bytes[i], alignment - 1, &padded) ||
        __builtin_add_overflow(offset, padded & ~(alignment - 1), &padded)) {
      return error(what + "expected a data size that fits in 64 bits, found an overflow");
    }
    put_string(&header, t.name);
    put<uint32_t>(&header, static_cast<uint32_t>(t.shape.size()));
    for (int64_t dim : t.shape) put<uint64_t>(&header, static_cast<uint64_t>(dim));
    put<uint32_t>(&header, static_cast<uint32_t>(t.type));
    put<uint64_t>(&header, offset);
    offset = padded;
  }

  TERN_RETURN_IF_ERROR(sink.append(header.data(), header.size()));
  TERN_RETURN_IF_ERROR(sink.pad_to(alignment));
  // Generated tensors are filled one at a time into a buffer that is reused, so peak memory is
  // the largest tensor, not the model.
  std::vector<uint8_t> scratch;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const PendingTensor& t = tensors_[i];
    const void* bytes = t.data;
    if (bytes == nullptr) {
      if (scratch.size() < n_bytes[i]) scratch.resize(static_cast<size_t>(n_bytes[i]));
      t.fill(scratch.data());
      bytes = scratch.data();
    }
    TERN_RETURN_IF_ERROR(sink.append(bytes, static_cast<size_t>(n_bytes[i])));
    // The last tensor is padded too: readers that load the data section as one block expect
    // every tensor's padded size.
    TERN_RETURN_IF_ERROR(sink.pad_to(alignment));
  }
  return Status::ok();
}

Result<std::vector<uint8_t>> Writer::to_bytes() const {
  std::vector<uint8_t> bytes;
  Sink sink(&bytes);
  TERN_RETURN_IF_ERROR(write_to(sink));
  return bytes;
}

namespace {

std::string parent_dir(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

Status Writer::write(const std::string& path) const {
  std::string tmp_path = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp_path.data());
  if (fd < 0) return error("cannot create a temp file next to '" + path + "': " + std::strerror(errno));
  // mkstemp creates 0600; a model file should be as readable as any other file.
  ::fchmod(fd, 0644);

  Sink sink(fd, tmp_path);
  Status st = write_to(sink);
  if (st.is_ok() && ::fsync(fd) != 0) st = error("cannot fsync '" + tmp_path + "': " + std::strerror(errno));
  if (::close(fd) != 0 && st.is_ok()) st = error("cannot close '" + tmp_path + "': " + std::strerror(errno));
  if (st.is_ok() && ::rename(tmp_path.c_str(), path.c_str()) != 0) {
    st = error("cannot rename '" + tmp_path + "' to '" + path + "': " + std::strerror(errno));
  }
  if (!st.is_ok()) {
    ::unlink(tmp_path.c_str());
    return st;
  }
  // The rename is durable only once the directory entry is on disk.
  const int dir_fd = ::open(parent_dir(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return Status::ok();
}

}  // namespace tern::gguf
