// Tests for the fast row-wise ops (backends/cpu/elementwise.h) at every ISA level: they match the
// reference ops within float tolerances on odd row lengths, in place and out of place; the rope
// table reproduces the reference rotation bitwise and is rebuilt when the frequencies change.
#include "backends/cpu/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/ops_ref.h"

namespace tern::cpu {
namespace {

std::vector<float> random_floats(size_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

Tensor view(std::vector<float>& v, int64_t rows, int64_t cols) { return Tensor::view(v.data(), DType::F32, rows, cols); }

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float rel, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], rel * (1.0f + std::fabs(want[i]))) << what << " element " << i;
}

constexpr int64_t kRows = 3;
constexpr int64_t kColsCases[] = {1, 15, 37, 576, 1536, 4099};

TEST(Elementwise, RmsNormMatchesReference) {
  for (Isa isa : supported_isas()) {
    for (int64_t cols : kColsCases) {
      auto x = random_floats(kRows * cols, 3.0f, 1), w = random_floats(cols, 1.0f, 2);
      std::vector<float> want(x.size()), got(x.size());
      Tensor xt = view(x, kRows, cols), wt = view(w, 1, cols), wantt = view(want, kRows, cols), gott = view(got, kRows, cols);
      ref::rms_norm(xt, wt, 1e-5f, wantt);
      rms_norm_fast(isa, xt, wt, 1e-5f, gott);
      expect_close(got, want, 2e-6f, "rms_norm");
      rms_norm_fast(isa, xt, wt, 1e-5f, xt);  // in place
      expect_close(x, want, 2e-6f, "rms_norm in place");
    }
  }
}

TEST(Elementwise, SwigluMatchesReference) {
  for (Isa isa : supported_isas()) {
    for (int64_t cols : kColsCases) {
      // Gates up to +-100: silu saturates to 0 and to the identity at the ends.
      auto g = random_floats(kRows * cols, 30.0f, 3), u = random_floats(kRows * cols, 2.0f, 4);
      std::vector<float> want(g.size()), got(g.size());
      Tensor gt = view(g, kRows, cols), ut = view(u, kRows, cols);
      Tensor wantt = view(want, kRows, cols), gott = view(got, kRows, cols);
      ref::swiglu(gt, ut, wantt);
      swiglu_fast(isa, gt, ut, gott);
      expect_close(got, want, 1e-6f, "swiglu");
      swiglu_fast(isa, gt, ut, gt);  // in place over gate
      expect_close(g, want, 1e-6f, "swiglu in place");
    }
  }
}

TEST(Elementwise, AddIsExact) {
  for (Isa isa : supported_isas()) {
    for (int64_t cols : kColsCases) {
      auto a = random_floats(kRows * cols, 1.0f, 5), b = random_floats(kRows * cols, 1.0f, 6);
      std::vector<float> want(a.size());
      Tensor at = view(a, kRows, cols), bt = view(b, kRows, cols), wantt = view(want, kRows, cols);
      ref::add(at, bt, wantt);
      add_fast(isa, at, bt, at);
      ASSERT_EQ(0, std::memcmp(a.data(), want.data(), a.size() * sizeof(float)));
    }
  }
}

TEST(Elementwise, RopeTableMatchesReferenceBitwise) {
  const int n_heads = 3, head_dim = 64;
  for (bool neox : {false, true}) {
    for (int n_rot : {64, 32}) {
      std::vector<float> inv_freq(n_rot / 2), other_freq(n_rot / 2);
      for (int i = 0; i < n_rot / 2; ++i) {
        inv_freq[i] = std::pow(10000.0f, -2.0f * i / n_rot);
        other_freq[i] = std::pow(500000.0f, -2.0f * i / n_rot);
      }
      RopeParams rope;
      rope.n_rot = n_rot;
      rope.neox = neox;
      rope.mscale = 1.25f;
      rope.inv_freq = view(inv_freq, 1, n_rot / 2);
      BatchPlan plan;
      plan.positions = {0, 5, 17, 300, 8191};
      const int64_t n = static_cast<int64_t>(plan.positions.size());
      RopeTableCache cache;
      for (int call = 0; call < 2; ++call) {  // the second call reuses the table
        auto x = random_floats(n * n_heads * head_dim, 1.0f, 7 + call);
        auto want = x;
        Tensor xt = view(x, n, n_heads * head_dim), wantt = view(want, n, n_heads * head_dim);
        ref::rope(wantt, n_heads, head_dim, rope, plan);
        cache.prepare(rope, plan.positions);
        rope_with_table(xt, n_heads, head_dim, rope, cache);
        ASSERT_EQ(0, std::memcmp(x.data(), want.data(), x.size() * sizeof(float))) << "call " << call;
      }
      // Other frequencies in the same step: the table must follow them.
      RopeParams other = rope;
      other.inv_freq = view(other_freq, 1, n_rot / 2);
      auto x = random_floats(n * n_heads * head_dim, 1.0f, 9);
      auto want = x;
      Tensor xt = view(x, n, n_heads * head_dim), wantt = view(want, n, n_heads * head_dim);
      ref::rope(wantt, n_heads, head_dim, other, plan);
      cache.prepare(other, plan.positions);
      rope_with_table(xt, n_heads, head_dim, other, cache);
      ASSERT_EQ(0, std::memcmp(x.data(), want.data(), x.size() * sizeof(float)));
    }
  }
}

}  // namespace
}  // namespace tern::cpu
