#include "cli/kv_tier_flags.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

namespace tern::cli {

void add_kv_tier_flags(CLI::App& cmd, KvTierArgs& a) {
  cmd.add_option("--host-cache", a.host_cache, "host-RAM KV tier for blocks the device pool evicts, e.g. 4G (0 = off)");
  cmd.add_option("--disk-cache", a.disk_cache, "SSD KV tier directory: prefixes persist there across restarts");
  cmd.add_option("--disk-cache-size", a.disk_cache_size, "byte cap of the SSD KV tier, e.g. 50G (LRU beyond it)");
}

Result<uint64_t> parse_byte_size(const std::string& text, const std::string& flag) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (...) {
    return error(flag + ": expected a size such as 512M or 4G, got '" + text + "'");
  }
  std::string suffix = text.substr(used);
  if (suffix.ends_with("iB")) suffix.resize(suffix.size() - 2);
  else if (suffix.size() > 1 && suffix.ends_with("B")) suffix.resize(suffix.size() - 1);
  double scale = 1;
  if (suffix == "K" || suffix == "k") scale = 1024.0;
  else if (suffix == "M" || suffix == "m") scale = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g") scale = 1024.0 * 1024 * 1024;
  else if (suffix == "T" || suffix == "t") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!suffix.empty() && suffix != "B") return error(flag + ": unknown size suffix in '" + text + "' (K, M, G or T)");
  if (!(value >= 0) || !std::isfinite(value)) return error(flag + ": expected a non-negative size, got '" + text + "'");
  return static_cast<uint64_t>(value * scale);
}

Result<std::string> enable_kv_tiers(const KvTierArgs& a, const LoadedModel& lm, KvPool& pool) {
  TERN_ASSIGN_OR_RETURN(uint64_t host_bytes, parse_byte_size(a.host_cache, "--host-cache"));
  TERN_ASSIGN_OR_RETURN(uint64_t disk_bytes, parse_byte_size(a.disk_cache_size, "--disk-cache-size"));
  if (host_bytes == 0 && a.disk_cache.empty()) return std::string();
  KvTierOptions o;
  o.host_bytes = host_bytes;
  o.disk_dir = a.disk_cache;
  o.disk_bytes = disk_bytes;
  // The id is informational (the fingerprints decide): general.name, else the file name.
  auto name = lm.file->get_string_opt("general.name");
  o.model_id = name.is_ok() && name.value() ? *name.value() : std::string("model");
  o.model_fingerprint = lm.model->config().fingerprint;
  o.tokenizer_fingerprint = lm.tokenizer ? lm.tokenizer->fingerprint() : 0;
  pool.enable_tiers(o);
  std::string desc;
  char buf[256];
  if (KvTiers* t = pool.tiers(); t->host() != nullptr) {
    std::snprintf(buf, sizeof buf, "host RAM %.0f MiB", static_cast<double>(host_bytes) / (1024.0 * 1024.0));
    desc += buf;
  }
  if (KvDiskTier* d = pool.tiers()->disk(); d != nullptr) {
    std::snprintf(buf, sizeof buf, "%sSSD %s (%zu blocks, %.0f of %.0f MiB%s)", desc.empty() ? "" : ", ", d->path().c_str(),
                  d->n_files(), static_cast<double>(d->bytes()) / (1024.0 * 1024.0),
                  static_cast<double>(disk_bytes) / (1024.0 * 1024.0), d->writable() ? "" : ", read-only");
    desc += buf;
  }
  return desc;
}

}  // namespace tern::cli
