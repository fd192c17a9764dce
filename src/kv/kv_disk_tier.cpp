#include "kv/kv_disk_tier.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "kv/kv_checksum.h"

namespace tern {
namespace fs = std::filesystem;
namespace {

constexpr const char* kBlockSuffix = ".kvb";
constexpr const char* kTempSuffix = ".tmp";
constexpr size_t kWriteBatch = 16;  // blocks written before their fsyncs: lets the FS coalesce

std::string hash_hex(BlockHash h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

bool parse_hex(std::string_view s, uint64_t& out) {
  if (s.size() != 16) return false;
  out = 0;
  for (char c : s) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    out = out << 4 | static_cast<uint64_t>(d);
  }
  return true;
}

// Closes a descriptor on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// preadv into `segs` from `offset` until they are full or the file ends; returns the bytes read
// (-1 on an error).
ssize_t read_segments(int fd, std::span<const HostSegment> segs, off_t offset) {
  std::vector<iovec> iov;
  iov.reserve(segs.size());
  for (const HostSegment& s : segs) iov.push_back({s.data, s.bytes});
  size_t first = 0;
  ssize_t total = 0;
  while (first < iov.size()) {
    const int n_iov = static_cast<int>(std::min<size_t>(iov.size() - first, IOV_MAX));
    const ssize_t got = ::preadv(fd, iov.data() + first, n_iov, offset);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return -1;
    if (got == 0) break;  // end of file
    offset += got;
    total += got;
    size_t left = static_cast<size_t>(got);
    while (first < iov.size() && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (left > 0) {
      iov[first].iov_base = static_cast<uint8_t*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return total;
}

// write until done; returns 0 or the errno.
int write_full(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t put = ::write(fd, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) return errno;
    if (put == 0) return EIO;
    p += put;
    n -= static_cast<size_t>(put);
  }
  return 0;
}

const char* fault_kind(int err) {
  switch (err) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG: return "disk full";
    case EROFS:
    case EACCES:
    case EPERM: return "directory not writable";
    default: return "I/O error";
  }
}

}  // namespace

KvDiskTier::KvDiskTier(KvDiskTierOptions options, const KvTierIdentity& identity, std::string path)
    : options_(std::move(options)), identity_(identity), path_(std::move(path)),
      header_bytes_(block_header_bytes(identity.block_tokens)) {
  if (!options_.warn) options_.warn = [](const std::string& m) { std::fprintf(stderr, "tern: %s\n", m.c_str()); };
}

Result<std::unique_ptr<KvDiskTier>> KvDiskTier::open(KvDiskTierOptions options, const KvTierIdentity& identity) {
  if (options.dir.empty()) return error("disk cache directory: expected a path, got an empty string");
  const std::string path = (fs::path(options.dir) / identity.directory_name()).string();
  std::unique_ptr<KvDiskTier> tier(new KvDiskTier(std::move(options), identity, path));
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec && !fs::is_directory(path)) {
    return error("disk cache directory '" + path + "': cannot be created (" + ec.message() + ")");
  }
  // Probe once: a read-only directory is found now, not on the first block.
  int err = tier->fault(DiskOp::kProbe);
  if (err == 0) {
    const std::string probe = path + "/probe." + std::to_string(::getpid()) + kTempSuffix;
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      err = errno;
    } else {
      ::close(fd);
      ::unlink(probe.c_str());
    }
  }
  if (err != 0) tier->disable_writes(err, "creating a file");
  tier->scan();
  tier->writer_ = std::thread([t = tier.get()] { t->writer_loop(); });
  return tier;
}

KvDiskTier::~KvDiskTier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

std::string KvDiskTier::file_path(BlockHash hash) const { return path_ + "/" + hash_hex(hash) + kBlockSuffix; }

int KvDiskTier::fault(DiskOp op) const { return options_.fault_errno ? options_.fault_errno(op) : 0; }

bool KvDiskTier::writable() const {
  std::lock_guard<std::mutex> lock(mu_);
  return writable_;
}

bool KvDiskTier::contains(BlockHash hash) const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.count(hash) != 0 || pending_.count(hash) != 0;
}

size_t KvDiskTier::n_files() const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.size();
}

uint64_t KvDiskTier::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

KvDiskTierStats KvDiskTier::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void KvDiskTier::disable_writes(int err, const char* step) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!writable_) return;
    writable_ = false;
    stats_.writes_dropped += queue_.size();
    for (const KvBlobPtr& b : queue_) {
      pending_.erase(b->key.hash);
      pending_bytes_ -= b->payload.size();
    }
    queue_.clear();
  }
  idle_cv_.notify_all();
  options_.warn("kv disk cache " + path_ + ": " + fault_kind(err) + " (" + std::strerror(err) + " while " + step +
                "); writes are off, the blocks already on disk are still served");
}

void KvDiskTier::reject(BlockHash hash, const std::string& file, const std::string& reason) {
  options_.warn("kv disk cache: dropping " + file + ": " + reason);
  ::unlink(file.c_str());
  std::lock_guard<std::mutex> lock(mu_);
  index_erase_locked(hash);
  ++stats_.files_rejected;
}

void KvDiskTier::index_insert_locked(BlockHash hash, uint64_t bytes) {
  if (index_.count(hash)) return;
  lru_.push_back(hash);
  index_[hash] = Entry{bytes, std::prev(lru_.end())};
  bytes_ += bytes;
}

void KvDiskTier::index_erase_locked(BlockHash hash) {
  auto it = index_.find(hash);
  if (it == index_.end()) return;
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  index_.erase(it);
}

void KvDiskTier::evict_to_cap_locked() {
  while (bytes_ > options_.max_bytes && !lru_.empty()) {
    const BlockHash victim = lru_.front();
    ::unlink(file_path(victim).c_str());
    index_erase_locked(victim);
    ++stats_.files_evicted;
  }
}

void KvDiskTier::scan() {
  struct Found {
    fs::file_time_type mtime;
    BlockHash hash;
    uint64_t bytes;
  };
  std::vector<Found> found;
  std::vector<uint8_t> header(header_bytes_);
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(path_, ec)) {
    const std::string name = e.path().filename().string();
    const std::string file = e.path().string();
    if (name.ends_with(kTempSuffix)) {
      // "<hash>.<pid>.<n>.tmp" or "probe.<pid>.tmp": remove it unless a live process is writing it.
      const size_t a = name.find('.');
      const size_t b = a == std::string::npos ? a : name.find('.', a + 1);
      const long pid = b == std::string::npos ? 0 : std::strtol(name.c_str() + a + 1, nullptr, 10);
      if (pid <= 0 || pid == ::getpid() || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH))
        ::unlink(file.c_str());
      continue;
    }
    if (!name.ends_with(kBlockSuffix)) continue;
    uint64_t name_hash = 0;
    if (!parse_hex(std::string_view(name).substr(0, name.size() - std::strlen(kBlockSuffix)), name_hash)) {
      reject(0, file, "file name: expected <16 hex digits>.kvb");
      continue;
    }
    Fd fd{::open(file.c_str(), O_RDONLY | O_CLOEXEC)};
    struct stat st {};
    if (fd.fd < 0 || ::fstat(fd.fd, &st) != 0) {
      reject(name_hash, file, std::string("unreadable: ") + std::strerror(errno));
      continue;
    }
    const ssize_t got = ::pread(fd.fd, header.data(), header.size(), 0);
    auto h = decode_block_header(std::span<const uint8_t>(header.data(), got > 0 ? static_cast<size_t>(got) : 0), identity_);
    if (!h.is_ok()) {
      reject(name_hash, file, h.status().message());
      continue;
    }
    const uint64_t want = header_bytes_ + h->payload_bytes;
    if (static_cast<uint64_t>(st.st_size) != want) {
      reject(name_hash, file, "file size: expected " + std::to_string(want) + " bytes, found " + std::to_string(st.st_size) +
                                  (static_cast<uint64_t>(st.st_size) < want ? " (truncated)" : ""));
      continue;
    }
    if (h->key.hash != name_hash) {
      reject(name_hash, file, "block hash: expected " + hash_hex(name_hash) + " (the file name), found " + hash_hex(h->key.hash));
      continue;
    }
    found.push_back({e.last_write_time(ec), name_hash, static_cast<uint64_t>(st.st_size)});
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  std::lock_guard<std::mutex> lock(mu_);
  for (const Found& f : found) index_insert_locked(f.hash, f.bytes);
  stats_.files_indexed_at_open = index_.size();
  if (writable_) evict_to_cap_locked();
}

void KvDiskTier::enqueue(KvBlobPtr blob) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const BlockHash h = blob->key.hash;
    if (index_.count(h) || pending_.count(h)) return;
    if (!writable_ || pending_bytes_ + blob->payload.size() > options_.max_pending_bytes) {
      ++stats_.writes_dropped;
      return;
    }
    pending_.insert(h);
    pending_bytes_ += blob->payload.size();
    queue_.push_back(std::move(blob));
  }
  work_cv_.notify_one();
}

KvBlobPtr KvDiskTier::queued(const BlockKey& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!pending_.count(key.hash)) return nullptr;
  for (const KvBlobPtr& b : queue_)  // bounded by max_pending_bytes; a rare path
    if (b->key == key) return b;
  return nullptr;  // being written right now: read() finds it once renamed, else a miss
}

void KvDiskTier::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return pending_.empty(); });
}

void KvDiskTier::writer_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || !queue_.empty() || !touched_.empty(); });
    if (!touched_.empty()) {
      std::vector<BlockHash> touched;
      touched.swap(touched_);
      lock.unlock();
      for (BlockHash h : touched) ::utimensat(AT_FDCWD, file_path(h).c_str(), nullptr, 0);
      lock.lock();
      continue;
    }
    if (queue_.empty()) break;  // stop_ and nothing left: queued writes are finished first
    std::vector<KvBlobPtr> batch;
    while (!queue_.empty() && batch.size() < kWriteBatch) {
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    lock.unlock();
    write_batch(batch);
    lock.lock();
    for (const KvBlobPtr& b : batch) {
      // disable_writes may already have released a dropped queue; these were taken before it.
      if (pending_.erase(b->key.hash)) pending_bytes_ -= b->payload.size();
    }
    idle_cv_.notify_all();
  }
}

void KvDiskTier::write_batch(const std::vector<KvBlobPtr>& batch) {
  struct Pending {
    const KvBlockBlob* blob;
    std::string temp;
    int fd;
  };
  std::vector<Pending> open_files;
  int err = 0;
  const char* step = "";
  auto fail = [&](int e, const char* s) {
    if (err == 0) {
      err = e;
      step = s;
    }
  };
  const uint64_t seg = identity_.segment_bytes();
  for (const KvBlobPtr& blob : batch) {
    if (err != 0) break;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!writable_) return;
    }
    TERN_CHECK(blob->payload.size() == identity_.block_payload_bytes());
    // The checksum goes segment by segment, exactly as read() verifies it.
    KvChecksum sum;
    for (uint64_t off = 0; off < blob->payload.size(); off += seg) sum.update(blob->payload.data() + off, seg);
    const std::vector<uint8_t> header = encode_block_header(identity_, blob->key, sum.digest());
    uint64_t seq;
    {
      std::lock_guard<std::mutex> lock(mu_);
      seq = temp_seq_++;
    }
    std::string temp = path_ + "/" + hash_hex(blob->key.hash) + "." + std::to_string(::getpid()) + "." + std::to_string(seq) + kTempSuffix;
    int e = fault(DiskOp::kCreate);
    const int fd = e != 0 ? -1 : ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      fail(e != 0 ? e : errno, "creating a block file");
      break;
    }
    open_files.push_back({blob.get(), temp, fd});
    if ((e = fault(DiskOp::kWrite)) == 0) e = write_full(fd, header.data(), header.size());
    if (e == 0) e = write_full(fd, blob->payload.data(), blob->payload.size());
    if (e != 0) fail(e, "writing a block file");
  }
  for (Pending& p : open_files) {
    if (err == 0) {
      int e = fault(DiskOp::kSync);
      if (e == 0 && ::fsync(p.fd) != 0) e = errno;
      if (e != 0) fail(e, "syncing a block file");
    }
    ::close(p.fd);
  }
  for (Pending& p : open_files) {
    if (err == 0) {
      const std::string final_path = file_path(p.blob->key.hash);
      int e = fault(DiskOp::kRename);
      if (e == 0 && ::rename(p.temp.c_str(), final_path.c_str()) != 0) e = errno;
      if (e == 0) {
        std::lock_guard<std::mutex> lock(mu_);
        index_insert_locked(p.blob->key.hash, header_bytes_ + p.blob->payload.size());
        ++stats_.files_written;
        evict_to_cap_locked();
        continue;
      }
      fail(e, "renaming a block file");
    }
    ::unlink(p.temp.c_str());
  }
  if (err != 0) disable_writes(err, step);
}

bool KvDiskTier::read(const BlockKey& key, std::span<const HostSegment> dst) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!index_.count(key.hash)) return false;
  }
  const std::string file = file_path(key.hash);
  Fd fd{::open(file.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) {
    if (errno == ENOENT) {  // another process sharing the directory evicted it: a plain miss
      std::lock_guard<std::mutex> lock(mu_);
      index_erase_locked(key.hash);
    } else {
      reject(key.hash, file, std::string("unreadable: ") + std::strerror(errno));
    }
    return false;
  }
  // One preadv for header, payload (straight into dst) and one byte past the end, which must
  // stay empty: the whole file is checked with a single system call.
  uint64_t payload_bytes = 0;
  for (const HostSegment& seg : dst) payload_bytes += seg.bytes;
  std::vector<uint8_t> header(header_bytes_ + 1);
  std::vector<HostSegment> segs;
  segs.reserve(dst.size() + 2);
  segs.push_back({header.data(), header_bytes_});
  segs.insert(segs.end(), dst.begin(), dst.end());
  segs.push_back({header.data() + header_bytes_, 1});
  const ssize_t got = read_segments(fd.fd, segs, 0);
  if (got < 0) {
    reject(key.hash, file, std::string("unreadable: ") + std::strerror(errno));
    return false;
  }
  const uint64_t want = header_bytes_ + payload_bytes;
  auto h = decode_block_header(std::span<const uint8_t>(header.data(), std::min<size_t>(static_cast<size_t>(got), header_bytes_)), identity_);
  if (!h.is_ok()) {
    reject(key.hash, file, h.status().message());
    return false;
  }
  if (static_cast<uint64_t>(got) != want) {
    reject(key.hash, file, "file size: expected " + std::to_string(want) + " bytes, found " +
                               (static_cast<uint64_t>(got) < want ? std::to_string(got) + " (truncated)" : "more (trailing bytes)"));
    return false;
  }
  if (h->key != key) {
    // A valid file for another prefix under the same 64-bit hash (or a namespace mismatch): it
    // cannot seed this prompt. It is not damaged, so it stays.
    options_.warn("kv disk cache: " + file + " holds another prefix under the same hash (" +
                  (h->key.root != key.root ? "namespace" : h->key.parent != key.parent ? "parent" : "tokens or position") +
                  " differ); not restored");
    return false;
  }
  TERN_CHECK(payload_bytes == h->payload_bytes);  // the caller sized dst from the same identity
  KvChecksum sum;
  for (const HostSegment& s : dst) sum.update(s.data, s.bytes);
  if (sum.digest() != h->payload_checksum) {
    reject(key.hash, file, "payload checksum: expected " + hash_hex(h->payload_checksum) + ", found " + hash_hex(sum.digest()));
    return false;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key.hash); it != index_.end()) lru_.splice(lru_.end(), lru_, it->second.lru);
    ++stats_.reads;
    stats_.read_bytes += payload_bytes;
    // The modification time is the LRU order after a restart; the writer thread updates it, off
    // the serving path.
    if (writable_) touched_.push_back(key.hash);
  }
  work_cv_.notify_one();
  return true;
}

std::vector<uint8_t> KvDiskTier::read_many(std::span<const BlockKey> keys,
                                            std::span<const std::vector<HostSegment>> dsts) {
  TERN_CHECK(keys.size() == dsts.size());
  std::vector<uint8_t> ok(keys.size(), 0);
  std::atomic<size_t> next{0};
  // Blocks are claimed in chain order, so the first ones (which the prompt needs first, and
  // which end the run if they fail) finish first.
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < keys.size();) ok[i] = read(keys[i], dsts[i]);
  };
  const size_t n_threads = std::min<size_t>(static_cast<size_t>(std::max(1, options_.max_readers)), keys.size());
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < n_threads; ++t) {
    try {
      helpers.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // no thread to be had: fewer reads in flight, same result
    }
  }
  work();
  for (std::thread& h : helpers) h.join();
  return ok;
}

}  // namespace tern
