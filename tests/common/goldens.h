// The transformers logit goldens (tests/data/goldens, written by tools/gen_logit_goldens.py): the
// index, one stored logit file, and a row's comparison against it. Shared by the CPU tests
// (tests/models/golden_logits_test.cpp) and the GPU ones (tests/gpu/default_model_test.cpp).
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace tern::testing {

// data_dir: tests/data (TERN_TEST_DATA, or $TERN_TEST_DATA where the tests run from another tree).
inline nlohmann::json load_golden_index(const std::string& data_dir) {
  std::ifstream in(data_dir + "/goldens/index.json");
  EXPECT_TRUE(in.good()) << data_dir << "/goldens/index.json missing";
  return in.good() ? nlohmann::json::parse(in) : nlohmann::json::object();
}

// One stored logit file of a case ([n_rows, n_vocab], f64 or f32), as doubles.
inline std::vector<double> read_golden_logits(const std::string& data_dir, const nlohmann::json& file) {
  const std::string path = data_dir + "/" + file["path"].get<std::string>();
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  const size_t n = file["n_rows"].get<size_t>() * file["n_vocab"].get<size_t>();
  const bool f64 = file["dtype"] == "f64";
  std::vector<double> out(n);
  if (f64) {
    in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(n * 8));
  } else {
    std::vector<float> f(n);
    in.read(reinterpret_cast<char*>(f.data()), static_cast<std::streamsize>(n * 4));
    for (size_t i = 0; i < n; ++i) out[i] = f[i];
  }
  EXPECT_EQ(static_cast<size_t>(in.gcount()), n * (f64 ? 8 : 4)) << path;
  return out;
}

struct GoldenDiff {
  double max_abs = 0;
  bool argmax_agrees = true;  // or the truth's top-2 gap is below the tolerance (a near-tie)
};

// One row of our logits against the truth's.
inline GoldenDiff compare_golden_row(const float* ours, const double* truth, int n_vocab, double tolerance) {
  GoldenDiff d;
  int a = 0, b = 0;
  double best = -1e300, second = -1e300;
  for (int v = 0; v < n_vocab; ++v) {
    d.max_abs = std::max(d.max_abs, std::abs(static_cast<double>(ours[v]) - truth[v]));
    if (ours[v] > ours[a]) a = v;
    if (truth[v] > truth[b]) b = v;
  }
  for (int v = 0; v < n_vocab; ++v) {
    if (truth[v] > best) {
      second = best;
      best = truth[v];
    } else if (truth[v] > second) {
      second = truth[v];
    }
  }
  d.argmax_agrees = a == b || best - second < tolerance;
  return d;
}

// A case's last-row logits (ours) against its stored rows (full vectors where stored) and its
// top-k values: records a failure, with the case id, for a difference beyond the tolerance or an
// argmax off a near-tie; returns the worst difference.
inline double check_case_logits(const std::string& data_dir, const nlohmann::json& c, const std::vector<float>& ours,
                                int n_vocab, double tolerance) {
  double worst = 0;
  for (const nlohmann::json& f : c["logits"]) {
    const std::vector<double> truth = read_golden_logits(data_dir, f);
    const GoldenDiff d = compare_golden_row(ours.data(), truth.data(), n_vocab, tolerance);
    worst = std::max(worst, d.max_abs);
    EXPECT_LE(d.max_abs, tolerance) << c["id"];
    EXPECT_TRUE(d.argmax_agrees) << c["id"];
  }
  const std::vector<int32_t> top_ids = c["top_k"]["ids"];
  const std::vector<double> top_values = c["top_k"]["values"];
  for (size_t i = 0; i < top_ids.size(); ++i) {
    const double diff = std::abs(ours[top_ids[i]] - top_values[i]);
    worst = std::max(worst, diff);
    EXPECT_LE(diff, tolerance) << c["id"] << " top-k id " << top_ids[i];
  }
  return worst;
}

}  // namespace tern::testing
