// Sampling from a row's best candidates (core/top_candidates.h) instead of the whole row, with the
// same token as the whole-row path (both draw with the position's uniform) whenever that is
// provable; otherwise the caller fetches the row (Sampler::sample). docs/ARCHITECTURE.md
// "Sampling from candidates" states the rules; in short, with the candidates the top C entries of
// the row by (logit, -id), T > 0:
//
// - Scaling s = l / T is monotone (correctly rounded division), so every token outside the
//   candidates has s <= s_last, the last candidate's scaled logit (ties are possible: two
//   logits may round to one scaled value, which is why every proof below asks for a strict gap).
//   The whole-row path sorts by (s descending, id ascending); any candidate with s > s_last comes
//   before every other token there, in the order the candidates' own sort gives it.
// - top-k (k < C): exact when the k-th sorted candidate has s > s_last. The kept set is then the
//   whole-row path's, logits bit for bit, and top-p, min-p and the draw see what it would.
// - min-p: the threshold is max + ln(p) on both paths (the max is candidate 0); exact when
//   s_last < threshold.
// - top-p, and the draw when no stage truncated: the probabilities need the softmax normalizer
//   over the whole row. The backend returns it (CandidateRows::exp_sums) up to a relative error
//   far below kSumSlack (the exp implementations differ by a few ulp per term; double sums). The
//   host bounds the normalizer S in [D (1 - slack), D (1 + slack)], bounds every probability and
//   prefix sum from both sides (float and double rounding are monotone), and accepts the cut /
//   the drawn index only when the interval decides it and the entries up to it have s > s_last.
// - Penalties, greedy and rows holding a NaN never take this path (need() asks for the logits;
//   a NaN row is flagged and falls back).
#include <algorithm>
#include <cmath>

#include "core/top_candidates.h"
#include "sampling/sampler.h"
#include "sampling/stages.h"

namespace tern {
namespace {

// Extra candidates beyond top_k: a margin for ties that dividing by T may create at the k-th.
constexpr int kTopKMargin = 16;
// Candidates for top-p / min-p / plain temperature: the draw falls back when it lands past them.
constexpr int kDefaultCandidates = 256;
// Relative bound on |backend normalizer - host normalizer| / host normalizer. The backends' terms
// are the host's up to the exp implementations (CUDA expf: 2 ulp; host: < 1 ulp, so 3 * 2^-23 =
// 3.6e-7 per term and in the sum), plus double rounding (n * 2^-53); 1e-5 leaves a margin of 25.
constexpr double kSumSlack = 1e-5;
// |total - 1| for the sum of a whole row's float probabilities: 2^-24 per probability (float
// rounding of e / S) + 3 n 2^-53 (double sums, n < 2^24); 2^-22 is over twice that.
constexpr double kTotalSlack = 1.0 / (1 << 22);

int round_up_pow2(int v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}

// Bounds on the probabilities softmax_in_place gives the sorted candidates c (logits scaled)
// when the whole row's normalizer lies in [s_lo, s_hi]: float(e / S) with e = float exp(s - max),
// as sampler.cpp computes them.
void probability_bounds(const Candidates& c, double s_lo, double s_hi, std::vector<float>& lo,
                        std::vector<float>& hi) {
  const float mx = c.logits[0];
  lo.resize(c.size());
  hi.resize(c.size());
  for (size_t i = 0; i < c.size(); ++i) {
    const float e = std::exp(c.logits[i] - mx);
    lo[i] = static_cast<float>(e / s_hi);
    hi[i] = static_cast<float>(e / s_lo);
  }
}

// The normalizer's bounds, or false when the row's sum cannot be used at temperature t.
bool normalizer_bounds(const CandidateRow& row, float t, const Candidates& c, double* s_lo, double* s_hi) {
  if (row.sum_temperature != t || !(row.exp_sum >= 1.0) || !std::isfinite(row.exp_sum)) return false;
  if (!std::isfinite(c.logits[0])) return false;  // exp(inf - inf): the host's probabilities are NaN
  *s_lo = row.exp_sum * (1.0 - kSumSlack);
  *s_hi = row.exp_sum * (1.0 + kSumSlack);
  return true;
}

void keep_prefix(Candidates& c, size_t keep) {
  c.ids.resize(keep);
  c.logits.resize(keep);
}

}  // namespace

int Sampler::candidates_wanted() const {
  if (params_.top_k > 0) return std::max(64, round_up_pow2(params_.top_k + kTopKMargin));
  return kDefaultCandidates;
}

float Sampler::exp_sum_temperature() const {
  // With top_k the cut is decided by comparisons alone; afterwards the set is exact.
  return greedy() || params_.top_k > 0 ? 0.0f : params_.temperature;
}

bool Sampler::build_from_candidates(const CandidateRow& row, Candidates& c, bool* open) const {
  const size_t n_cand = row.ids.size();
  if (greedy() || penalised() || n_cand == 0 || (row.flags & kRowHasNan) != 0) return false;
  const float t = params_.temperature;
  c.ids.assign(row.ids.begin(), row.ids.end());
  c.logits.assign(row.logits.begin(), row.logits.end());
  for (float& l : c.logits) l /= t;  // exactly build()'s scaling
  c.sorted = false;
  *open = false;
  if (static_cast<int64_t>(n_cand) >= row.n_vocab) {
    // The whole row (a permutation of it): every stage sorts by a total order first.
    for (const auto& stage : stages_) stage->apply(c);
    return true;
  }
  // The candidates are in raw order, so the last one has the smallest scaled logit.
  const float s_last = c.logits.back();
  bool exact = false;

  const int k = params_.top_k;
  if (k > 0 && k < row.n_vocab) {  // k >= n_vocab: a no-op on the whole row, and here too
    if (static_cast<size_t>(k) >= n_cand) return false;
    c.sort_descending();
    if (!(c.logits[k - 1] > s_last)) return false;
    keep_prefix(c, k);
    exact = true;
  }

  const float p = params_.top_p;
  if (p < 1.0f) {
    if (exact) {
      stages::top_p(c, p);
    } else {
      c.sort_descending();
      double s_lo = 0, s_hi = 0;
      if (!normalizer_bounds(row, t, c, &s_lo, &s_hi)) return false;
      std::vector<float> lo, hi;
      probability_bounds(c, s_lo, s_hi, lo, hi);
      // stages::top_p keeps i + 1 entries for the first i whose prefix mass reaches p.
      double cum_lo = 0.0, cum_hi = 0.0, prev_hi = 0.0;
      size_t i = 0;
      for (; i < c.size(); ++i) {
        prev_hi = cum_hi;
        cum_lo += lo[i];
        cum_hi += hi[i];
        if (cum_lo >= p) break;
      }
      if (i == c.size() || (i > 0 && !(prev_hi < p)) || !(c.logits[i] > s_last)) return false;
      keep_prefix(c, i + 1);
      exact = true;
    }
  }

  const float mp = params_.min_p;
  if (mp > 0.0f) {
    if (exact) {
      stages::min_p(c, mp);
    } else {
      c.sort_descending();
      const float threshold = c.logits[0] + std::log(mp);  // exactly stages::min_p's
      if (!(s_last < threshold)) return false;
      stages::min_p(c, mp);  // stops before s_last: the whole row's kept set
      exact = true;
    }
  }
  if (!exact) c.sort_descending();
  *open = !exact;
  return true;
}

bool Sampler::draw_from_candidates(const CandidateRow& row, const Candidates& c, double u01, int32_t* token) const {
  // draw_at(whole distribution): total = sum of every probability, u = u01 * total, the first i
  // with u < prefix_i. total is 1 within kTotalSlack; the prefixes are bounded from both sides.
  const float s_last = c.logits.back();
  double s_lo = 0, s_hi = 0;
  if (!normalizer_bounds(row, params_.temperature, c, &s_lo, &s_hi)) return false;
  std::vector<float> lo, hi;
  probability_bounds(c, s_lo, s_hi, lo, hi);
  const double u_lo = u01 * (1.0 - kTotalSlack), u_hi = u01 * (1.0 + kTotalSlack);
  double cum_lo = 0.0, cum_hi = 0.0, prev_hi = 0.0;
  for (size_t i = 0; i < c.size(); ++i) {
    prev_hi = cum_hi;
    cum_lo += lo[i];
    cum_hi += hi[i];
    if (u_hi < cum_lo) {
      if ((i > 0 && !(prev_hi <= u_lo)) || !(c.logits[i] > s_last)) return false;
      *token = c.ids[i];
      return true;
    }
  }
  return false;  // the draw lands past the candidates (or too close to a boundary)
}

}  // namespace tern
