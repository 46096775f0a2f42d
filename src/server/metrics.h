// Server metrics and their Prometheus text exposition (format 0.0.4).
//
// Names mirror vLLM's (prefix "dsv4:" instead of "vllm:", label model_name) so dashboards port
// over: num_requests_running/waiting, prompt_tokens_total, generation_tokens_total,
// request_success_total{finished_reason}, time_to_first_token_seconds, inter_token_latency_seconds,
// e2e_request_latency_seconds, prefix_cache_queries/hits, spec_decode_num_draft/accepted_tokens.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "server/engine.h"

namespace dsv4::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // Appends "_bucket{le=...}", "_sum" and "_count" lines for `name` with `labels` ("k=\"v\"").
  void render(const std::string& name, const std::string& labels, std::string& out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// What /metrics reports beside the counters kept here.
struct MetricsSnapshotInputs {
  EngineStats engine;
  int64_t open_streams = 0;      // SSE responses being written
  int64_t in_progress = 0;       // generation requests admitted and not finished
  int32_t state = 0;             // 0 loading, 1 ready, 2 draining
};

class Metrics {
 public:
  explicit Metrics(std::string model_name);

  void http_request(const std::string& endpoint, int status);
  // Token counters move while requests run: a request's prompt counts once its prompt is in (its
  // first token came, or it ended), generated tokens as they arrive.
  void prompt_processed(int32_t prompt_tokens);
  void tokens_generated(int32_t tokens);
  // A generation request that ran: its reason (stop, length, tool_calls, cancelled, error), token
  // counts (for the per-request histograms) and timings in seconds (ttft < 0: no token came).
  void request_finished(const std::string& finish_reason, int32_t prompt_tokens,
                        int32_t completion_tokens, int32_t cached_tokens, double ttft_s,
                        double e2e_s);
  void inter_token(double seconds, int32_t tokens);

  std::string render(const MetricsSnapshotInputs& in) const;

 private:
  std::string model_;
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> http_;
  std::map<std::string, uint64_t> finished_;
  uint64_t prompt_tokens_ = 0;
  uint64_t generation_tokens_ = 0;
  uint64_t cached_tokens_ = 0;
  Histogram ttft_;
  Histogram itl_;
  Histogram e2e_;
  Histogram prompt_len_;
  Histogram gen_len_;
};

}  // namespace dsv4::server
