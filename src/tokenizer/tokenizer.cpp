// Tokenizer: special-token splitting, BOS/EOS, dispatch to the BPE or SPM encoder, decoding.
#include "tokenizer/tokenizer.h"

#include <cstring>
#include <optional>

#include "formats/gguf.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/spm.h"
#include "tokenizer/token_index.h"
#include "tokenizer/unicode.h"
#include "tokenizer/unicode_nfc.h"

namespace tern::tok {

struct Tokenizer::Impl {
  Vocab vocab;
  TokenIndex index;
  PreTokenizer pre;            // BPE only
  std::optional<BpeEncoder> bpe;
  std::optional<SpmEncoder> spm;
  TokenTrie user_defined;      // always matched as a whole
  TokenTrie all_special;       // user-defined + control + unknown (parse_special)
  std::vector<std::string> decoded;  // [n_vocab] bytes each token contributes to decode()
  std::vector<bool> eog;             // [n_vocab]
  uint64_t fingerprint = 0;
  std::vector<std::string> warnings;

  void encode_text(std::string_view text, bool at_start_or_after_special, std::vector<int32_t>* out) const;
  void encode_bpe(std::string_view text, std::vector<int32_t>* out) const;
};

namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 "▁"

bool is_special_type(TokenType t) { return t == TokenType::kControl || t == TokenType::kUnknown; }

// Control tokens that end a turn in common chat formats, for models whose metadata names only eos.
constexpr const char* kEndOfGenerationNames[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>",
    "<|END_OF_TURN_TOKEN|>", "<|end_of_text|>", "<|return|>", "<|call|>", "</s>", "<｜end▁of▁sentence｜>",
};

uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}
template <typename T>
uint64_t fnv1a_value(uint64_t h, const T& v) {
  return fnv1a(h, &v, sizeof(v));
}

uint64_t compute_fingerprint(const Vocab& v, const std::string& pre_family) {
  uint64_t h = 0xcbf29ce484222325ULL;
  h = fnv1a(h, v.model_name.data(), v.model_name.size() + 1);
  h = fnv1a(h, pre_family.data(), pre_family.size() + 1);
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    h = fnv1a_value(h, static_cast<uint32_t>(v.tokens[i].size()));
    h = fnv1a(h, v.tokens[i].data(), v.tokens[i].size());
    h = fnv1a_value(h, v.types[i]);
  }
  if (!v.scores.empty()) h = fnv1a(h, v.scores.data(), v.scores.size() * sizeof(float));
  if (!v.merges.empty()) h = fnv1a(h, v.merges.data(), v.merges.size() * sizeof(BpeMerge));
  for (int32_t id : {v.bos_id, v.eos_id, v.unk_id, v.pad_id, v.sep_id, v.eot_id, v.eom_id}) h = fnv1a_value(h, id);
  for (bool b : {v.add_bos, v.add_eos, v.add_space_prefix}) h = fnv1a_value(h, b);
  return h;
}

// The bytes a token decodes to. Special and added tokens decode to their text as written.
std::string decoded_bytes(const Vocab& v, int32_t id) {
  const std::string& text = v.tokens[id];
  const TokenType type = v.types[id];
  // Byte-level added tokens are stored as written, not in the byte alphabet. (SPM user-defined
  // pieces may spell spaces as "▁", which HF's decoder maps back, so they take the SPM path below.)
  if (v.model == VocabModel::kBpe &&
      (type == TokenType::kControl || type == TokenType::kUnknown || type == TokenType::kUserDefined)) {
    return text;
  }
  std::string out;
  if (v.model == VocabModel::kSpm) {
    if (type == TokenType::kByte && text.size() == 6 && text.starts_with("<0x") && text.back() == '>') {
      unsigned value = 0;
      if (std::sscanf(text.c_str() + 3, "%2X", &value) == 1) return std::string(1, static_cast<char>(value));
    }
    if (type == TokenType::kControl || type == TokenType::kUnknown) return text;
    for (size_t pos = 0; pos < text.size();) {
      if (text.compare(pos, kSpmSpace.size(), kSpmSpace) == 0) {
        out += ' ';
        pos += kSpmSpace.size();
      } else {
        out += text[pos++];
      }
    }
    return out;
  }
  // Byte-level: each character stands for one byte; characters outside the alphabet (a malformed
  // vocabulary) pass through as UTF-8.
  for (size_t pos = 0; pos < text.size();) {
    size_t len = 1;
    const uint32_t cp = decode_utf8(text, pos, &len);
    const int byte = byte_from_char(cp);
    if (byte >= 0) {
      out += static_cast<char>(byte);
    } else {
      out.append(text, pos, len);
    }
    pos += len;
  }
  return out;
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const gguf::File& file) {
  TERN_ASSIGN_OR_RETURN(Vocab vocab, load_vocab(file));
  return from_vocab(std::move(vocab));
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_vocab(Vocab vocab) {
  const size_t n = vocab.tokens.size();
  if (n == 0) return error("vocab: expected at least one token, got 0");
  if (vocab.types.size() != n) {
    return error("vocab: expected " + std::to_string(n) + " token types, got " + std::to_string(vocab.types.size()));
  }
  if (!vocab.scores.empty() && vocab.scores.size() != n) {
    return error("vocab: expected " + std::to_string(n) + " scores, got " + std::to_string(vocab.scores.size()));
  }
  for (int32_t id : {vocab.bos_id, vocab.eos_id, vocab.unk_id, vocab.pad_id, vocab.sep_id, vocab.eot_id, vocab.eom_id}) {
    if (id < -1 || id >= static_cast<int32_t>(n)) {
      return error("vocab: special token id " + std::to_string(id) + " is outside [0, " + std::to_string(n) + ")");
    }
  }
  for (size_t r = 0; r < vocab.merges.size(); ++r) {
    const BpeMerge& m = vocab.merges[r];
    for (int32_t id : {m.left_id, m.right_id, m.merged_id}) {
      if (id < 0 || id >= static_cast<int32_t>(n)) {
        return error("vocab: merge " + std::to_string(r) + " names token id " + std::to_string(id) + ", outside [0, " +
                     std::to_string(n) + ")");
      }
    }
  }

  auto impl = std::make_unique<Impl>();
  impl->vocab = std::move(vocab);
  const Vocab& v = impl->vocab;
  impl->index.build(v.tokens);
  if (v.model == VocabModel::kBpe) {
    std::string warning;
    TERN_ASSIGN_OR_RETURN(impl->pre, pre_tokenizer_for(v.pre, &warning));
    if (!warning.empty()) impl->warnings.push_back(warning);
    impl->bpe.emplace(impl->vocab, impl->index, impl->pre.ignore_merges);
  } else {
    impl->spm.emplace(impl->vocab, impl->index);
  }
  impl->decoded.reserve(n);
  impl->eog.assign(n, false);
  for (int32_t id = 0; id < static_cast<int32_t>(n); ++id) {
    impl->decoded.push_back(decoded_bytes(v, id));
    const TokenType type = v.types[id];
    if (type == TokenType::kUserDefined) impl->user_defined.add(v.tokens[id], id);
    if (type == TokenType::kUserDefined || is_special_type(type)) impl->all_special.add(v.tokens[id], id);
    if (type == TokenType::kControl) {
      for (const char* name : kEndOfGenerationNames) {
        if (v.tokens[id] == name) impl->eog[id] = true;
      }
    }
  }
  for (int32_t id : {v.eos_id, v.eot_id, v.eom_id}) {
    if (id >= 0) impl->eog[id] = true;
  }
  impl->fingerprint = compute_fingerprint(v, impl->pre.name);
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

void Tokenizer::Impl::encode_bpe(std::string_view raw_text, std::vector<int32_t>* out) const {
  std::string normalized;
  std::string_view text = raw_text;
  if (pre.nfc && !nfc_quick_check(raw_text)) {
    normalized = to_nfc(raw_text);
    text = normalized;
  }
  std::vector<uint32_t> cps, offsets;
  decode_utf8_all(text, &cps, &offsets);
  std::vector<uint16_t> flags(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) flags[i] = cp_flags(cps[i]);
  std::vector<CpSpan> pieces, scratch;
  pre_tokenize(pre, cps, flags, &pieces, &scratch);
  if (pre.byte_stages.empty()) {
    for (const CpSpan& p : pieces) bpe->encode_piece(text.substr(offsets[p.begin], offsets[p.end] - offsets[p.begin]), out);
    return;
  }
  std::vector<ByteSpan> spans, next;
  for (const CpSpan& p : pieces) spans.push_back({offsets[p.begin], offsets[p.end]});
  for (ByteSplit stage : pre.byte_stages) {
    next.clear();
    for (const ByteSpan& s : spans) split_bytes(stage, text, s, &next);
    spans.swap(next);
  }
  for (const ByteSpan& s : spans) bpe->encode_piece(text.substr(s.begin, s.end - s.begin), out);
}

void Tokenizer::Impl::encode_text(std::string_view text, bool at_start_or_after_special, std::vector<int32_t>* out) const {
  if (bpe) {
    if (vocab.add_space_prefix && at_start_or_after_special) {
      std::string prefixed = " ";
      prefixed.append(text);
      encode_bpe(prefixed, out);
    } else {
      encode_bpe(text, out);
    }
    return;
  }
  std::string normalized;
  normalized.reserve(text.size() + text.size() / 2 + 3);
  if (vocab.add_space_prefix && at_start_or_after_special) normalized += kSpmSpace;
  for (char ch : text) {
    if (ch == ' ') {
      normalized += kSpmSpace;
    } else {
      normalized += ch;
    }
  }
  spm->encode(normalized, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos_eos, bool parse_special) const {
  const Impl& m = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos_eos && m.vocab.add_bos) out.push_back(m.vocab.bos_id);
  const TokenTrie& atoms = parse_special ? m.all_special : m.user_defined;
  bool after_special = true;  // the start of the text counts as "after a special token"
  size_t text_begin = 0;
  if (!atoms.empty()) {
    for (size_t pos = 0; pos < text.size();) {
      int32_t id = -1;
      const size_t len = atoms.may_start(static_cast<uint8_t>(text[pos])) ? atoms.longest_at(text, pos, &id) : 0;
      if (len == 0) {
        ++pos;
        continue;
      }
      if (text_begin < pos) {
        m.encode_text(text.substr(text_begin, pos - text_begin), after_special, &out);
      }
      out.push_back(id);
      after_special = true;
      pos += len;
      text_begin = pos;
    }
  }
  if (text_begin < text.size()) m.encode_text(text.substr(text_begin), after_special, &out);
  if (add_bos_eos && m.vocab.add_eos) out.push_back(m.vocab.eos_id);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= n_vocab()) continue;
    if (skip_special && is_special(id)) continue;
    out += impl_->decoded[id];
  }
  if (strips_leading_space() && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

std::string_view Tokenizer::piece(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return {};
  return impl_->vocab.tokens[id];
}
std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return {};
  return impl_->decoded[id];
}
int32_t Tokenizer::n_vocab() const { return impl_->vocab.n_vocab(); }
int32_t Tokenizer::bos_id() const { return impl_->vocab.bos_id; }
int32_t Tokenizer::eos_id() const { return impl_->vocab.eos_id; }
bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < n_vocab() && is_special_type(impl_->vocab.types[id]);
}
bool Tokenizer::is_eog(int32_t id) const { return id >= 0 && id < n_vocab() && impl_->eog[id]; }
uint64_t Tokenizer::fingerprint() const { return impl_->fingerprint; }
const Vocab& Tokenizer::vocab() const { return impl_->vocab; }
const std::string& Tokenizer::pre_tokenizer_name() const { return impl_->pre.name; }
const std::vector<std::string>& Tokenizer::warnings() const { return impl_->warnings; }
bool Tokenizer::normalizes_to_nfc() const { return impl_->pre.nfc; }
bool Tokenizer::strips_leading_space() const {
  return impl_->vocab.model == VocabModel::kSpm && impl_->vocab.add_space_prefix;
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {}

std::string StreamDecoder::push(int32_t id) {
  if (id < 0 || id >= tokenizer_->n_vocab()) return {};
  if (skip_special_ && tokenizer_->is_special(id)) return {};
  std::string_view bytes = tokenizer_->token_bytes(id);
  if (bytes.empty()) return {};
  if (at_start_) {
    at_start_ = false;
    if (tokenizer_->strips_leading_space() && bytes[0] == ' ') bytes.remove_prefix(1);
  }
  pending_.append(bytes);
  const size_t n_complete = complete_utf8_prefix(pending_);
  std::string out = pending_.substr(0, n_complete);
  pending_.erase(0, n_complete);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace tern::tok
