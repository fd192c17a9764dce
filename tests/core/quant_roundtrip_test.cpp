// Round-trip properties of the reference quantizers, for every type (most have no Python encoder
// to compare bytes against, see quant_ref_test.cpp):
//  - max |x - dequantize(quantize(x))| per block stays under an analytic bound (below),
//  - RMSE on gaussian data stays at the level the scale search reaches (a regression guard),
//  - re-quantizing decoded values is (near) idempotent, and repeated round trips do not drift,
//  - edge rows: zeros, constants, negative-only, huge and tiny magnitudes, single spikes.
// Data comes from a local splitmix64 generator so results are identical on every platform.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/fp16.h"
#include "core/quant_blocks.h"
#include "core/quant_ref.h"

namespace tern {
namespace {

// ---- deterministic data ----

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  float gaussian() {  // Box-Muller
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }

 private:
  uint64_t state_;
};

enum class Dist { kGaussian, kLlmWeights, kUniformShifted, kFarFromZero, kNegativeOnly, kOutliers, kHuge, kTiny };
constexpr Dist kAllDists[] = {Dist::kGaussian,     Dist::kLlmWeights, Dist::kUniformShifted, Dist::kFarFromZero,
                              Dist::kNegativeOnly, Dist::kOutliers,   Dist::kHuge,           Dist::kTiny};

std::vector<float> make_row(Dist dist, int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) {
    switch (dist) {
      case Dist::kGaussian: v = rng.gaussian(); break;
      case Dist::kLlmWeights: v = 0.02f * rng.gaussian(); break;
      case Dist::kUniformShifted: v = static_cast<float>(2.0 * rng.uniform() - 0.5); break;
      case Dist::kFarFromZero: v = static_cast<float>(10.0 + 0.5 * rng.uniform()); break;
      case Dist::kNegativeOnly: v = -std::fabs(rng.gaussian()); break;
      case Dist::kOutliers: v = rng.uniform() < 0.05 ? 50.0f * rng.gaussian() : 0.01f * rng.gaussian(); break;
      case Dist::kHuge: v = 1e4f * rng.gaussian(); break;  // block scales still fit fp16
      case Dist::kTiny: v = 1e-4f * rng.gaussian(); break;  // block scales are fp16 subnormals
    }
  }
  return x;
}

// ---- the error bound ----
//
// max |x - y| over a block <= k * base + amax / 512 + subnormal_levels * 2^-24, where base is
//  - amax (largest |x|) for the symmetric types,
//  - max - min for q4_1 / q5_1,
//  - max(max, 0) - min(min, 0) for the k-quants with mins (their offsets are >= 0),
// and k is one quantization step for schemes that clip the far edge by design (q4_0/q5_0 map the
// signed extreme to -8/-16, so the other edge loses up to a full step), half a step for plain
// round-to-nearest, and for k-quants one sub-block step plus one super-scale level (the MSE search
// may clip an outlier by up to a step; rounding the sub-scale to its 4/6/8-bit level moves the
// block's far edge by up to q_max * d / 2).
// amax / 512 covers fp16 rounding of the stored scales and mins (2^-11 relative, times a few
// terms). The last term covers scales that fall into fp16's subnormal range (absolute spacing
// 2^-24): it is the largest |q| times the largest sub-scale level, times that spacing.
enum class Base { kAbsMax, kMinMax, kRangeWithZero };
struct BoundSpec {
  const char* name;
  Base base;
  double k;
  double subnormal_levels;
};

constexpr BoundSpec kBounds[] = {
    {"q4_0", Base::kAbsMax, 1.0 / 8, 8},
    {"q4_1", Base::kMinMax, 1.0 / 30, 16},
    {"q5_0", Base::kAbsMax, 1.0 / 16, 16},
    {"q5_1", Base::kMinMax, 1.0 / 62, 32},
    {"q8_0", Base::kAbsMax, 1.0 / 254, 127},
    {"q8_1", Base::kAbsMax, 1.0 / 254, 127},
    {"q2_k", Base::kRangeWithZero, 1.0 / 3 + 1.0 / 15, 4 * 15},
    {"q3_k", Base::kAbsMax, 1.0 / 4 + 1.0 / 32, 4 * 32},
    {"q4_k", Base::kRangeWithZero, 1.0 / 15 + 1.0 / 63, 16 * 63},
    {"q5_k", Base::kRangeWithZero, 1.0 / 31 + 1.0 / 63, 32 * 63},
    {"q6_k", Base::kAbsMax, 1.0 / 32 + 1.0 / 128, 32 * 128},
    {"q8_k", Base::kAbsMax, 1.0 / 254, 0},  // float32 scale
};

void PrintTo(const BoundSpec& spec, std::ostream* os) { *os << spec.name; }

double block_bound(const BoundSpec& spec, const float* x, int64_t n) {
  float lo = x[0], hi = x[0], amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    amax = std::max(amax, std::fabs(x[i]));
  }
  double base = amax;
  if (spec.base == Base::kMinMax) base = static_cast<double>(hi) - lo;
  if (spec.base == Base::kRangeWithZero) base = static_cast<double>(std::max(hi, 0.0f)) - std::min(lo, 0.0f);
  return spec.k * base + amax / 512.0 + spec.subnormal_levels * std::ldexp(1.0, -24);
}

std::vector<float> round_trip(DType t, const std::vector<float>& x, std::vector<uint8_t>* bytes = nullptr) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(row_bytes(t, n));
  std::vector<float> y(x.size());
  EXPECT_TRUE(quantize_row_ref(t, x.data(), q.data(), n));
  EXPECT_TRUE(dequantize_row_ref(t, q.data(), y.data(), n));
  if (bytes) *bytes = std::move(q);
  return y;
}

// Checks every block of x against its bound; reports the worst offender.
void expect_within_bound(const BoundSpec& spec, const std::vector<float>& x, const std::vector<float>& y,
                         const std::string& what) {
  const int64_t block = block_elems(*dtype_from_name(spec.name));
  for (size_t b = 0; b < x.size() / block; ++b) {
    const double bound = block_bound(spec, &x[b * block], block);
    for (size_t i = b * block; i < (b + 1) * block; ++i) {
      ASSERT_TRUE(std::isfinite(y[i])) << spec.name << " " << what << " element " << i;
      ASSERT_LE(std::fabs(static_cast<double>(x[i]) - y[i]), bound)
          << spec.name << " " << what << ": element " << i << " x=" << x[i] << " decoded=" << y[i];
    }
  }
}

double rmse(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += (static_cast<double>(a[i]) - b[i]) * (a[i] - b[i]);
  return std::sqrt(sum / static_cast<double>(a.size()));
}

class RoundTrip : public ::testing::TestWithParam<BoundSpec> {
 protected:
  DType type() const { return *dtype_from_name(GetParam().name); }
};

TEST_P(RoundTrip, MaxErrorWithinBound) {
  const int64_t n = 64 * kQK_K;
  for (Dist dist : kAllDists) {
    const std::vector<float> x = make_row(dist, n, 1000 + static_cast<int>(dist));
    expect_within_bound(GetParam(), x, round_trip(type(), x), "dist " + std::to_string(static_cast<int>(dist)));
  }
}

// RMSE / stddev on unit gaussians. Thresholds sit ~3% above what the current encoders reach:
// they fail if a layout or scale bug, or losing the k-quant scale search (q2_k 0.329 and q4_k
// 0.078 without it), degrades quality.
TEST_P(RoundTrip, GaussianRmse) {
  struct Limit {
    const char* name;
    double rmse;
  };
  constexpr Limit kLimits[] = {{"q4_0", 0.089}, {"q4_1", 0.081}, {"q5_0", 0.044}, {"q5_1", 0.039},
                               {"q8_0", 0.0056}, {"q8_1", 0.0056}, {"q2_k", 0.278}, {"q3_k", 0.149},
                               {"q4_k", 0.0737}, {"q5_k", 0.0370}, {"q6_k", 0.0174}, {"q8_k", 0.0072}};
  const std::vector<float> x = make_row(Dist::kGaussian, 256 * kQK_K, 7);
  const double err = rmse(x, round_trip(type(), x));
  for (const Limit& limit : kLimits) {
    if (std::string(limit.name) == GetParam().name) {
      EXPECT_LE(err, limit.rmse) << GetParam().name;
    }
  }
}

// Legacy types and q8_k are exactly idempotent: quantize(dequantize(b)) == b (q8_1 up to its s
// field, recomputed from the unrounded d). The k-quants' least-squares search may pick a slightly
// different scale for already-quantized data, so for them a second round trip may move a few
// elements (< 1%), by far less than the first round trip's error, and five more round trips do
// not drift away from x.
TEST_P(RoundTrip, RequantizationIsStable) {
  const DType t = type();
  const std::vector<float> x = make_row(Dist::kGaussian, 64 * kQK_K, 11);
  std::vector<uint8_t> bytes1, bytes2;
  const std::vector<float> y1 = round_trip(t, x, &bytes1);
  const std::vector<float> y2 = round_trip(t, y1, &bytes2);
  const bool k_quant = block_elems(t) == kQK_K && t != DType::Q8_K;
  if (!k_quant) {
    EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float))) << GetParam().name;
    if (t != DType::Q8_1) {
      EXPECT_EQ(bytes1, bytes2) << GetParam().name;
    }
    return;
  }
  int64_t n_changed = 0;
  for (size_t i = 0; i < y1.size(); ++i) n_changed += y1[i] != y2[i];
  EXPECT_LE(n_changed, static_cast<int64_t>(y1.size()) / 100) << GetParam().name;
  EXPECT_LE(rmse(y1, y2), 0.1 * rmse(x, y1)) << GetParam().name;
  std::vector<float> y = y2;
  for (int i = 0; i < 5; ++i) y = round_trip(t, y);
  EXPECT_LE(rmse(x, y), 1.02 * rmse(x, y1)) << GetParam().name;
}

TEST_P(RoundTrip, ZerosDecodeToExactZeros) {
  const std::vector<float> x(2 * kQK_K, 0.0f);
  const std::vector<float> y = round_trip(type(), x);
  for (size_t i = 0; i < y.size(); ++i) {
    ASSERT_EQ(y[i], 0.0f) << GetParam().name << " element " << i;
  }
}

// A constant row is one level of every scheme: it must come back up to fp16 rounding of the
// stored scale (2^-11 relative, times at most two products), for either sign and over many
// magnitudes. At 1e-3 the k-quants' super-scale d is an fp16 subnormal, hence the absolute term.
TEST_P(RoundTrip, ConstantRowsAreExactUpToScaleRounding) {
  for (const float c : {1.0f, -1.0f, 0.37f, -2.5f, 1e-3f, -1234.5f, 3e4f}) {
    const std::vector<float> x(kQK_K, c);
    const std::vector<float> y = round_trip(type(), x);
    const double tolerance = std::fabs(c) * 0x1.0p-10 + GetParam().subnormal_levels * std::ldexp(1.0, -24);
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_NEAR(y[i], c, tolerance) << GetParam().name << " c=" << c << " element " << i;
    }
  }
}

// One large value in a block of zeros (and of small values): the spike defines the block scale
// and the rest must stay within the bound, which for zeros means exactly zero for symmetric types.
TEST_P(RoundTrip, SingleSpikes) {
  for (const float spike : {-4.0f, 9.0f}) {
    for (const int pos : {0, 5, 31, 200, 255}) {
      std::vector<float> x = make_row(Dist::kLlmWeights, kQK_K, 3);
      x[pos] = spike;
      expect_within_bound(GetParam(), x, round_trip(type(), x), "spike at " + std::to_string(pos));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllQuantTypes, RoundTrip, ::testing::ValuesIn(kBounds),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- plain float types ----

TEST(RoundTripFloat, F32IsIdentity) {
  const std::vector<float> x = make_row(Dist::kOutliers, 1000, 5);
  EXPECT_EQ(round_trip(DType::F32, x), x);
}

// Relative error of half / bfloat16 round-to-nearest in their normal range: 2^-11 and 2^-8.
TEST(RoundTripFloat, HalfAndBfloatRelativeError) {
  const std::vector<float> x = make_row(Dist::kGaussian, 4096, 9);
  const std::vector<float> h = round_trip(DType::F16, x), b = round_trip(DType::BF16, x);
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::fabs(x[i]) < 6.2e-5f) continue;  // below f16's normal range
    EXPECT_LE(std::fabs(h[i] - x[i]), std::fabs(x[i]) * 0x1.0p-11) << "f16 element " << i;
    EXPECT_LE(std::fabs(b[i] - x[i]), std::fabs(x[i]) * 0x1.0p-8) << "bf16 element " << i;
  }
}

// ---- format invariants the dot-product kernels rely on ----

TEST(QuantFormat, Q8KQuantsAvoidMinus128AndBsumsMatch) {
  const std::vector<float> x = make_row(Dist::kOutliers, 8 * kQK_K, 13);
  std::vector<BlockQ8_K> blocks(8);
  ASSERT_TRUE(quantize_row_ref(DType::Q8_K, x.data(), blocks.data(), static_cast<int64_t>(x.size())));
  for (const BlockQ8_K& b : blocks) {
    for (int k = 0; k < kQK_K / 16; ++k) {
      int sum = 0;
      for (int e = 16 * k; e < 16 * (k + 1); ++e) {
        EXPECT_GE(b.qs[e], -127);
        sum += b.qs[e];
      }
      EXPECT_EQ(b.bsums[k], sum) << "group " << k;
    }
  }
}

TEST(QuantFormat, Q8_1SumFieldIsScaleTimesQuantSum) {
  const std::vector<float> x = make_row(Dist::kGaussian, 16 * kQK, 17);
  std::vector<BlockQ8_1> blocks(16);
  ASSERT_TRUE(quantize_row_ref(DType::Q8_1, x.data(), blocks.data(), static_cast<int64_t>(x.size())));
  for (const BlockQ8_1& b : blocks) {
    int sum = 0;
    for (int e = 0; e < kQK; ++e) sum += b.qs[e];
    const float expected = fp16_to_f32(b.d) * static_cast<float>(sum);
    EXPECT_NEAR(fp16_to_f32(b.s), expected, std::fabs(expected) * 0x1.0p-9 + 1e-6f);
  }
}

}  // namespace
}  // namespace tern
