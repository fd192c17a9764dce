// tern bench kv: what a KV tier restore costs against recomputing the prefix.
//
// For each prefix length: prefill it once (the re-prefill time: what a miss costs), let
// write-behind put its blocks on disk, then time a new session's first turn on the same prompt
// served from (1) host RAM (every block spilled by filling the device pool), (2) the SSD tier
// with the files in the page cache, (3) the SSD tier after posix_fadvise(DONTNEED) dropped them.
// Each restore runs on a fresh device pool, as after a restart. Reported: KV bytes, restore
// time and GB/s (the tier's own restore time, and the whole first turn, which also computes the
// last partial block), and the speedup over re-prefill. Outputs must match; the bench checks
// that the first generated token is the same in every mode.
// With --repeat N every restore (and file read) runs N times and the fastest is reported: on a
// shared machine the minimum is the cost, the rest is waiting for a core.
// The floor for the SSD rows: the same block files read with plain preads (as many threads as
// the tier's readers, no checks, into a reused buffer), with the files cached and dropped.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/backend_choice.h"
#include "cli/model_setup.h"
#include "engine/session.h"

namespace tern::cli {
namespace {
namespace fs = std::filesystem;

struct BenchKvArgs {
  std::string model;
  std::string backend = "cpu";
  int act_bits = 16;        // --act-bits (cli/backend_choice.h)
  std::string prefixes = "1024,8192,30000";
  std::string dir = "/tmp/tern-bench-kv";
  int threads = 0;
  int readers = 4;
  int repeat = 1;
};

struct Mode {
  const char* name;
  double turn_seconds = 0;     // the whole first turn (restore + the last partial block + 1 token)
  double restore_seconds = 0;  // the tier's restore time alone
  uint64_t restored_bytes = 0;
  int restored_tokens = 0;
  int32_t first_token = -1;
};

std::vector<int32_t> prompt_ids(int n) {
  std::vector<int32_t> ids(n);
  uint32_t x = 12345;
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    ids[i] = static_cast<int32_t>((x >> 8) % 20000) + 100;
  }
  return ids;
}

// Drops the tier's files from the page cache (they are clean: written and fsynced).
void drop_page_cache(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Reads every block file under `dir` with plain preads, `threads` at a time; returns seconds.
double read_files_seconds(const std::string& dir, int threads, uint64_t& bytes) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec))
    if (e.path().extension() == ".kvb") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> total{0};
  auto work = [&] {
    std::vector<uint8_t> buf(4 << 20);
    for (size_t i; (i = next.fetch_add(1)) < files.size();) {
      const int fd = ::open(files[i].c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      for (off_t off = 0;;) {
        const ssize_t got = ::pread(fd, buf.data(), buf.size(), off);
        if (got <= 0) break;
        off += got;
        total += static_cast<uint64_t>(got);
      }
      ::close(fd);
    }
  };
  const double t0 = now_seconds();
  std::vector<std::thread> helpers;
  for (int t = 1; t < threads; ++t) helpers.emplace_back(work);
  work();
  for (std::thread& h : helpers) h.join();
  bytes = total;
  return now_seconds() - t0;
}

int run_bench_kv(const BenchKvArgs& a) {
  std::vector<int> lengths;
  std::stringstream ss(a.prefixes);
  for (std::string item; std::getline(ss, item, ',');) lengths.push_back(std::stoi(item));
  int max_len = 0;
  for (int n : lengths) max_len = std::max(max_len, n);

  ModelSetupOptions so;
  so.path = a.model.empty() ? default_model_path() : a.model;
  so.backend = a.backend;
  so.act_bits = a.act_bits;
  so.n_threads = a.threads;
  so.n_ctx = max_len + 64;  // beyond the native window the model applies YaRN
  so.need_tokenizer = false;
  auto loaded = load_for_inference(so);
  if (!loaded.is_ok()) {
    std::fprintf(stderr, "tern bench kv: %s\n", loaded.status().message().c_str());
    return 1;
  }
  LoadedModel& lm = loaded.value();
  const KvPoolConfig base = lm.kv->config();
  lm.kv.reset();
  const size_t bytes_per_token = 2 * static_cast<size_t>(base.n_layers) * row_bytes(base.dtype, int64_t{base.n_kv_heads} * base.head_dim);
  std::printf("tern bench kv: %s, %s backend, %d threads, context %d, KV %s, %zu bytes/token\n", so.path.c_str(),
              a.backend.c_str(), lm.n_threads, lm.model->n_ctx(), std::string(dtype_name(base.dtype)).c_str(), bytes_per_token);
  std::printf("%8s %9s %11s | %-12s %10s %9s %10s %8s\n", "prefix", "KV MB", "prefill s", "restore from", "turn ms",
              "tier ms", "tier GB/s", "speedup");

  for (int n : lengths) {
    const std::string dir = a.dir + "/" + std::to_string(n);
    std::error_code ec;
    fs::remove_all(dir, ec);
    const std::vector<int32_t> prompt = prompt_ids(n);
    KvPoolConfig kc = base;
    kc.n_blocks = (n + 64) / kc.block_tokens + 2;
    KvTierOptions to;
    to.model_id = "bench";
    to.model_fingerprint = lm.model->config().fingerprint;
    to.disk_dir = dir;
    to.disk_bytes = 1ull << 40;
    to.disk_max_pending_bytes = 1ull << 40;  // the bench wants every block on disk
    to.disk_readers = a.readers;
    GenerateOptions g;
    g.max_tokens = 1;

    // A running server's pool memory has long been touched; a fresh one would charge the
    // restore with first-touch page faults (about a quarter of the time here), so fault it in.
    auto prefault = [&](KvPool& pool) {
      const std::vector<uint8_t> zeros(pool.block_payload_bytes());
      for (int32_t b = 0; b < pool.n_blocks(); ++b) pool.copy_block_from_host(zeros.data(), b);
    };
    // One first turn on `pool`. Repetitions keep the fastest restore (the machine is shared:
    // the minimum is the cost, the rest is waiting for a core) and the worst check.
    auto turn = [&](KvPool& pool, Mode& best) -> bool {
      Session s(*lm.model, pool);
      const KvTierStats before = pool.tiers() ? pool.tiers()->stats() : KvTierStats{};
      auto r = s.generate(prompt, g);
      if (!r.is_ok()) {
        std::fprintf(stderr, "tern bench kv: %s\n", r.status().message().c_str());
        return false;
      }
      Mode m{best.name};
      m.turn_seconds = r->stats.prefill_seconds;
      m.restored_tokens = r->stats.restored_tokens;
      m.first_token = r->tokens.empty() ? -1 : r->tokens[0];
      if (pool.tiers()) {
        m.restore_seconds = pool.tiers()->stats().restore_seconds - before.restore_seconds;
        m.restored_bytes = pool.tiers()->stats().restored_bytes - before.restored_bytes;
      }
      const bool first_rep = best.first_token == -1 && best.turn_seconds == 0;
      const bool consistent = first_rep || (m.first_token == best.first_token && m.restored_tokens == best.restored_tokens);
      if (first_rep || m.restore_seconds < best.restore_seconds) {
        best = m;
      }
      if (!consistent) best.first_token = -2;  // reported as a mismatch
      return true;
    };

    // 1. Cold compute, with write-behind to the SSD and a host tier large enough for all.
    Mode prefill{"(re-prefill)"}, host{"host RAM"}, warm{"SSD, cached"}, cold{"SSD, dropped"};
    {
      KvTierOptions o = to;
      o.host_bytes = 1ull << 40;
      auto pool = std::move(KvPool::create(*lm.backend, kc)).value();
      pool->enable_tiers(o);
      if (!turn(*pool, prefill)) return 1;
      pool->tiers()->disk()->flush();
      // 2. Spill everything to host RAM by taking every device block, then restore.
      for (int rep = 0; rep < a.repeat; ++rep) {
        std::vector<int32_t> held;
        while (auto b = pool->allocate()) held.push_back(*b);
        for (int32_t b : held) pool->release(b);
        if (!turn(*pool, host)) return 1;
      }
    }
    // 3 and 4. Fresh pools on the same directory, as after a restart.
    for (int rep = 0; rep < a.repeat; ++rep) {
      for (Mode* m : {&cold, &warm}) {
        if (m == &cold) drop_page_cache(dir);
        auto pool = std::move(KvPool::create(*lm.backend, kc)).value();
        prefault(*pool);
        pool->enable_tiers(to);
        if (!turn(*pool, *m)) return 1;
      }
    }
    // The file-read floor, cached then dropped.
    uint64_t read_bytes = 0;
    double read_cached_s = 1e30, read_dropped_s = 1e30;
    for (int rep = 0; rep < a.repeat; ++rep) {
      read_cached_s = std::min(read_cached_s, read_files_seconds(dir, a.readers, read_bytes));
      drop_page_cache(dir);
      read_dropped_s = std::min(read_dropped_s, read_files_seconds(dir, a.readers, read_bytes));
    }
    const double kv_mb = static_cast<double>(n) * static_cast<double>(bytes_per_token) / 1e6;
    bool first = true;
    for (const Mode* m : {&host, &warm, &cold}) {
      const double gbps = m->restore_seconds > 0 ? static_cast<double>(m->restored_bytes) / m->restore_seconds / 1e9 : 0;
      if (first) std::printf("%8d %9.1f %11.2f |", n, kv_mb, prefill.turn_seconds);
      else std::printf("%8s %9s %11s |", "", "", "");
      first = false;
      std::printf(" %-12s %10.1f %9.1f %10.2f %7.0fx%s\n", m->name, m->turn_seconds * 1e3, m->restore_seconds * 1e3, gbps,
                  m->turn_seconds > 0 ? prefill.turn_seconds / m->turn_seconds : 0.0,
                  m->first_token == prefill.first_token && m->restored_tokens >= n / kc.block_tokens * kc.block_tokens - kc.block_tokens
                      ? ""
                      : "  MISMATCH (first token or restored tokens)");
    }
    for (const auto& [name, sec] : {std::pair{"read, cached", read_cached_s}, std::pair{"read, dropped", read_dropped_s}}) {
      std::printf("%8s %9s %11s | %-12s %10s %9.1f %10.2f\n", "", "", "", name, "", sec * 1e3,
                  sec > 0 ? static_cast<double>(read_bytes) / sec / 1e9 : 0.0);
    }
    std::fflush(stdout);
    fs::remove_all(dir, ec);
  }
  return 0;
}

}  // namespace

void register_bench_kv(CLI::App& bench, CommandRunner* runner) {
  auto a = std::make_shared<BenchKvArgs>();
  auto* cmd = bench.add_subcommand("kv", "KV tier restore (host RAM, SSD warm and cold) against re-prefill");
  cmd->add_option("-m,--model", a->model, "GGUF model (default: the default model)");
  add_backend_flags(*cmd, a->backend, a->act_bits);
  cmd->add_option("--prefixes", a->prefixes, "prefix lengths in tokens, comma-separated (default 1024,8192,30000)");
  cmd->add_option("--dir", a->dir, "scratch directory for the SSD tier (default /tmp/tern-bench-kv)");
  cmd->add_option("-t,--threads", a->threads, "threads (default: all cores)")->check(CLI::NonNegativeNumber);
  cmd->add_option("-r,--repeat", a->repeat, "restores per mode; the fastest is reported (default 1)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--readers", a->readers, "SSD reads in flight during a restore (default 4)")->check(CLI::PositiveNumber);
  cmd->callback([runner, a] { *runner = [a] { return run_bench_kv(*a); }; });
}

}  // namespace tern::cli
