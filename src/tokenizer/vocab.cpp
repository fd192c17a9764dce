// load_vocab(): tokenizer.ggml.* metadata -> Vocab, validating every array and id.
#include "tokenizer/vocab.h"

#include <string_view>
#include <unordered_map>

#include "formats/gguf.h"

namespace tern::tok {
namespace {

constexpr const char* kTokens = "tokenizer.ggml.tokens";
constexpr const char* kTypes = "tokenizer.ggml.token_type";
constexpr const char* kScores = "tokenizer.ggml.scores";
constexpr const char* kMerges = "tokenizer.ggml.merges";

Result<const gguf::Array*> get_array(const gguf::File& file, const char* key, gguf::ValueType elem, bool required) {
  const gguf::Value* v = file.find(key);
  if (v == nullptr) {
    if (required) return error(std::string(key) + ": missing (expected an array)");
    return static_cast<const gguf::Array*>(nullptr);
  }
  const gguf::Array* arr = v->as_array();
  if (arr == nullptr) {
    return error(std::string(key) + ": expected an array, got " + gguf::value_type_name(v->type));
  }
  if (!arr->items.empty() && arr->elem_type != elem) {
    // Accept any integer type for token types and any float type for scores.
    const bool int_ok = elem == gguf::ValueType::I32 && arr->items[0].as_int().has_value();
    const bool float_ok = elem == gguf::ValueType::F32 && arr->items[0].as_float().has_value();
    if (!int_ok && !float_ok) {
      return error(std::string(key) + ": expected elements of type " + gguf::value_type_name(elem) + ", got " +
                   gguf::value_type_name(arr->elem_type));
    }
  }
  return arr;
}

// Optional token id: -1 when absent; error when present but not an integer in [0, n_vocab).
Result<int32_t> get_id(const gguf::File& file, const std::string& key, int32_t n_vocab) {
  const gguf::Value* v = file.find(key);
  if (v == nullptr) return int32_t{-1};
  const auto id = v->as_int();
  if (!id) return error(key + ": expected an integer token id, got " + gguf::value_type_name(v->type));
  // note: some converters write -1 (as u32 0xFFFFFFFF) for "none"; treat both as absent.
  if (*id == -1 || *id == 0xFFFFFFFFLL) return int32_t{-1};
  if (*id < 0 || *id >= n_vocab) {
    return error(key + ": expected a token id in [0, " + std::to_string(n_vocab) + "), got " + std::to_string(*id));
  }
  return static_cast<int32_t>(*id);
}

Result<bool> get_bool(const gguf::File& file, const std::string& key, bool fallback) {
  const gguf::Value* v = file.find(key);
  if (v == nullptr) return fallback;
  if (auto b = v->as_bool()) return *b;
  if (auto i = v->as_int()) return *i != 0;
  return error(key + ": expected a bool, got " + gguf::value_type_name(v->type));
}

Status load_merges(const gguf::File& file, Vocab* vocab) {
  TERN_ASSIGN_OR_RETURN(const gguf::Array* arr, get_array(file, kMerges, gguf::ValueType::STRING, true));
  std::unordered_map<std::string_view, int32_t> ids;
  ids.reserve(vocab->tokens.size() * 2);
  for (size_t i = 0; i < vocab->tokens.size(); ++i) ids.emplace(vocab->tokens[i], static_cast<int32_t>(i));
  vocab->merges.reserve(arr->items.size());
  std::string joined;
  for (size_t rank = 0; rank < arr->items.size(); ++rank) {
    const std::string* text = arr->items[rank].as_string();
    if (text == nullptr) return error(std::string(kMerges) + "[" + std::to_string(rank) + "]: expected a string");
    // "left right": byte-level tokens never contain a space, but try every space so a vocab whose
    // tokens do still loads when exactly one split names two known tokens.
    bool found = false;
    for (size_t sp = text->find(' '); sp != std::string::npos && !found; sp = text->find(' ', sp + 1)) {
      const std::string_view left(text->data(), sp);
      const std::string_view right(text->data() + sp + 1, text->size() - sp - 1);
      auto l = ids.find(left), r = ids.find(right);
      if (l == ids.end() || r == ids.end()) continue;
      joined.assign(left).append(right);
      auto m = ids.find(joined);
      if (m == ids.end()) {
        return error(std::string(kMerges) + "[" + std::to_string(rank) + "] \"" + *text +
                     "\": the merged token \"" + joined + "\" is not in the vocabulary");
      }
      vocab->merges.push_back({l->second, r->second, m->second});
      found = true;
    }
    if (!found) {
      return error(std::string(kMerges) + "[" + std::to_string(rank) + "] \"" + *text +
                   "\": expected \"LEFT RIGHT\" naming two tokens of the vocabulary");
    }
  }
  return Status::ok();
}

}  // namespace

Result<Vocab> load_vocab(const gguf::File& file) {
  Vocab vocab;
  const gguf::Value* model = file.find("tokenizer.ggml.model");
  if (model == nullptr || model->as_string() == nullptr) {
    return error("tokenizer.ggml.model: missing or not a string (expected \"gpt2\" or \"llama\")");
  }
  vocab.model_name = *model->as_string();
  if (vocab.model_name == "gpt2") {
    vocab.model = VocabModel::kBpe;
  } else if (vocab.model_name == "llama") {
    vocab.model = VocabModel::kSpm;
  } else if (vocab.model_name == "no_vocab" || vocab.model_name == "none") {
    return error("tokenizer.ggml.model: \"" + vocab.model_name + "\": this file has no vocabulary, so it cannot tokenize text");
  } else {
    return error("tokenizer.ggml.model: unsupported tokenizer \"" + vocab.model_name +
                 "\" (expected \"gpt2\" for byte-level BPE or \"llama\" for SentencePiece)");
  }
  if (const gguf::Value* pre = file.find("tokenizer.ggml.pre")) {
    if (pre->as_string() == nullptr) {
      return error(std::string("tokenizer.ggml.pre: expected a string, got ") + gguf::value_type_name(pre->type));
    }
    vocab.pre = *pre->as_string();
  }

  TERN_ASSIGN_OR_RETURN(const gguf::Array* tokens, get_array(file, kTokens, gguf::ValueType::STRING, true));
  if (tokens->items.empty()) return error(std::string(kTokens) + ": expected at least one token, got 0");
  if (tokens->items.size() > static_cast<size_t>(INT32_MAX)) return error(std::string(kTokens) + ": too many tokens");
  vocab.tokens.reserve(tokens->items.size());
  for (size_t i = 0; i < tokens->items.size(); ++i) {
    const std::string* s = tokens->items[i].as_string();
    if (s == nullptr) return error(std::string(kTokens) + "[" + std::to_string(i) + "]: expected a string");
    vocab.tokens.push_back(*s);
  }
  const size_t n_vocab = vocab.tokens.size();

  TERN_ASSIGN_OR_RETURN(const gguf::Array* types, get_array(file, kTypes, gguf::ValueType::I32, false));
  if (types != nullptr) {
    if (types->items.size() != n_vocab) {
      return error(std::string(kTypes) + ": expected " + std::to_string(n_vocab) + " entries (one per token), got " +
                   std::to_string(types->items.size()));
    }
    vocab.types.reserve(n_vocab);
    for (size_t i = 0; i < n_vocab; ++i) {
      const auto t = types->items[i].as_int();
      if (!t || *t < 0 || *t > static_cast<int64_t>(TokenType::kByte)) {
        return error(std::string(kTypes) + "[" + std::to_string(i) + "]: expected a token type in [0, 6]");
      }
      vocab.types.push_back(static_cast<TokenType>(*t));
    }
  } else {
    vocab.types.assign(n_vocab, TokenType::kNormal);
  }

  TERN_ASSIGN_OR_RETURN(const gguf::Array* scores, get_array(file, kScores, gguf::ValueType::F32, false));
  if (scores != nullptr) {
    if (scores->items.size() != n_vocab) {
      return error(std::string(kScores) + ": expected " + std::to_string(n_vocab) + " entries (one per token), got " +
                   std::to_string(scores->items.size()));
    }
    vocab.scores.reserve(n_vocab);
    for (size_t i = 0; i < n_vocab; ++i) {
      const auto f = scores->items[i].as_float();
      if (!f) return error(std::string(kScores) + "[" + std::to_string(i) + "]: expected a number");
      vocab.scores.push_back(static_cast<float>(*f));
    }
  } else if (vocab.model == VocabModel::kSpm) {
    return error(std::string(kScores) + ": missing (a SentencePiece \"llama\" vocabulary merges by score)");
  }

  if (vocab.model == VocabModel::kBpe) TERN_RETURN_IF_ERROR(load_merges(file, &vocab));

  const auto n = static_cast<int32_t>(n_vocab);
  TERN_ASSIGN_OR_RETURN(vocab.bos_id, get_id(file, "tokenizer.ggml.bos_token_id", n));
  TERN_ASSIGN_OR_RETURN(vocab.eos_id, get_id(file, "tokenizer.ggml.eos_token_id", n));
  TERN_ASSIGN_OR_RETURN(vocab.unk_id, get_id(file, "tokenizer.ggml.unknown_token_id", n));
  TERN_ASSIGN_OR_RETURN(vocab.pad_id, get_id(file, "tokenizer.ggml.padding_token_id", n));
  TERN_ASSIGN_OR_RETURN(vocab.sep_id, get_id(file, "tokenizer.ggml.seperator_token_id", n));
  TERN_ASSIGN_OR_RETURN(vocab.eot_id, get_id(file, "tokenizer.ggml.eot_token_id", n));
  TERN_ASSIGN_OR_RETURN(vocab.eom_id, get_id(file, "tokenizer.ggml.eom_token_id", n));

  // Defaults follow the model family: SentencePiece llama vocabularies start with BOS and a space.
  const bool spm = vocab.model == VocabModel::kSpm;
  TERN_ASSIGN_OR_RETURN(vocab.add_bos, get_bool(file, "tokenizer.ggml.add_bos_token", spm));
  TERN_ASSIGN_OR_RETURN(vocab.add_eos, get_bool(file, "tokenizer.ggml.add_eos_token", false));
  TERN_ASSIGN_OR_RETURN(vocab.add_space_prefix, get_bool(file, "tokenizer.ggml.add_space_prefix", spm));
  if (vocab.add_bos && vocab.bos_id < 0) vocab.add_bos = false;
  if (vocab.add_eos && vocab.eos_id < 0) vocab.add_eos = false;
  return vocab;
}

}  // namespace tern::tok
