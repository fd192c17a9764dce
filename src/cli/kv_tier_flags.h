// Flags for the KV tiers below the device pool, shared by `tern serve` and `tern chat`:
//   --host-cache SIZE        host-RAM tier for blocks the device pool evicts (0 = off)
//   --disk-cache DIR         SSD tier: blocks persist there and survive restarts
//   --disk-cache-size SIZE   byte cap of the SSD tier (LRU beyond it)
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "cli/model_setup.h"
#include "core/status.h"
#include "kv/kv_pool.h"

namespace tern::cli {

struct KvTierArgs {
  std::string host_cache = "0";
  std::string disk_cache;
  std::string disk_cache_size = "20G";
};

void add_kv_tier_flags(CLI::App& cmd, KvTierArgs& args);

// A byte size with an optional K/M/G/T suffix (powers of 1024); `flag` names it in errors.
Result<uint64_t> parse_byte_size(const std::string& text, const std::string& flag);

// Attaches the tiers the flags ask for to `pool`, identified by the loaded model and tokenizer.
// Returns a one-line description for the startup banner ("" when no tier is on).
Result<std::string> enable_kv_tiers(const KvTierArgs& args, const LoadedModel& lm, KvPool& pool);

}  // namespace tern::cli
