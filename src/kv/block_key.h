// The identity of one full KV block: its chained hash and everything the hash was built from.
// The pool indexes blocks by `hash`; the lower tiers also store and re-verify the rest, so a
// 64-bit collision or a file from another chain can never seed the wrong prompt.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tern {

using BlockHash = uint64_t;

// Hash of a full block: chained on the parent's hash so a block's identity is its whole prefix.
// `salt` separates namespaces (model fingerprint, tenant).
BlockHash hash_block(BlockHash parent, std::span<const int32_t> tokens);
BlockHash root_block_hash(uint64_t salt);

struct BlockKey {
  BlockHash hash = 0;           // hash_block(parent, tokens)
  BlockHash parent = 0;         // the previous block's hash, or `root` for the first block
  BlockHash root = 0;           // the chain's root: model fingerprint + tenant salt (the namespace)
  int32_t first_position = 0;   // position of tokens[0] in the sequence
  std::vector<int32_t> tokens;  // block_tokens ids

  bool operator==(const BlockKey&) const = default;
};

}  // namespace tern
