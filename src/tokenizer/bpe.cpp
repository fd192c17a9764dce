#include "tokenizer/bpe.h"

#include <atomic>
#include <cstring>
#include <queue>

#include "tokenizer/unicode.h"

namespace tern::tok {
namespace {

bool is_printable_latin1(uint32_t b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

struct ByteMap {
  std::array<uint32_t, 256> to_char;
  ByteMap() {
    uint32_t next = 0x100;
    for (uint32_t b = 0; b < 256; ++b) to_char[b] = is_printable_latin1(b) ? b : next++;
  }
};
const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

uint64_t mix(uint64_t key) {
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdULL;
  key ^= key >> 33;
  return key;
}

// Words longer than this merge with a heap; shorter ones rescan, which is faster for them.
constexpr size_t kHeapThreshold = 48;
// Only words up to this many bytes are cached.
constexpr size_t kMaxCachedWordBytes = 64;

// Finished words, per thread: an open-addressing table of (hash, bytes) -> ids whose keys and ids
// live in two flat arenas, so a hit costs one hash, one probe and one memcmp. Cleared whole when
// half full (cheap, and the working set of a text refills it at once).
class WordCache {
 public:
  uint64_t owner = 0;

  static uint64_t hash(std::string_view bytes) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ bytes.size();
    size_t i = 0;
    for (; i + 8 <= bytes.size(); i += 8) {
      uint64_t w;
      std::memcpy(&w, bytes.data() + i, 8);
      h = (h ^ w) * 0xff51afd7ed558ccdULL;
      h ^= h >> 32;
    }
    uint64_t tail = 0;
    std::memcpy(&tail, bytes.data() + i, bytes.size() - i);
    h = (h ^ tail) * 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 29);
  }

  // ids of the word, or nullptr; *n_ids is set on a hit.
  const int32_t* find(std::string_view bytes, uint64_t h, uint32_t* n_ids) const {
    if (slots_.empty()) return nullptr;
    for (size_t slot = h & mask_;; slot = (slot + 1) & mask_) {
      const Slot& s = slots_[slot];
      if (s.n_key_bytes == 0) return nullptr;
      if (s.hash == h && s.n_key_bytes == bytes.size() &&
          std::memcmp(keys_.data() + s.key_offset, bytes.data(), bytes.size()) == 0) {
        *n_ids = s.n_ids;
        return ids_.data() + s.ids_offset;
      }
    }
  }

  void insert(std::string_view bytes, uint64_t h, const int32_t* ids, size_t n_ids) {
    if (slots_.empty() || n_used_ * 2 >= slots_.size()) clear();
    size_t slot = h & mask_;
    while (slots_[slot].n_key_bytes != 0) slot = (slot + 1) & mask_;
    slots_[slot] = {h, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(ids_.size()),
                    static_cast<uint16_t>(bytes.size()), static_cast<uint16_t>(n_ids)};
    keys_.append(bytes);
    ids_.insert(ids_.end(), ids, ids + n_ids);
    ++n_used_;
  }

  void clear() {
    slots_.assign(kSlots, Slot{});
    mask_ = kSlots - 1;
    keys_.clear();
    ids_.clear();
    n_used_ = 0;
  }

 private:
  static constexpr size_t kSlots = size_t{1} << 16;
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_offset = 0;
    uint32_t ids_offset = 0;
    uint16_t n_key_bytes = 0;  // 0 = empty (empty words are never cached)
    uint16_t n_ids = 0;
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  std::string keys_;
  std::vector<int32_t> ids_;
  size_t n_used_ = 0;
};
// note: per thread, so encode() stays lock-free and const; a thread that alternates between two
// tokenizers just refills it.
thread_local WordCache t_word_cache;

std::atomic<uint64_t> g_next_instance_id{1};

}  // namespace

uint32_t byte_to_char(uint8_t byte) { return byte_map().to_char[byte]; }

int byte_from_char(uint32_t cp) {
  if (cp < 0x100) return is_printable_latin1(cp) ? static_cast<int>(cp) : -1;
  if (cp >= 0x100 + 68) return -1;
  for (uint32_t b = 0; b < 256; ++b) {
    if (byte_map().to_char[b] == cp) return static_cast<int>(b);
  }
  return -1;
}

BpeEncoder::BpeEncoder(const Vocab& vocab, const TokenIndex& index, bool ignore_merges)
    : vocab_(vocab), index_(index), ignore_merges_(ignore_merges), instance_id_(g_next_instance_id++) {
  for (uint32_t b = 0; b < 256; ++b) {
    byte_chars_[b].clear();
    append_utf8(byte_to_char(static_cast<uint8_t>(b)), &byte_chars_[b]);
    byte_ids_[b] = index_.find(byte_chars_[b]);
  }
  size_t size = 16;
  while (size < vocab.merges.size() * 2) size <<= 1;
  merge_table_.assign(size, MergeEntry{});
  merge_mask_ = size - 1;
  for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    const BpeMerge& m = vocab.merges[rank];
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(m.left_id)) << 32) | static_cast<uint32_t>(m.right_id);
    for (uint64_t slot = mix(key) & merge_mask_;; slot = (slot + 1) & merge_mask_) {
      MergeEntry& e = merge_table_[slot];
      if (e.key == kEmpty) {
        e = {key, static_cast<int32_t>(rank), m.merged_id};
        break;
      }
      if (e.key == key) break;  // a repeated merge keeps its first (best) rank
    }
  }
}

const BpeEncoder::MergeEntry* BpeEncoder::find_merge(int32_t left, int32_t right) const {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  for (uint64_t slot = mix(key) & merge_mask_;; slot = (slot + 1) & merge_mask_) {
    const MergeEntry& e = merge_table_[slot];
    if (e.key == key) return &e;
    if (e.key == kEmpty) return nullptr;
  }
}

// Short words: find the best pair by scanning, merge it, repeat.
void BpeEncoder::merge_word(std::vector<int32_t>* symbols) const {
  std::vector<int32_t>& s = *symbols;
  while (s.size() > 1) {
    int32_t best_rank = INT32_MAX;
    size_t best_pos = 0;
    int32_t best_id = -1;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const MergeEntry* e = find_merge(s[i], s[i + 1]);
      if (e != nullptr && e->rank < best_rank) {
        best_rank = e->rank;
        best_pos = i;
        best_id = e->merged_id;
      }
    }
    if (best_id < 0) return;
    s[best_pos] = best_id;
    s.erase(s.begin() + static_cast<std::ptrdiff_t>(best_pos) + 1);
  }
}

// Long words: a min-heap of candidate merges ordered by (rank, position) over a linked list of
// symbols; stale candidates (a side already merged away) are skipped when popped.
void BpeEncoder::merge_word_heap(std::vector<int32_t>* symbols) const {
  std::vector<int32_t>& s = *symbols;
  const size_t n = s.size();
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t left_id;
    int32_t right_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    const MergeEntry* e = find_merge(s[pos], s[next[pos]]);
    if (e != nullptr) heap.push({e->rank, pos, s[pos], s[next[pos]]});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int32_t right = next[c.pos];
    if (!alive[c.pos] || right < 0 || s[c.pos] != c.left_id || s[right] != c.right_id) continue;
    const MergeEntry* e = find_merge(c.left_id, c.right_id);
    s[c.pos] = e->merged_id;
    alive[right] = false;
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  size_t out = 0;
  for (size_t i = 0; i < n; ++i) {
    if (alive[i]) s[out++] = s[i];
  }
  s.resize(out);
}

void BpeEncoder::encode_piece(std::string_view bytes, std::vector<int32_t>* out) const {
  if (bytes.empty()) return;
  const bool cacheable = bytes.size() <= kMaxCachedWordBytes;
  WordCache& cache = t_word_cache;
  uint64_t h = 0;
  if (cacheable) {
    if (cache.owner != instance_id_) {
      cache.clear();
      cache.owner = instance_id_;
    }
    h = WordCache::hash(bytes);
    uint32_t n_ids = 0;
    if (const int32_t* ids = cache.find(bytes, h, &n_ids)) {
      out->insert(out->end(), ids, ids + n_ids);
      return;
    }
  }
  std::vector<int32_t> symbols;
  symbols.reserve(bytes.size());
  bool done = false;
  if (ignore_merges_) {
    std::string word;
    for (char ch : bytes) word += byte_chars_[static_cast<uint8_t>(ch)];
    const int32_t id = index_.find(word);
    if (id >= 0) {
      symbols.push_back(id);
      done = true;
    }
  }
  if (!done) {
    for (char ch : bytes) {
      const int32_t id = byte_ids_[static_cast<uint8_t>(ch)];
      // note: vocabularies trained on valid UTF-8 may lack bytes that never occur in it (C0, C1,
      // F5..FF). Such a byte is dropped, as HF does for byte-level BPE (its unk_token is null);
      // emitting the GGUF's unk id would put e.g. <|endoftext|> into the prompt.
      if (id >= 0) symbols.push_back(id);
    }
    if (symbols.size() > kHeapThreshold) {
      merge_word_heap(&symbols);
    } else {
      merge_word(&symbols);
    }
  }
  out->insert(out->end(), symbols.begin(), symbols.end());
  if (cacheable) cache.insert(bytes, h, symbols.data(), symbols.size());
}

}  // namespace tern::tok
