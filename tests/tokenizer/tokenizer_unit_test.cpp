// Behaviour that goldens cannot show: invalid UTF-8, streaming, BOS/EOS and special-token rules,
// end-of-generation ids, fingerprints, NFC and the UTF-8 helpers.
#include <gtest/gtest.h>

#include <thread>

#include "tokenizer/unicode.h"
#include "tokenizer/unicode_nfc.h"
#include "tokenizer_test_util.h"

namespace tern::tok {
namespace {

using testing::join_ids;

std::unique_ptr<Tokenizer> load_or_skip(const std::string& path) {
  std::string why;
  auto tok = testing::load_tokenizer(path, &why);
  if (!tok) ADD_FAILURE() << why;
  return tok;
}

std::string vectors(const std::string& name) { return testing::shared_vectors_dir() + "/ggml-vocab-" + name + ".gguf"; }

#define REQUIRE_FILE(path) \
  if (!std::filesystem::exists(path)) GTEST_SKIP() << (path) << " not present"

TEST(Utf8, InvalidBytesBecomeRawByteCodePoints) {
  size_t len = 0;
  EXPECT_EQ(decode_utf8("\xC3\xA9", 0, &len), 0xE9u);
  EXPECT_EQ(len, 2u);
  EXPECT_EQ(decode_utf8("\xFF", 0, &len), kRawByteBase + 0xFF);
  EXPECT_EQ(len, 1u);
  EXPECT_EQ(decode_utf8("\xE2\x82", 0, &len), kRawByteBase + 0xE2);  // truncated
  EXPECT_EQ(decode_utf8("\xC0\x80", 0, &len), kRawByteBase + 0xC0);  // over-long NUL
  EXPECT_EQ(decode_utf8("\xED\xA0\x80", 0, &len), kRawByteBase + 0xED);  // surrogate
  EXPECT_EQ(decode_utf8("\xF4\x90\x80\x80", 0, &len), kRawByteBase + 0xF4);  // > U+10FFFF
  EXPECT_EQ(decode_utf8("\xF0\x9F\x98\x80", 0, &len), 0x1F600u);
  EXPECT_EQ(len, 4u);
}

TEST(Utf8, CompletePrefixHoldsBackOnlyWhatCanStillComplete) {
  EXPECT_EQ(complete_utf8_prefix("abc"), 3u);
  EXPECT_EQ(complete_utf8_prefix("ab\xF0\x9F"), 2u);      // half an emoji: hold 2 bytes
  EXPECT_EQ(complete_utf8_prefix("ab\xF0\x9F\x98"), 2u);
  EXPECT_EQ(complete_utf8_prefix("ab\xF0\x9F\x98\x80"), 6u);
  EXPECT_EQ(complete_utf8_prefix("ab\xE0"), 2u);          // E0 may still become E0 A0..BF
  EXPECT_EQ(complete_utf8_prefix("ab\xE0\x80"), 4u);      // E0 80 can never be valid: pass through
  EXPECT_EQ(complete_utf8_prefix("ab\xFF"), 3u);
  EXPECT_EQ(complete_utf8_prefix("\x80\x80"), 2u);        // stray continuation bytes
}

TEST(UnicodeClasses, MatchHuggingFacesRegexEngine) {
  EXPECT_TRUE(cp_flags('a') & kLetter);
  EXPECT_TRUE(cp_flags('a') & kLower);
  EXPECT_TRUE(cp_flags('A') & kUpper);
  EXPECT_TRUE(cp_flags(' ') & kSpace);
  EXPECT_TRUE(cp_flags(0x3000) & kSpace);    // ideographic space
  EXPECT_TRUE(cp_flags(0x4E00) & kHan);
  EXPECT_TRUE(cp_flags(0x0663) & kNumber);   // Arabic-Indic three
  EXPECT_TRUE(cp_flags(0x00BD) & kNumber);   // ½
  EXPECT_TRUE(cp_flags(0x0301) & kMark);
  EXPECT_TRUE(cp_flags(0x01C5) & kTitle);    // ǅ
  EXPECT_TRUE(cp_flags(0x1F600) & kSymbol);  // 😀
  EXPECT_EQ(cp_flags(kRawByteBase + 0x80), 0);
  EXPECT_EQ(cp_flags(0x10FFFF), 0);
}

TEST(Nfc, ComposesReordersAndHandlesHangul) {
  EXPECT_EQ(to_nfc("e\xCC\x81"), "\xC3\xA9");                 // e + acute -> é
  EXPECT_EQ(to_nfc("\xE2\x84\xAB"), "\xC3\x85");              // Angstrom sign -> Å
  EXPECT_EQ(to_nfc("a\xCC\x82\xCC\xA3"), "\xE1\xBA\xAD");     // a + circumflex + dot below -> ậ
  EXPECT_EQ(to_nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // jamo -> 각
  EXPECT_EQ(to_nfc("plain ascii"), "plain ascii");
  EXPECT_EQ(to_nfc("\xFF" "e\xCC\x81"), "\xFF\xC3\xA9");      // invalid bytes pass through
  EXPECT_TRUE(nfc_quick_check("abc \xC3\xA9"));
  EXPECT_FALSE(nfc_quick_check("e\xCC\x81"));
}

TEST(Encode, InvalidUtf8RoundTripsThroughByteLevelBpe) {
  auto tok = load_or_skip(testing::default_model_path());
  if (!tok) return;
  const std::string texts[] = {"ok \xC3 broken", "\xE2\x82", "a\xF0\x9F\x98", "\x80\x80\x80x", "\xC3(\xA9",
                               std::string("nul\0inside", 10)};
  for (const std::string& text : texts) {
    const auto ids = tok->encode(text, false, true);
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(tok->decode(ids), text);
  }
  // Bytes that never occur in UTF-8 (here FF, FE) have no token in SmolLM2's vocabulary: they are
  // dropped, never turned into unk (which is <|endoftext|> there).
  EXPECT_EQ(tok->decode(tok->encode("x\xFF\xFEy", false, true)), "xy");
}

TEST(Encode, InvalidUtf8UsesByteFallbackInSentencePiece) {
  REQUIRE_FILE(vectors("llama-spm"));
  auto tok = load_or_skip(vectors("llama-spm"));
  if (!tok) return;
  // "▁" then the raw byte 0xFF as its <0xFF> piece (ids 3 + byte).
  const auto ids = tok->encode("\xFF", false, false);
  EXPECT_EQ(join_ids(ids), "29871 258");
  EXPECT_EQ(tok->decode(ids), "\xFF");
}

TEST(Encode, BosEosFollowTheModelsRules) {
  REQUIRE_FILE(vectors("llama-spm"));
  auto spm = load_or_skip(vectors("llama-spm"));
  if (!spm) return;
  EXPECT_EQ(join_ids(spm->encode("Hello", true, false)), "1 15043");  // add_bos_token = true
  EXPECT_EQ(join_ids(spm->encode("Hello", false, false)), "15043");
  EXPECT_EQ(join_ids(spm->encode("", true, false)), "1");
  auto smol = load_or_skip(testing::default_model_path());
  if (!smol) return;
  EXPECT_EQ(smol->encode("Hello", true, true), smol->encode("Hello", false, true));  // add_bos_token = false
}

TEST(Encode, SpecialTokenTextOnlyMatchesWhenParsingSpecial) {
  auto tok = load_or_skip(testing::default_model_path());
  if (!tok) return;
  EXPECT_EQ(join_ids(tok->encode("<|im_start|>user", false, true)), "1 4093");
  const auto plain = tok->encode("<|im_start|>", false, false);
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_EQ(tok->decode(plain), "<|im_start|>");
  EXPECT_EQ(tok->decode(tok->encode("<|im_start|>hi<|im_end|>", false, true), /*skip_special=*/true), "hi");
}

TEST(Tokenizer, EndOfGenerationIds) {
  auto tok = load_or_skip(testing::default_model_path());
  if (!tok) return;
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->is_eog(2));   // <|im_end|>
  EXPECT_TRUE(tok->is_eog(0));   // <|endoftext|>
  EXPECT_FALSE(tok->is_eog(1));  // <|im_start|>
  EXPECT_FALSE(tok->is_eog(tok->encode("Hello", false, false)[0]));
  EXPECT_FALSE(tok->is_eog(-1));
  EXPECT_FALSE(tok->is_eog(tok->n_vocab()));
}

TEST(Tokenizer, FingerprintSeparatesVocabulariesAndPreTokenizers) {
  REQUIRE_FILE(vectors("gpt-2"));
  auto a = load_or_skip(vectors("gpt-2"));
  auto b = load_or_skip(vectors("gpt-2"));
  auto c = load_or_skip(vectors("deepseek-coder"));
  if (!a || !b || !c) return;
  EXPECT_EQ(a->fingerprint(), b->fingerprint());
  EXPECT_NE(a->fingerprint(), c->fingerprint());
  Vocab v = a->vocab();
  v.pre = "llama-bpe";
  auto d = Tokenizer::from_vocab(std::move(v));
  ASSERT_TRUE(d) << d.status().message();
  EXPECT_NE(a->fingerprint(), (*d)->fingerprint());
}

TEST(Tokenizer, ConcurrentEncodesAgreeWithSerialOnes) {
  auto tok = load_or_skip(testing::default_model_path());
  if (!tok) return;
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) texts.push_back("def f" + std::to_string(i) + "(x):\n    return x * " + std::to_string(i * 7));
  std::vector<std::vector<int32_t>> serial;
  for (const auto& t : texts) serial.push_back(tok->encode(t, false, true));
  std::vector<std::vector<int32_t>> a(texts.size()), b(texts.size());
  std::thread ta([&] { for (size_t i = 0; i < texts.size(); ++i) a[i] = tok->encode(texts[i], false, true); });
  std::thread tb([&] { for (size_t i = texts.size(); i-- > 0;) b[i] = tok->encode(texts[i], false, true); });
  ta.join();
  tb.join();
  EXPECT_EQ(a, serial);
  EXPECT_EQ(b, serial);
}

// The stream of push() outputs is the whole decode, and no push returns a split character.
void expect_stream_equals_decode(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
  StreamDecoder stream(tok, skip_special);
  std::string joined;
  for (int32_t id : ids) {
    const std::string part = stream.push(id);
    EXPECT_EQ(complete_utf8_prefix(part), part.size()) << "push returned an incomplete character";
    joined += part;
  }
  joined += stream.flush();
  EXPECT_EQ(joined, tok.decode(ids, skip_special));
}

TEST(StreamDecoder, EqualsWholeDecodeAndNeverSplitsCharacters) {
  const std::string texts[] = {"Hello 🦙 world! 😶‍🌫️ 你好 Ελληνικά", " leading space", "<|im_start|>x<|im_end|>",
                               "tail \xF0\x9F\x98", "\xFF bad \x80"};
  for (const std::string& path : {testing::default_model_path(), vectors("llama-spm"), vectors("phi-3")}) {
    if (!std::filesystem::exists(path)) continue;
    auto tok = load_or_skip(path);
    if (!tok) continue;
    for (const std::string& text : texts) {
      const auto ids = tok->encode(text, true, true);
      expect_stream_equals_decode(*tok, ids, false);
      expect_stream_equals_decode(*tok, ids, true);
    }
  }
}

TEST(StreamDecoder, HoldsBackAnEmojiSplitAcrossByteTokens) {
  REQUIRE_FILE(vectors("llama-spm"));
  auto tok = load_or_skip(vectors("llama-spm"));
  if (!tok) return;
  // 🦙 = F0 9F A6 99 has no piece in llama's vocab: it is four <0x..> byte pieces.
  const auto ids = tok->encode("🦙", false, false);
  ASSERT_EQ(join_ids(ids), "29871 243 162 169 156");
  StreamDecoder stream(*tok);
  EXPECT_EQ(stream.push(ids[0]), "");  // the prefix space is stripped
  EXPECT_EQ(stream.push(ids[1]), "");
  EXPECT_EQ(stream.push(ids[2]), "");
  EXPECT_EQ(stream.push(ids[3]), "");
  EXPECT_EQ(stream.push(ids[4]), "🦙");
  EXPECT_EQ(stream.flush(), "");
}

}  // namespace
}  // namespace tern::tok
