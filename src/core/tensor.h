// Tensor views: a pointer, a type and a 2-D row-major shape [rows, cols]. Views never own memory;
// Buffer owns device or host allocations. Higher-rank data (heads) is a 2-D view plus an explicit
// head size at the op that needs it, which keeps every op signature obvious.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/check.h"
#include "core/dtype.h"

namespace tern {

enum class Device : uint8_t { kCpu, kCuda };

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0;          // outer dimension
  int64_t cols = 0;          // inner dimension (elements per row)
  size_t row_stride = 0;     // bytes between consecutive rows (>= row_bytes(dtype, cols))
  Device device = Device::kCpu;

  static Tensor view(void* data, DType dtype, int64_t rows, int64_t cols, Device device = Device::kCpu) {
    Tensor t;
    t.data = data;
    t.dtype = dtype;
    t.rows = rows;
    t.cols = cols;
    t.row_stride = row_bytes(dtype, cols);
    t.device = device;
    return t;
  }

  int64_t numel() const { return rows * cols; }
  size_t bytes() const { return row_stride * static_cast<size_t>(rows); }
  bool contiguous() const { return row_stride == row_bytes(dtype, cols); }

  template <typename T = void>
  T* row(int64_t r) const {
    return reinterpret_cast<T*>(static_cast<uint8_t*>(data) + static_cast<size_t>(r) * row_stride);
  }
  float* f32() const {
    TERN_CHECK(dtype == DType::F32);
    return static_cast<float*>(data);
  }
  // Rows [begin, begin + n) as a view.
  Tensor slice_rows(int64_t begin, int64_t n) const {
    TERN_CHECK(begin >= 0 && n >= 0 && begin + n <= rows);
    Tensor t = *this;
    t.data = row(begin);
    t.rows = n;
    return t;
  }
  // Reinterprets a contiguous tensor as [rows * cols / new_cols, new_cols].
  Tensor reshape_cols(int64_t new_cols) const {
    TERN_CHECK(contiguous() && new_cols > 0 && numel() % new_cols == 0);
    return view(data, dtype, numel() / new_cols, new_cols, device);
  }
};

}  // namespace tern
