// MappedFile: open + fstat + mmap(PROT_READ, MAP_PRIVATE), madvise with page rounding.
#include "core/mmap.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace dsv4 {

MappedFile::~MappedFile() {
  if (data_ != nullptr) munmap(data_, static_cast<size_t>(size_));
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(data_, static_cast<size_t>(size_));
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

StatusOr<MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    return error(e == ENOENT ? StatusCode::not_found : StatusCode::invalid_argument,
                 "{}: cannot open: {}", path, std::strerror(e));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return error(StatusCode::invalid_argument, "{}: cannot stat: {}", path, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return error(StatusCode::invalid_argument, "{}: not a regular file", path);
  }
  MappedFile m;
  m.path_ = path;
  m.size_ = static_cast<int64_t>(st.st_size);
  if (m.size_ > 0) {
    void* p = mmap(nullptr, static_cast<size_t>(m.size_), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      return error(StatusCode::resource_exhausted, "{}: mmap of {} bytes failed: {}", path, m.size_,
                   std::strerror(e));
    }
    m.data_ = static_cast<uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file referenced
  return m;
}

Status MappedFile::advise(int64_t offset, int64_t length, MapAdvice advice) const {
  if (data_ == nullptr || length <= 0 || offset >= size_) return ok_status();
  if (offset < 0) offset = 0;
  if (length > size_ - offset) length = size_ - offset;
  const int64_t page = sysconf(_SC_PAGESIZE);
  const int64_t begin = offset / page * page;  // the mapping itself starts page-aligned
  const int64_t end = offset + length;
  int flag = MADV_NORMAL;
  switch (advice) {
    case MapAdvice::normal: flag = MADV_NORMAL; break;
    case MapAdvice::sequential: flag = MADV_SEQUENTIAL; break;
    case MapAdvice::random: flag = MADV_RANDOM; break;
    case MapAdvice::willneed: flag = MADV_WILLNEED; break;
    case MapAdvice::dontneed: flag = MADV_DONTNEED; break;
  }
  if (madvise(data_ + begin, static_cast<size_t>(end - begin), flag) != 0) {
    return error(StatusCode::unavailable, "{}: madvise failed: {}", path_, std::strerror(errno));
  }
  return ok_status();
}

Status MappedFile::advise_bytes(const void* ptr, int64_t length, MapAdvice advice) const {
  auto p = static_cast<const uint8_t*>(ptr);
  if (data_ == nullptr || p < data_ || p > data_ + size_) {
    return error(StatusCode::invalid_argument, "{}: advise range is outside the mapping", path_);
  }
  return advise(static_cast<int64_t>(p - data_), length, advice);
}

}  // namespace dsv4
