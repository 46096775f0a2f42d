// Decoding loops of tp_forward_test (tp_testing.h): plain and DSpark-drafted greedy decoding, and the same
// steps with CUDA graphs and eagerly. They run the same way on every rank and on one GPU, so the test compares
// their results within a TP size and across TP sizes.
#include <algorithm>
#include <chrono>
#include <utility>

#include "../forward_testing.h"
#include "tp_testing.h"

namespace dsv4::fabric::tp_testing {

using engine::Piece;
using gpu_testing::all_rows;
using gpu_testing::argmax;

std::vector<float> call(cuda::Forward& f, const std::vector<Piece>& pieces, std::vector<std::vector<float>>* each) {
  auto r = f.forward(pieces);
  CHECK_TRUE(r.ok(), "%s", r.ok() ? "" : r.status().to_string().c_str());
  std::vector<float> out;
  if (!r.ok()) return out;
  for (const engine::PieceResult& p : *r) {
    out.insert(out.end(), p.logits.begin(), p.logits.end());
    if (each) each->push_back(p.logits);
  }
  return out;
}

int32_t open(cuda::Forward& f) {
  auto s = f.open_stream();
  CHECK_TRUE(s.ok(), "open_stream");
  return s.ok() ? *s : -1;
}

namespace {

int32_t top(const std::vector<float>& logits, int64_t row, int64_t V) {
  return static_cast<int32_t>(argmax(logits.data() + row * V, V));
}

// Opens a stream and prefills the prompt; its argmax and logits row become d's first token. d stays empty
// when the prefill fails (the stream is left open: the decoding then ends at once).
int32_t first_token(cuda::Forward& f, const std::vector<int32_t>& prompt, Decoded& d) {
  const int64_t V = f.config().vocab;
  const int32_t s = open(f);
  std::vector<float> last = call(f, {Piece{s, prompt, {static_cast<int32_t>(prompt.size()) - 1}}});
  if (static_cast<int64_t>(last.size()) != V) return s;
  d.tokens.push_back(top(last, 0, V));
  d.logits = std::move(last);
  return s;
}

}  // namespace

Decoded decode_plain(cuda::Forward& f, const std::vector<int32_t>& prompt, int n) {
  const int64_t V = f.config().vocab;
  Decoded d;
  const int32_t s = first_token(f, prompt, d);
  if (d.tokens.empty()) return d;
  int32_t t = d.tokens.back();
  while (static_cast<int>(d.tokens.size()) < n) {
    const std::vector<float> row = call(f, {Piece{s, {t}, {0}}});
    if (static_cast<int64_t>(row.size()) != V) return d;
    t = top(row, 0, V);
    d.tokens.push_back(t);
    d.logits.insert(d.logits.end(), row.begin(), row.end());
  }
  CHECK_TRUE(f.close_stream(s).ok(), "close_stream");
  return d;
}

Decoded decode_drafted(cuda::Forward& f, const std::vector<int32_t>& prompt, int n,
                       const std::vector<int32_t>* proposals) {
  const int64_t V = f.config().vocab;
  Decoded d;
  const int32_t s = first_token(f, prompt, d);
  if (d.tokens.empty()) return d;
  int32_t t = d.tokens.back();
  while (static_cast<int>(d.tokens.size()) < n) {
    auto drafted = f.draft(s, t);
    CHECK_TRUE(drafted.ok(), "draft: %s", drafted.ok() ? "" : drafted.status().to_string().c_str());
    if (!drafted.ok()) return d;
    if (d.drafted == 0) d.first_draft = *drafted;
    std::vector<int32_t> props = drafted->tokens;
    if (proposals) {  // the next tokens of the given decoding, as many as the drafter proposed
      const size_t at = d.tokens.size();
      props.assign(proposals->begin() + static_cast<long>(std::min(at, proposals->size())),
                   proposals->begin() + static_cast<long>(std::min(at + props.size(), proposals->size())));
    }
    d.drafted += static_cast<int64_t>(props.size());
    // Row i of the window [t, p0, .., p(k-1)] predicts the token after its input; rows up to the first
    // proposal that differs from the row before's argmax are what plain decoding computes.
    std::vector<int32_t> window = {t};
    window.insert(window.end(), props.begin(), props.end());
    const auto len = f.length(s);
    CHECK_TRUE(len.ok(), "length");
    if (!len.ok()) return d;
    const std::vector<float> rows = call(f, {Piece{s, window, all_rows(static_cast<int>(window.size()))}});
    if (static_cast<int64_t>(rows.size()) != static_cast<int64_t>(window.size()) * V) return d;
    int64_t keep = 0;
    for (; keep < static_cast<int64_t>(window.size()) && static_cast<int>(d.tokens.size()) < n; ++keep) {
      t = top(rows, keep, V);
      d.tokens.push_back(t);
      d.logits.insert(d.logits.end(), rows.begin() + keep * V, rows.begin() + (keep + 1) * V);
      if (keep >= static_cast<int64_t>(props.size()) || props[static_cast<size_t>(keep)] != t) {
        ++keep;
        break;
      }
      ++d.accepted;
    }
    CHECK_TRUE(f.truncate(s, *len + keep).ok(), "truncate to the kept rows");
  }
  CHECK_TRUE(f.close_stream(s).ok(), "close_stream");
  return d;
}

GraphRun graph_and_eager(cuda::Forward& f, const std::vector<int32_t>& prompt) {
  GraphRun g;
  for (bool graphs : {true, false}) {
    f.set_cuda_graphs(graphs);
    const cuda::GraphCache::Stats before = f.graph_stats();
    const int32_t s = open(f);
    call(f, {Piece{s, std::vector<int32_t>(prompt.begin(), prompt.begin() + 30), {}}});
    std::vector<float>& out = graphs ? g.graphed : g.eager;
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 30; i < 40; ++i) {
      const std::vector<float> one = call(f, {Piece{s, {prompt[i]}, {0}}});
      out.insert(out.end(), one.begin(), one.end());
    }
    (graphs ? g.graphed_ms : g.eager_ms) =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 10;
    if (graphs) {
      g.captures = f.graph_stats().captures - before.captures;
      g.replays = f.graph_stats().replays - before.replays;
    }
    CHECK_TRUE(f.close_stream(s).ok(), "close_stream");
  }
  f.set_cuda_graphs(true);
  return g;
}

}  // namespace dsv4::fabric::tp_testing
