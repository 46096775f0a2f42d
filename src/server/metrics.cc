// Counters, histograms and the Prometheus text rendering of /metrics.
#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace dsv4::server {
namespace {

// Label values escape backslash, quote and newline (exposition format 0.0.4).
std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string fmt_double(double v) { return fmt::format("{}", v); }

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

// Buckets as vLLM's (docs/design/metrics.md), so quantile queries port over.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                          0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0,
                                          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kItlBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                         0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                         7.5,  10.0,  20.0, 40.0,  80.0};
const std::vector<double> kE2eBuckets = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,
                                         10.0, 15.0, 20.0, 30.0, 40.0,  50.0,  60.0,  120.0,
                                         240.0, 480.0, 960.0, 1920.0, 7680.0};
const std::vector<double> kTokenBuckets = {1,    2,    5,     10,    20,    50,    100,   200,
                                           500,  1000, 2000,  5000,  10000, 20000, 50000, 100000,
                                           200000, 500000, 1000000};

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::render(const std::string& name, const std::string& labels, std::string& out) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, fmt_double(bounds_[i]),
                       cumulative);
  }
  out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, count_);
  out += fmt::format("{}_sum{{{}}} {}\n", name, labels, fmt_double(sum_));
  out += fmt::format("{}_count{{{}}} {}\n", name, labels, count_);
}

Metrics::Metrics(std::string model_name)
    : model_(std::move(model_name)),
      ttft_(kTtftBuckets),
      itl_(kItlBuckets),
      e2e_(kE2eBuckets),
      prompt_len_(kTokenBuckets),
      gen_len_(kTokenBuckets) {}

void Metrics::http_request(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++http_[{endpoint, status}];
}

void Metrics::request_finished(const std::string& reason, int32_t prompt_tokens,
                               int32_t completion_tokens, int32_t cached_tokens, double ttft_s,
                               double e2e_s) {
  std::lock_guard<std::mutex> lock(mu_);
  ++finished_[reason];
  cached_tokens_ += static_cast<uint64_t>(std::max(0, cached_tokens));
  if (ttft_s >= 0) ttft_.observe(ttft_s);
  e2e_.observe(e2e_s);
  prompt_len_.observe(prompt_tokens);
  gen_len_.observe(completion_tokens);
}

void Metrics::prompt_processed(int32_t prompt_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_tokens_ += static_cast<uint64_t>(std::max(0, prompt_tokens));
}

void Metrics::tokens_generated(int32_t tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  generation_tokens_ += static_cast<uint64_t>(std::max(0, tokens));
}

void Metrics::inter_token(double seconds, int32_t tokens) {
  if (tokens <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  // A round that yields several tokens (drafts) counts as that many equal gaps.
  for (int32_t i = 0; i < tokens; ++i) itl_.observe(seconds / tokens);
}

std::string Metrics::render(const MetricsSnapshotInputs& in) const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string m = fmt::format("model_name=\"{}\"", escape_label(model_));
  std::string out;
  auto gauge = [&](const char* name, const char* help, int64_t v) {
    header(out, name, "gauge", help);
    out += fmt::format("{}{{{}}} {}\n", name, m, v);
  };
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    header(out, name, "counter", help);
    out += fmt::format("{}{{{}}} {}\n", name, m, v);
  };
  gauge("dsv4:num_requests_running", "Requests in the engine's current rounds.", in.engine.running);
  gauge("dsv4:num_requests_waiting", "Requests admitted and waiting for a lane.", in.engine.waiting);
  gauge("dsv4:num_requests_in_progress", "Generation requests accepted by the server, not finished.",
        in.in_progress);
  gauge("dsv4:num_streams_open", "SSE responses being written.", in.open_streams);
  gauge("dsv4:server_state", "0 loading, 1 ready, 2 draining.", in.state);
  counter("dsv4:prompt_tokens_total", "Prompt tokens processed (counted when a prompt is in).",
          prompt_tokens_);
  counter("dsv4:generation_tokens_total", "Generated tokens (counted as they arrive).",
          generation_tokens_);
  counter("dsv4:prompt_tokens_cached_total", "Prompt tokens served from the prompt cache.",
          cached_tokens_);
  counter("dsv4:prefix_cache_queries_total", "Admissions that looked their prompt up in the cache.",
          static_cast<uint64_t>(in.engine.prompt_cache_queries));
  counter("dsv4:prefix_cache_hits_total", "Admissions that resumed from a cached prefix.",
          static_cast<uint64_t>(in.engine.prompt_cache_hits));
  gauge("dsv4:prompt_cache_bytes", "Bytes held by the prompt cache.", in.engine.prompt_cache_bytes);
  counter("dsv4:spec_decode_num_draft_tokens_total", "Drafted tokens proposed for verification.",
          static_cast<uint64_t>(in.engine.draft_tokens));
  counter("dsv4:spec_decode_num_accepted_tokens_total", "Drafted tokens accepted.",
          static_cast<uint64_t>(in.engine.draft_accepted));
  counter("dsv4:engine_rounds_total", "Engine rounds run.", static_cast<uint64_t>(in.engine.rounds));
  gauge("dsv4:prefill_chunk_rows", "Prompt rows the step budget gave the last step that filled a prompt.",
        in.engine.prefill_chunk_rows);

  header(out, "dsv4:request_success_total", "counter", "Finished generation requests by reason.");
  for (const auto& [reason, n] : finished_)
    out += fmt::format("dsv4:request_success_total{{{},finished_reason=\"{}\"}} {}\n", m,
                       escape_label(reason), n);
  header(out, "dsv4:http_requests_total", "counter", "HTTP requests by endpoint and status.");
  for (const auto& [key, n] : http_)
    out += fmt::format("dsv4:http_requests_total{{{},endpoint=\"{}\",status=\"{}\"}} {}\n", m,
                       escape_label(key.first), key.second, n);

  header(out, "dsv4:time_to_first_token_seconds", "histogram", "Time to the first token.");
  ttft_.render("dsv4:time_to_first_token_seconds", m, out);
  header(out, "dsv4:inter_token_latency_seconds", "histogram", "Time between output tokens.");
  itl_.render("dsv4:inter_token_latency_seconds", m, out);
  header(out, "dsv4:e2e_request_latency_seconds", "histogram", "Request latency, arrival to end.");
  e2e_.render("dsv4:e2e_request_latency_seconds", m, out);
  header(out, "dsv4:request_prompt_tokens", "histogram", "Prompt tokens per request.");
  prompt_len_.render("dsv4:request_prompt_tokens", m, out);
  header(out, "dsv4:request_generation_tokens", "histogram", "Generated tokens per request.");
  gen_len_.render("dsv4:request_generation_tokens", m, out);
  return out;
}

}  // namespace dsv4::server
