// stage_reads: chunks of byte runs read by a few threads into the sink's staging buffers (see staged_reader.h).
#include "core/staged_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/mmap.h"

namespace dsv4 {
namespace {

struct Chunk {
  size_t job = 0;
  int64_t offset = 0;  // within the job
  int64_t n = 0;
};

// Open descriptors of the files the jobs read, closed on destruction.
class Files {
 public:
  ~Files() {
    for (auto& [p, fd] : fds_) ::close(fd);
  }
  StatusOr<int> fd(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = fds_.find(path); it != fds_.end()) return it->second;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return error(StatusCode::unavailable, "{}: cannot open for reading: {}", path, std::strerror(errno));
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    fds_.emplace(path, fd);
    return fd;
  }

 private:
  std::mutex mu_;
  std::map<std::string, int> fds_;
};

Status read_fully(int fd, const std::string& path, uint8_t* out, int64_t n, int64_t at) {
  int64_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, out + done, static_cast<size_t>(n - done), at + done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return error(StatusCode::data_loss, "{}: read of {} bytes at offset {} failed: {}", path, n, at, std::strerror(errno));
    if (r == 0)
      return error(StatusCode::data_loss, "{}: file ends at offset {}, {} more bytes were expected (truncated?)", path,
                   at + done, n - done);
    done += r;
  }
  return ok_status();
}

}  // namespace

Status read_job(const ReadJob& job, void* dst) {
  if (!job.file) {
    std::memcpy(dst, job.src, static_cast<size_t>(job.bytes));
    return ok_status();
  }
  Files files;
  const std::string& path = job.file->file->path();
  DSV4_ASSIGN_OR_RETURN(int fd, files.fd(path));
  constexpr int64_t kPiece = int64_t{256} << 20;
  for (int64_t off = 0; off < job.bytes; off += kPiece) {
    const int64_t n = std::min(kPiece, job.bytes - off);
    DSV4_RETURN_IF_ERROR(read_fully(fd, path, static_cast<uint8_t*>(dst) + off, n, job.file->offset + off));
  }
  return ok_status();
}

StatusOr<StageStats> stage_reads(std::vector<ReadJob> jobs, std::span<const StageBuffer> buffers, StageSink& sink,
                                 const StageOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  if (buffers.empty()) return error(StatusCode::invalid_argument, "stage_reads: no staging buffers");
  int64_t cap = buffers[0].capacity;
  for (const StageBuffer& b : buffers) cap = std::min(cap, b.capacity);
  if (cap <= 0) return error(StatusCode::invalid_argument, "stage_reads: an empty staging buffer");
  // File-backed jobs in (file, offset) order, then the memory ones in their given order.
  std::stable_sort(jobs.begin(), jobs.end(), [](const ReadJob& a, const ReadJob& b) {
    if (a.file.has_value() != b.file.has_value()) return a.file.has_value();
    if (!a.file) return false;
    if (a.file->file != b.file->file) return a.file->file->path() < b.file->file->path();
    return a.file->offset < b.file->offset;
  });
  std::vector<Chunk> chunks;
  StageProgress progress;
  for (size_t j = 0; j < jobs.size(); ++j) {
    for (int64_t off = 0; off < jobs[j].bytes; off += cap) chunks.push_back({j, off, std::min(cap, jobs[j].bytes - off)});
    progress.bytes_total += jobs[j].bytes;
  }
  const int nb = static_cast<int>(buffers.size());
  const int threads = std::clamp(options.threads, 1, nb);
  Files files;
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;  // guards status, stats, progress
  Status status;
  StageStats stats;
  auto fail = [&](Status s) {
    std::lock_guard<std::mutex> lock(mu);
    if (status.ok()) status = std::move(s);
    failed = true;
  };
  auto reader = [&](int t) {
    int turn = 0;  // this thread's buffers: t, t + threads, ...
    const int mine = (nb - t + threads - 1) / threads;
    while (!failed) {
      const size_t c = next.fetch_add(1);
      if (c >= chunks.size()) return;
      const Chunk& k = chunks[c];
      const ReadJob& job = jobs[k.job];
      const int b = t + threads * (turn++ % mine);
      if (Status s = sink.wait(b); !s.ok()) return fail(std::move(s));
      if (job.file) {
        const std::string& path = job.file->file->path();
        auto fd = files.fd(path);
        if (!fd.ok()) return fail(fd.status());
        const int64_t at = job.file->offset + k.offset;
        if (Status s = read_fully(*fd, path, buffers[b].data, k.n, at); !s.ok()) return fail(std::move(s));
        if (options.drop_cache) ::posix_fadvise(*fd, at, k.n, POSIX_FADV_DONTNEED);
      } else {
        std::memcpy(buffers[b].data, static_cast<const uint8_t*>(job.src) + k.offset, static_cast<size_t>(k.n));
      }
      if (Status s = sink.consume(b, job, k.offset, k.n); !s.ok()) return fail(std::move(s));
      std::lock_guard<std::mutex> lock(mu);
      if (job.file) {
        stats.file_bytes += k.n;
        stats.by_file[job.file->file->path()] += k.n;
      } else {
        stats.memory_bytes += k.n;
      }
      progress.bytes_done += k.n;
      if (options.progress) options.progress(progress);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(reader, t);
  reader(0);
  for (std::thread& th : pool) th.join();
  Status done = sink.finish();
  if (!status.ok()) return status;
  DSV4_RETURN_IF_ERROR(done);
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return stats;
}

}  // namespace dsv4
