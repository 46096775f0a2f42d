// TensorPrefetch: batches of tensors filled by helper threads ahead of the writer.
#include "family/deepseek_v41/synth_prefetch.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>

namespace dsv4::family {
namespace {

std::string_view stem(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? std::string_view(name) : std::string_view(name).substr(0, dot);
}

}  // namespace

TensorPrefetch::TensorPrefetch(std::vector<const TensorSpec*> tensors, const TensorSource& src,
                               std::function<int()> helpers, int64_t window)
    : tensors_(std::move(tensors)), src_(src), helpers_(std::move(helpers)), window_(window),
      buf_(tensors_.size()) {}

Status TensorPrefetch::fill(size_t k, int64_t offset, std::span<uint8_t> out) {
  DSV4_CHECK(k < tensors_.size());
  if (tensors_[k]->bytes() > window_) return src_.fill(*tensors_[k], offset, out);
  if (k < first_ || k >= end_) DSV4_RETURN_IF_ERROR(generate_from(k));
  std::vector<uint8_t>& b = buf_[k];
  DSV4_CHECK(offset >= 0 && offset + static_cast<int64_t>(out.size()) <= static_cast<int64_t>(b.size()));
  std::memcpy(out.data(), b.data() + offset, out.size());
  if (offset + static_cast<int64_t>(out.size()) == static_cast<int64_t>(b.size())) std::vector<uint8_t>().swap(b);
  return ok_status();
}

Status TensorPrefetch::generate_from(size_t k) {
  for (size_t i = first_; i < end_; ++i) std::vector<uint8_t>().swap(buf_[i]);
  // The batch: k and what follows up to the window, never ending inside a group of one stem.
  size_t end = k;
  int64_t bytes = 0;
  while (end < tensors_.size() && tensors_[end]->bytes() <= window_ &&
         (end == k || bytes + tensors_[end]->bytes() <= window_ || stem(tensors_[end]->name) == stem(tensors_[end - 1]->name))) {
    bytes += tensors_[end]->bytes();
    ++end;
  }
  std::vector<size_t> groups;  // first tensor of each group, then `end`
  for (size_t i = k; i < end; ++i)
    if (i == k || stem(tensors_[i]->name) != stem(tensors_[i - 1]->name)) groups.push_back(i);
  const size_t n_groups = groups.size();
  groups.push_back(end);
  std::atomic<size_t> next{0};
  std::mutex mu;
  Status failure = ok_status();
  auto work = [&] {
    for (size_t g = next++; g < n_groups; g = next++) {
      for (size_t i = groups[g]; i < groups[g + 1]; ++i) {
        buf_[i].resize(static_cast<size_t>(tensors_[i]->bytes()));
        Status st = src_.fill(*tensors_[i], 0, buf_[i]);
        if (!st.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          if (failure.ok()) failure = std::move(st);
          return;
        }
      }
    }
  };
  const int helpers = static_cast<int>(std::clamp<size_t>(static_cast<size_t>(std::max(helpers_(), 1)), 1, n_groups));
  {
    std::vector<std::jthread> pool;
    for (int h = 1; h < helpers; ++h) pool.emplace_back(work);
    work();
  }
  first_ = k;
  end_ = end;
  return failure;
}

}  // namespace dsv4::family
