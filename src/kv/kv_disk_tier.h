// The SSD tier: one file per full KV block (kv_block_file.h) in DIR/<identity digest>/, LRU under a
// byte cap, written behind the serving path by one writer thread.
//
// Trust: nothing on disk is believed until checked. open() indexes only files whose header is
// intact and matches this model, tokenizer and KV layout; read() re-checks the header, the key
// (hash, parent, namespace root, position, token ids), the file size and the payload checksum.
// A file that fails any check is reported once through `warn` with the reason, deleted and
// treated as a miss.
// Crash safety: a block is written to "<hash>.<pid>.<n>.tmp", fsynced, then renamed to
// "<hash>.kvb", so a kill at any moment leaves either no entry or a complete one; temp files of
// dead writers are removed by the next open().
// Faults: a full disk or an unwritable directory turns writes off with one warning; reads of the
// files already there go on, and so does serving.
// Threads: read() runs on the engine thread (read_many adds short-lived reader threads), writes on
// the writer thread; the index is shared
// under a mutex. A process may share a directory with others (each has its own index; a file
// another one deleted is just a miss).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/status.h"
#include "kv/kv_block_file.h"
#include "kv/kv_host_tier.h"

namespace tern {

// Where a fault can be injected (tests): the errno the hook returns makes that step fail.
enum class DiskOp : uint8_t { kProbe, kCreate, kWrite, kSync, kRename };

struct KvDiskTierOptions {
  std::string dir;                                // root directory; the tier uses a subdirectory
  uint64_t max_bytes = 0;                         // byte cap over block files (LRU beyond it)
  uint64_t max_pending_bytes = 256ull << 20;      // write-behind queue; newer writes are dropped beyond it
  std::function<void(const std::string&)> warn;   // one line per event; default: stderr
  std::function<int(DiskOp)> fault_errno;         // tests: errno to fail `op` with, 0 = none
  int max_readers = 4;                            // threads reading one run of blocks (read_many)
};

struct KvDiskTierStats {
  uint64_t files_indexed_at_open = 0;  // valid files found by open()
  uint64_t files_written = 0;
  uint64_t files_rejected = 0;         // failed a check: warned, deleted
  uint64_t files_evicted = 0;          // removed by the byte cap
  uint64_t writes_dropped = 0;         // not written: queue full or writes disabled
  uint64_t reads = 0;                  // blocks restored
  uint64_t read_bytes = 0;
};

class KvDiskTier {
 public:
  // Creates DIR/<identity digest>/ if needed, removes temp files of dead writers and indexes the
  // valid block files (oldest modification first). Error only when the directory can neither be
  // created nor read; a read-only one opens with writes off and a warning.
  static Result<std::unique_ptr<KvDiskTier>> open(KvDiskTierOptions options, const KvTierIdentity& identity);
  ~KvDiskTier();  // finishes the queued writes
  KvDiskTier(const KvDiskTier&) = delete;
  KvDiskTier& operator=(const KvDiskTier&) = delete;

  const std::string& path() const { return path_; }
  bool writable() const;
  // True when the block is on disk or queued for writing.
  bool contains(BlockHash hash) const;
  // Queues a block for writing; never blocks. Dropped (counted) when writes are off, the queue
  // is over max_pending_bytes, or the block is already there.
  void enqueue(KvBlobPtr blob);
  // A block still queued for writing (null if none): a restore serves it from memory.
  KvBlobPtr queued(const BlockKey& key) const;
  // Reads the block for `key` into `dst` (segment sizes must match the identity's). False on a
  // miss or a bad file (then warned and deleted); dst may have been written either way.
  bool read(const BlockKey& key, std::span<const HostSegment> dst);
  // read() of keys[i] into dsts[i] for every i, up to max_readers at a time (the calling thread
  // is one of them): a cold restore of a long prefix keeps several reads in flight instead of
  // waiting out each file's latency in turn. ok[i] = read()'s result for keys[i].
  std::vector<uint8_t> read_many(std::span<const BlockKey> keys, std::span<const std::vector<HostSegment>> dsts);
  // Waits until every queued write is done (tests, benchmarks, shutdown).
  void flush();

  size_t n_files() const;
  uint64_t bytes() const;
  KvDiskTierStats stats() const;

 private:
  KvDiskTier(KvDiskTierOptions options, const KvTierIdentity& identity, std::string path);
  struct Entry {
    uint64_t bytes = 0;
    std::list<BlockHash>::iterator lru;
  };
  std::string file_path(BlockHash hash) const;
  void scan();
  void writer_loop();
  void write_batch(const std::vector<KvBlobPtr>& batch);
  int fault(DiskOp op) const;
  // Turns writes off with one warning that says why.
  void disable_writes(int err, const char* step);
  // Warns, deletes the file and forgets it. Caller must not hold mu_.
  void reject(BlockHash hash, const std::string& file, const std::string& reason);
  void index_insert_locked(BlockHash hash, uint64_t bytes);
  void index_erase_locked(BlockHash hash);
  void evict_to_cap_locked();

  KvDiskTierOptions options_;
  KvTierIdentity identity_;
  std::string path_;  // DIR/<identity digest>
  size_t header_bytes_ = 0;

  mutable std::mutex mu_;
  std::unordered_map<BlockHash, Entry> index_;
  std::list<BlockHash> lru_;  // front = least recently used
  uint64_t bytes_ = 0;
  std::deque<KvBlobPtr> queue_;
  std::unordered_set<BlockHash> pending_;  // queued or being written
  std::vector<BlockHash> touched_;         // restored files whose modification time is due
  uint64_t pending_bytes_ = 0;
  bool writable_ = true;
  bool stop_ = false;
  uint64_t temp_seq_ = 0;
  KvDiskTierStats stats_;
  std::condition_variable work_cv_;
  std::condition_variable idle_cv_;
  std::thread writer_;
};

}  // namespace tern
