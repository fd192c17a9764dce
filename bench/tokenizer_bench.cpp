// Single-threaded tokenizer throughput: encodes a file repeatedly for about N seconds and prints
// MB/s and tokens/s; bench/tokenizer_bench_hf.py times HF `tokenizers` on the same file and
// checks both produce the same ids (--ids-out writes tern's, one id per line).
//
//   tokenizer_bench MODEL.gguf FILE [SECONDS] [--ids-out PATH] [--no-cache-warmup]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL.gguf FILE [SECONDS] [--ids-out PATH]\n", argv[0]);
    return 2;
  }
  double seconds_target = 3.0;
  std::string ids_out;
  for (int i = 3; i < argc; ++i) {
    if (std::strcmp(argv[i], "--ids-out") == 0 && i + 1 < argc) {
      ids_out = argv[++i];
    } else {
      seconds_target = std::atof(argv[i]);
    }
  }
  auto file = tern::gguf::File::open(argv[1]);
  if (!file) {
    std::fprintf(stderr, "error: %s\n", file.status().message().c_str());
    return 1;
  }
  auto tok = tern::Tokenizer::from_gguf(*file);
  if (!tok) {
    std::fprintf(stderr, "error: %s\n", tok.status().message().c_str());
    return 1;
  }
  std::ifstream in(argv[2], std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();

  using Clock = std::chrono::steady_clock;
  // The first pass runs with a cold word cache; report it separately from the steady state.
  auto t0 = Clock::now();
  std::vector<int32_t> ids = (*tok)->encode(text, false, true);
  const double first_s = std::chrono::duration<double>(Clock::now() - t0).count();
  int n_runs = 0;
  double seconds = 0;
  t0 = Clock::now();
  while (seconds < seconds_target) {
    ids = (*tok)->encode(text, false, true);
    ++n_runs;
    seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  const double mb = static_cast<double>(text.size()) / 1e6;
  std::printf("tern: bytes=%zu tokens=%zu first_pass_MB/s=%.2f steady_MB/s=%.2f (runs=%d) tokens/s=%.0f\n",
              text.size(), ids.size(), mb / first_s, mb * n_runs / seconds, n_runs,
              static_cast<double>(ids.size()) * n_runs / seconds);
  if (!ids_out.empty()) {
    std::ofstream out(ids_out);
    for (int32_t id : ids) out << id << '\n';
  }
  return 0;
}
