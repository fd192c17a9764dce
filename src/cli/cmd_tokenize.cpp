// `tern tokenize [-m MODEL] TEXT`: the token ids of TEXT, one line of space-separated integers.
// Special-token text (<|im_end|>) is recognised unless --no-parse-special; BOS/EOS are added only
// with --special. Works on vocab-only GGUF files. --file reads the text from a file ("-" = stdin),
// --pieces prints "id<TAB>piece" per token instead, --decode turns ids back into text, and
// --bench measures single-threaded encode throughput on the text.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

namespace tern::cli {
namespace {

struct TokenizeOptions {
  std::string model_path;
  std::string text;
  std::string file;          // read the text from here instead ("-" = stdin)
  bool special = false;      // add BOS/EOS as the model does
  bool no_parse_special = false;
  bool pieces = false;       // one "id\tpiece" line per token
  bool decode = false;       // TEXT is ids; print the text they decode to
  double bench_seconds = 0;  // > 0: encode repeatedly for about this long and report MB/s
};

bool read_input(const TokenizeOptions& opts, std::string* text) {
  if (opts.file.empty()) {
    *text = opts.text;
    return true;
  }
  std::stringstream ss;
  if (opts.file == "-") {
    ss << std::cin.rdbuf();
  } else {
    std::ifstream in(opts.file, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "error: cannot open %s\n", opts.file.c_str());
      return false;
    }
    ss << in.rdbuf();
  }
  *text = ss.str();
  return true;
}

int run_bench(const tok::Tokenizer& tokenizer, const std::string& text, const TokenizeOptions& opts) {
  using Clock = std::chrono::steady_clock;
  const bool parse_special = !opts.no_parse_special;
  size_t n_tokens = tokenizer.encode(text, opts.special, parse_special).size();  // warm-up (fills caches)
  int n_runs = 0;
  double seconds = 0;
  const auto start = Clock::now();
  while (seconds < opts.bench_seconds || n_runs < 1) {
    n_tokens = tokenizer.encode(text, opts.special, parse_special).size();
    ++n_runs;
    seconds = std::chrono::duration<double>(Clock::now() - start).count();
  }
  const double mb = static_cast<double>(text.size()) * n_runs / 1e6;
  std::printf("bytes=%zu tokens=%zu runs=%d seconds=%.3f MB/s=%.2f tokens/s=%.0f\n", text.size(), n_tokens, n_runs,
              seconds, mb / seconds, static_cast<double>(n_tokens) * n_runs / seconds);
  return 0;
}

int run_tokenize(const TokenizeOptions& opts) {
  auto file = gguf::File::open(opts.model_path);
  if (!file) {
    std::fprintf(stderr, "error: %s\n", file.status().message().c_str());
    return 1;
  }
  auto tokenizer = tok::Tokenizer::from_gguf(*file);
  if (!tokenizer) {
    std::fprintf(stderr, "error: %s: %s\n", opts.model_path.c_str(), tokenizer.status().message().c_str());
    return 1;
  }
  for (const std::string& w : (*tokenizer)->warnings()) std::fprintf(stderr, "warning: %s\n", w.c_str());
  std::string text;
  if (!read_input(opts, &text)) return 1;
  const tok::Tokenizer& tk = **tokenizer;

  if (opts.decode) {
    std::vector<int32_t> ids;
    std::istringstream in(text);
    for (long long id; in >> id;) {
      if (id < 0 || id >= tk.n_vocab()) {
        std::fprintf(stderr, "error: token id %lld is outside [0, %d)\n", id, tk.n_vocab());
        return 1;
      }
      ids.push_back(static_cast<int32_t>(id));
    }
    const std::string out = tk.decode(ids, /*skip_special=*/false);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  }
  if (opts.bench_seconds > 0) return run_bench(tk, text, opts);

  const std::vector<int32_t> ids = tk.encode(text, opts.special, !opts.no_parse_special);
  if (opts.pieces) {
    for (int32_t id : ids) {
      const std::string_view piece = tk.piece(id);
      std::printf("%d\t%.*s\n", id, static_cast<int>(piece.size()), piece.data());
    }
    return 0;
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
  std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace

void register_tokenize(CLI::App& app, CommandRunner* run) {
  auto opts = std::make_shared<TokenizeOptions>();
  auto* cmd = app.add_subcommand("tokenize", "Print the token ids of a text (one line of space-separated ids)");
  cmd->add_option("-m,--model", opts->model_path, "GGUF model or vocab-only file (default: the default model)");
  cmd->add_option("text", opts->text, "Text to tokenize (or ids to decode with --decode)");
  cmd->add_option("-f,--file", opts->file, "Read the text from this file ('-' for stdin)");
  cmd->add_flag("--special", opts->special, "Add BOS/EOS as the model's add_bos/add_eos rules say");
  cmd->add_flag("--no-parse-special", opts->no_parse_special,
                "Treat the text of control tokens (e.g. <|im_end|>) as plain text");
  cmd->add_flag("--pieces", opts->pieces, "Print one 'id<TAB>piece' line per token");
  cmd->add_flag("--decode", opts->decode, "Read token ids and print the text they decode to");
  cmd->add_option("--bench", opts->bench_seconds, "Encode repeatedly for about this many seconds and report MB/s");
  cmd->callback([opts, run] {
    if (opts->model_path.empty()) opts->model_path = default_model_path();
    *run = [opts] { return run_tokenize(*opts); };
  });
}

}  // namespace tern::cli
