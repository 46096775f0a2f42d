// Staged reads against the bytes themselves: every run arrives whole at its place through buffers smaller
// than the runs, file-backed runs are read from the file (not the mapping) in file order, and a truncated
// file is named.
#include "core/staged_reader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "core/mmap.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

// Copies each chunk out of its buffer into an image per tag, recording the order of file offsets seen.
class ImageSink final : public StageSink {
 public:
  explicit ImageSink(std::vector<std::vector<uint8_t>>& images) : images_(images) {}
  Status wait(int) override { return ok_status(); }
  Status consume(int b, const ReadJob& job, int64_t offset, int64_t n) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::memcpy(images_[job.tag].data() + offset, buffers->at(b).data, static_cast<size_t>(n));
    if (job.file) offsets.push_back(job.file->offset + offset);
    return ok_status();
  }
  Status finish() override { return ok_status(); }
  const std::vector<StageBuffer>* buffers = nullptr;
  std::vector<int64_t> offsets;

 private:
  std::mutex mu_;
  std::vector<std::vector<uint8_t>>& images_;
};

std::string temp_file(const std::string& name, const std::vector<uint8_t>& bytes) {
  const fs::path p = fs::temp_directory_path() / ("dsv4_staged_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return p.string();
}

TEST(StagedReader, RunsArriveWholeInFileOrder) {
  std::vector<uint8_t> data(1 << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  const std::string path = temp_file("order", data);
  auto m = MappedFile::open(path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  std::vector<uint8_t> memory(5000, 7);
  // Three runs of the file given out of order, one of memory; buffers of 4096 bytes, so runs span many chunks.
  const std::vector<std::pair<int64_t, int64_t>> runs = {{700000, 100000}, {3, 250001}, {300000, 4096}};
  std::vector<ReadJob> jobs;
  std::vector<std::vector<uint8_t>> images;
  for (const auto& [at, n] : runs) {
    jobs.push_back({m->data() + at, n, FileSpan{&*m, at}, images.size()});
    images.emplace_back(n);
  }
  jobs.push_back({memory.data(), static_cast<int64_t>(memory.size()), std::nullopt, images.size()});
  images.emplace_back(memory.size());
  std::vector<std::vector<uint8_t>> storage(3, std::vector<uint8_t>(4096));
  std::vector<StageBuffer> buffers;
  for (auto& s : storage) buffers.push_back({s.data(), static_cast<int64_t>(s.size())});
  ImageSink sink(images);
  sink.buffers = &buffers;
  StageOptions o;
  o.threads = 1;  // one reader: its chunks arrive in the order they are read
  auto stats = stage_reads(jobs, buffers, sink, o);
  ASSERT_TRUE(stats.ok()) << stats.status().to_string();
  for (size_t r = 0; r < runs.size(); ++r)
    EXPECT_EQ(0, std::memcmp(images[r].data(), data.data() + runs[r].first, runs[r].second)) << "run " << r;
  EXPECT_EQ(images[3], memory);
  EXPECT_EQ(stats->file_bytes, 100000 + 250001 + 4096);
  EXPECT_EQ(stats->memory_bytes, 5000);
  EXPECT_EQ(stats->by_file.at(path), stats->file_bytes);
  EXPECT_TRUE(std::is_sorted(sink.offsets.begin(), sink.offsets.end())) << "file runs are read in offset order";
  // Several readers: the same bytes.
  for (auto& im : images) std::fill(im.begin(), im.end(), 0);
  o.threads = 3;
  ASSERT_TRUE(stage_reads(jobs, buffers, sink, o).ok());
  for (size_t r = 0; r < runs.size(); ++r)
    EXPECT_EQ(0, std::memcmp(images[r].data(), data.data() + runs[r].first, runs[r].second)) << "run " << r;
  fs::remove(path);
}

TEST(StagedReader, ATruncatedFileIsNamed) {
  std::vector<uint8_t> data(10000, 1);
  const std::string path = temp_file("short", data);
  auto m = MappedFile::open(path);
  ASSERT_TRUE(m.ok());
  std::vector<std::vector<uint8_t>> images(1, std::vector<uint8_t>(4000));
  fs::resize_file(path, 6000);  // the run [5000, 9000) now ends past the file
  std::vector<uint8_t> storage(1024);
  std::vector<StageBuffer> buffers{{storage.data(), 1024}};
  ImageSink sink(images);
  sink.buffers = &buffers;
  auto r = stage_reads({{m->data() + 5000, 4000, FileSpan{&*m, 5000}, 0}}, buffers, sink);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status().message();
  fs::remove(path);
}

}  // namespace
}  // namespace dsv4
