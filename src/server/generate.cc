// POST /v1/chat/completions and /v1/completions: validate, build the prompt, admit, submit to the
// engine (one request for all n / best_of candidates: the prompt is prefilled once), then stream
// SSE (keepalives before the first token) or wait for the whole reply; a client that goes away
// cancels its engine request, every candidate.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <vector>

#include "server/images.h"
#include "server/reply_choices.h"
#include "server/responses.h"
#include "server/server_core.h"

namespace dsv4::server {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;
constexpr auto kPoll = std::chrono::milliseconds(50);  // disconnect / keepalive check interval

// Events from the engine's threads to the request's HTTP thread. Owned jointly by the sink (which
// may outlive the request after a cancel) and the request.
class Channel {
 public:
  void push(GenerationEvent&& e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(e));
    }
    cv_.notify_one();
  }
  // Waits up to `timeout` for at least one event; moves all queued ones into `out`.
  void pop(std::vector<GenerationEvent>& out, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !queue_.empty(); });
    while (!queue_.empty()) {
      out.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<GenerationEvent> queue_;
};

// One admitted request from submit to its last byte.
struct Run {
  Server::Core* core = nullptr;
  Engine* engine = nullptr;
  std::shared_ptr<Channel> channel;
  RequestId id = 0;  // candidate i is id + i to the engine
  std::unique_ptr<ReplyChoices> reply;
  Clock::time_point arrived, last_token, last_write;
  int32_t prompt_tokens = 0;
  bool got_token = false;
  bool done = false;  // the reply is complete (metrics recorded, in_progress released)

  // Feeds queued events; returns SSE text (streamed) or "".
  std::string pump(std::chrono::milliseconds wait) {
    std::vector<GenerationEvent> events;
    channel->pop(events, wait);
    std::string out;
    for (auto& e : events) {
      if (!e.tokens.empty()) {
        if (!got_token) core->metrics.prompt_processed(prompt_tokens);
        core->metrics.tokens_generated(static_cast<int32_t>(e.tokens.size()));
        auto now = Clock::now();
        if (got_token)
          core->metrics.inter_token(std::chrono::duration<double>(now - last_token).count(),
                                    static_cast<int32_t>(e.tokens.size()));
        got_token = true;
        last_token = now;
      }
      if (first_token_time == Clock::time_point{} && !e.tokens.empty())
        first_token_time = last_token;
      out += reply->feed(e);
    }
    // A forced tool call's block ended a choice before the engine did: that candidate stops.
    ended_early.resize(static_cast<size_t>(reply->candidates()));
    for (int32_t i = 0; i < reply->candidates(); ++i) {
      if (reply->at(i).ended_early() && !ended_early[i] && !cancelled) {
        engine->cancel(id + static_cast<RequestId>(i));
        ended_early[i] = true;
      }
    }
    return out;
  }

  // Records the finished request once (metrics, in-progress count).
  void finish(const std::string& reason) {
    if (done) return;
    done = true;
    double e2e = std::chrono::duration<double>(Clock::now() - arrived).count();
    double ttft = first_token_time == Clock::time_point{}
                      ? -1
                      : std::chrono::duration<double>(first_token_time - arrived).count();
    Usage u = reply->usage();
    if (!got_token) core->metrics.prompt_processed(u.prompt_tokens);
    core->metrics.request_finished(reason, u.prompt_tokens, u.completion_tokens, u.cached_tokens,
                                   ttft, e2e);
    core->request_done();
  }

  Clock::time_point first_token_time{};
  bool cancelled = false;          // every candidate
  std::vector<bool> ended_early;   // by candidate: cancelled after its forced call ended
};

struct Prepared {
  GenerationRequest request;
  AssemblerSetup setup;
  std::vector<ChatImage> images;  // the rendered chat's images, expanded after admission (images.h)
  size_t rendered_end = 0;        // the rendered chat's tokens end here (a forced call's prefill follows)
};

// What follows the opening of a call without a name: `name` and the markup that closes it, read off
// the opening with the name (opening(name) == opening("") + name + close).
std::string name_and_close(const TextSide& text, const std::string& name) {
  const std::string open = text.tool_call_opening("");
  const std::string full = text.tool_call_opening(name);
  DSV4_CHECK(full.size() >= open.size() && full.compare(0, open.size(), open) == 0);
  return full.substr(open.size());
}

// Prompt scoring (echo, prompt_logprobs) on the forced_tokens path: the engine's prompt is the first
// prompt token and the rest are forced, so each comes back with its logprob given its prefix (and
// its alternatives), ahead of the forced continuation or the generated tokens. max_tokens still
// counts generated tokens only. The first prompt token has no logprob (nothing precedes it).
void score_prompt(const ParsedRequest& pr, GenerationRequest& g, AssemblerSetup& s) {
  const int32_t scored = static_cast<int32_t>(g.prompt.size()) - 1;
  s.prompt_first = g.prompt.front();
  s.scored_prompt = scored;
  s.echo = pr.echo;
  s.prompt_logprobs = pr.prompt_logprobs;
  g.forced.insert(g.forced.begin(), g.prompt.begin() + 1, g.prompt.end());
  g.prompt.resize(1);
  g.max_tokens += scored;  // may be 0: an echo of a one-token prompt with max_tokens 0
  g.logprobs = true;
  g.top_logprobs = std::max(pr.top_logprobs, pr.prompt_logprobs);
}

// With thinking on, the reasoning block stays free: the constraint starts after the token that closes it.
bool set_constraint_after(const TextSide& text, GenerationRequest& g, ApiError& err) {
  auto close = text.tokenize(text.close_reasoning, false);
  if (!close.ok() || close->size() != 1)
    return err = bad_request("thinking", "this model's reasoning end is not one token; turn thinking off to constrain "
                                         "the reply"),
           false;
  g.constraint_after = (*close)[0];
  return true;
}

bool finish_prepare(Server::Core& core, const ParsedRequest& pr, const TextSide& text, Prepared& out, ApiError& err);

// Images need a model that reads them, and take no prompt scoring (their positions are not tokens to score).
bool check_images(Server::Core& core, const ParsedRequest& pr, ApiError& err) {
  if (pr.image_parts.empty()) return true;
  const ImageSide* side = core.images.load();
  if (side == nullptr || !side->accepts_images)
    return err = bad_request(pr.image_parts.front(),
                             fmt::format("the model '{}' does not accept images{}{}", core.options.model_name,
                                         side && !side->unavailable.empty() ? ": " : "",
                                         side ? side->unavailable : std::string()),
                             "images_not_supported"),
           false;
  if (pr.echo || pr.prompt_logprobs >= 0)
    return err = bad_request(pr.prompt_logprobs >= 0 ? "prompt_logprobs" : "echo",
                             "prompt scoring does not combine with images"),
           false;
  return true;
}

// Builds the engine request and the reply setup, or an error naming the field. A chat with images stops before
// the prompt's lengths are checked: its images are loaded and expanded after admission (expand_images), then
// finish_prepare runs.
bool prepare(Server::Core& core, const ParsedRequest& pr, std::string_view body,
             const TextSide& text, Prepared& out, ApiError& err) {
  GenerationRequest& g = out.request;
  AssemblerSetup& s = out.setup;
  const char* prompt_param = pr.endpoint == Endpoint::chat ? "messages" : "prompt";
  if (pr.endpoint == Endpoint::chat) {
    if (!check_images(core, pr, err)) return false;
    auto rendered = text.render_chat(body, pr.thinking);
    if (!rendered.ok()) return err = error_from_status(rendered.status(), "messages"), false;
    g.prompt = std::move(rendered->tokens);
    out.images = std::move(rendered->images);
    out.rendered_end = g.prompt.size();
    if (out.images.size() != pr.image_parts.size())
      return err = bad_request("messages", fmt::format("the chat renders {} images for {} image_url parts",
                                                       out.images.size(), pr.image_parts.size())),
             false;
    s.thinking = rendered->thinking;
    s.tools = pr.tools_offered && pr.tool_choice != ToolChoiceMode::none;
    if (s.tools && (pr.tool_choice == ToolChoiceMode::required ||
                    pr.tool_choice == ToolChoiceMode::named) && !pr.has_forced) {
      // A forced call: the reply is prefilled with the opening of a call (to the named tool, or
      // the only one offered), after closing the reasoning block when the prompt opened one. With
      // several tools the prefill stops before the name, and the engine constrains the first
      // tokens to spell one offered name followed by the markup that closes it.
      const std::string name = pr.tool_choice == ToolChoiceMode::named ? pr.tool_choice_name
                               : pr.tool_names.size() == 1            ? pr.tool_names[0]
                                                                      : std::string();
      std::string prefill = rendered->thinking ? text.close_reasoning : std::string();
      s.call_opening = text.tool_call_opening(name);
      prefill += s.call_opening;
      auto ids = text.tokenize(prefill, false);
      if (!ids.ok()) return err = error_from_status(ids.status(), "tool_choice"), false;
      g.prompt.insert(g.prompt.end(), ids->begin(), ids->end());
      // Every call of the block held to an offered name and that tool's parameter schema.
      if (!core.constraints.tool_calls(text, body, pr, true, name, g.constraint, err)) return false;
      if (name.empty() && g.constraint == nullptr) {
        for (const std::string& tool : pr.tool_names) {
          auto choice = text.tokenize(name_and_close(text, tool), false);
          if (!choice.ok()) return err = error_from_status(choice.status(), "tools"), false;
          if (choice->empty()) return err = bad_request("tools", "a tool name has no tokens"), false;
          g.choices.push_back(std::move(*choice));
        }
      }
      s.thinking = false;
      s.forced_call = true;
    } else if (s.tools && !pr.has_forced) {
      // tool_choice auto: strict tools (or parallel_tool_calls false) hold the block the reply may open.
      if (!core.constraints.tool_calls(text, body, pr, false, "", g.constraint, err)) return false;
      if (g.constraint != nullptr && s.thinking && !set_constraint_after(text, g, err)) return false;
    }
  } else if (pr.prompt_is_ids) {
    g.prompt = pr.prompt_ids;
  } else {
    auto ids = text.tokenize(pr.prompt_text, true);
    if (!ids.ok()) return err = error_from_status(ids.status(), "prompt"), false;
    g.prompt = std::move(*ids);
  }
  if (g.prompt.empty()) return err = bad_request(prompt_param, "the prompt has no tokens"), false;
  if (pr.response_format != ResponseFormat::text) {
    if (pr.endpoint == Endpoint::chat && pr.tools_offered && pr.tool_choice != ToolChoiceMode::none)
      return err = bad_request("response_format",
                               "response_format json_object / json_schema does not combine with tools (unless "
                               "tool_choice is 'none'); use a strict tool for a structured call"),
             false;
    if (pr.has_forced)
      return err = bad_request("response_format", "response_format does not combine with forced_tokens"), false;
    if (!core.constraints.response_format(text, body, pr.response_format, g.constraint, err)) return false;
    if (s.thinking && !set_constraint_after(text, g, err)) return false;
  }
  return out.images.empty() ? finish_prepare(core, pr, text, out, err) : true;
}

// The prompt's lengths against the server's and the model's limits, forced tokens, sampling and the reply's
// setup (for a chat with images: once its spans are in the prompt).
bool finish_prepare(Server::Core& core, const ParsedRequest& pr, const TextSide& text, Prepared& out, ApiError& err) {
  GenerationRequest& g = out.request;
  AssemblerSetup& s = out.setup;
  const char* prompt_param = pr.endpoint == Endpoint::chat ? "messages" : "prompt";
  const int64_t context = text.context_length;
  const int64_t max_prompt = core.options.max_prompt_tokens > 0 ? core.options.max_prompt_tokens
                                                                : context;
  const int64_t n_prompt = static_cast<int64_t>(g.prompt.size());
  if (max_prompt > 0 && n_prompt > max_prompt)
    return err = bad_request(prompt_param,
                             fmt::format("This server's maximum prompt length is {} tokens; the "
                                         "prompt has {} tokens",
                                         max_prompt, n_prompt),
                             "context_length_exceeded"),
           false;

  if (pr.has_forced) {
    if (pr.forced_is_text) {
      auto ids = text.tokenize(pr.forced_text, false);
      if (!ids.ok()) return err = error_from_status(ids.status(), "forced_tokens"), false;
      g.forced = std::move(*ids);
      if (g.forced.empty()) return err = bad_request("forced_tokens", "forced_tokens has no tokens"), false;
      if (static_cast<int64_t>(g.forced.size()) > core.options.max_tokens)
        return err = bad_request("forced_tokens",
                                 fmt::format("at most {} forced tokens", core.options.max_tokens)),
               false;
    } else {
      g.forced = pr.forced_ids;
    }
  }
  int64_t max_tokens = pr.has_forced ? static_cast<int64_t>(g.forced.size())
                                     : pr.max_tokens.value_or(core.options.max_tokens);
  if (context > 0 && n_prompt + max_tokens > context) {
    if (pr.max_tokens || pr.has_forced || n_prompt >= context)
      return err = bad_request(prompt_param,
                               fmt::format("This server's maximum context length is {} tokens; "
                                           "the prompt has {} and max_tokens asks for {}",
                                           context, n_prompt, max_tokens),
                               "context_length_exceeded"),
             false;
    max_tokens = context - n_prompt;  // the default shrinks to fit
  }
  g.max_tokens = static_cast<int32_t>(max_tokens);
  g.sampling = pr.sampling;
  if (!pr.seed_given) g.sampling.seed = core.random_u64();
  // best_of ranks candidates by their tokens' logprobs: asked for even when the reply shows none.
  g.logprobs = pr.logprobs || pr.has_forced || pr.best_of > pr.n;
  g.top_logprobs = pr.top_logprobs;
  g.n = pr.best_of;
  if (pr.echo || pr.prompt_logprobs >= 0) score_prompt(pr, g, s);
  g.draft = pr.draft;
  g.ignore_eos = pr.ignore_eos;
  if (!pr.has_forced) g.stop = pr.stop;  // a forced continuation is scored whole

  s.endpoint = pr.endpoint;
  s.meta.id = core.random_id(pr.endpoint == Endpoint::chat ? "chatcmpl-" : "cmpl-");
  s.meta.created = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  s.meta.model = pr.model.empty() ? core.options.model_name : pr.model;
  s.stream = pr.stream;
  s.include_usage = pr.include_usage;
  s.logprobs = pr.logprobs || pr.has_forced;
  s.top_logprobs = pr.top_logprobs;
  s.stop = pr.stop;
  s.forced = pr.has_forced;
  s.prompt_tokens = static_cast<int32_t>(n_prompt);
  return true;
}

void serve_stream(std::shared_ptr<Run> run, httplib::Response& res) {
  Server::Core& core = *run->core;
  core.open_streams.fetch_add(1);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  const auto keepalive = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(core.options.keepalive_seconds));
  run->last_write = Clock::now();
  res.set_chunked_content_provider(
      "text/event-stream",
      [run, keepalive](size_t, httplib::DataSink& sink) -> bool {
        std::string out = run->pump(kPoll);
        if (run->reply->finished()) {
          out += run->reply->finish_sse();
          // Counted as finished only once written: a drain waiting for this request must not
          // stop the server before its last bytes are out.
          bool written = sink.write(out.data(), out.size());
          run->finish(run->reply->finish_reason());
          if (!written) return false;
          sink.done();
          return true;
        }
        auto now = Clock::now();
        if (out.empty() && !run->got_token && now - run->last_write >= keepalive)
          out = sse_keepalive();
        if (!out.empty()) {
          run->last_write = now;
          if (!sink.write(out.data(), out.size())) return false;
        }
        return true;
      },
      [run](bool) {
        // The connection closed or failed before the reply ended: cancel the engine request.
        if (!run->done) {
          if (!run->cancelled) run->engine->cancel(run->id);
          run->cancelled = true;
          run->finish("cancelled");
        }
        run->core->open_streams.fetch_sub(1);
      });
}

void serve_whole(std::shared_ptr<Run> run, const httplib::Request& req, httplib::Response& res) {
  int fd = find_connection_fd(req);
  while (!run->reply->finished()) {
    run->pump(kPoll);
    if (!run->reply->finished() && fd >= 0 && peer_closed(fd)) {
      run->engine->cancel(run->id);
      run->cancelled = true;
      run->finish("cancelled");
      res.status = 499;  // nobody is listening; the connection is closed after this
      res.set_header("Connection", "close");
      return;
    }
  }
  ReplyChoices& a = *run->reply;
  run->finish(a.finish_reason());
  if (a.failed()) {
    send_error(res, error_from_status(a.error()));
    return;
  }
  res.status = 200;
  res.set_content(dump_json(a.reply()), "application/json");
}

}  // namespace

void handle_generate(Server::Core& core, Endpoint endpoint, const httplib::Request& req,
                     const std::string& body, httplib::Response& res) {
  const auto arrived = Clock::now();
  ServerState state = core.current_state();
  if (state != ServerState::ready) {
    ApiError e;
    e.http_status = 503;
    e.type = "service_unavailable";
    e.code = state == ServerState::loading ? "model_loading" : "draining";
    e.message = state == ServerState::loading ? "the model is still loading; retry shortly"
                                              : "the server is shutting down (draining)";
    e.retry_after_s = state == ServerState::loading ? 5 : std::max(1, int(core.options.drain_seconds));
    return send_error(res, e);
  }
  Engine* engine = core.engine.load();
  const TextSide* text = core.text.load();

  ParsedRequest pr;
  ApiError err;
  if (!parse_request(endpoint, body, core.limits, pr, err)) return send_error(res, err);
  Prepared prep;
  if (!prepare(core, pr, body, *text, prep, err)) return send_error(res, err);

  // Admission: a bounded number of requests in progress.
  if (core.in_progress.fetch_add(1) >= core.options.max_queue) {
    core.request_done();
    ApiError e;
    e.http_status = 429;
    e.type = "rate_limit_error";
    e.code = "queue_full";
    e.message = fmt::format("the server is at its limit of {} requests in progress; retry shortly",
                            core.options.max_queue);
    e.retry_after_s = 1;
    return send_error(res, e);
  }
  // Images load, decode and encode only once admitted (bounded by max_queue like the engine's work).
  if (!prep.images.empty()) {
    const ImageSide* side = core.images.load();
    if (!expand_images(*side, core.options.images, prep.images, prep.rendered_end, prep.request, err) ||
        !finish_prepare(core, pr, *text, prep, err)) {
      core.request_done();
      return send_error(res, err);
    }
  }
  auto run = std::make_shared<Run>();
  run->core = &core;
  run->engine = engine;
  run->arrived = arrived;
  run->prompt_tokens = prep.setup.prompt_tokens;
  run->channel = std::make_shared<Channel>();
  const int32_t candidates = prep.request.n;
  run->reply = std::make_unique<ReplyChoices>(prep.setup, *text, pr.n, candidates);
  auto channel = run->channel;
  if (prep.request.max_tokens == 0) {
    // Nothing for the engine to compute (an echo of a one-token prompt with max_tokens 0): the
    // reply is the prompt alone. Id 0 is never an engine request, so a cancel of it is ignored.
    for (int32_t i = 0; i < candidates; ++i) {
      GenerationEvent done;
      done.choice = i;
      done.done = true;
      done.finish = Finish::length;
      done.cached_prompt_tokens = 0;
      channel->push(std::move(done));
    }
  } else {
    auto id = engine->submit(std::move(prep.request),
                             [channel](GenerationEvent&& e) { channel->push(std::move(e)); });
    if (!id.ok()) {
      core.request_done();
      // The engine runs a request's candidates side by side and refuses more than it can: name
      // the field that asked for them.
      const char* param = candidates > 1 && id.status().code() == StatusCode::invalid_argument &&
                                  id.status().message().rfind("n ", 0) == 0
                              ? (pr.best_of > pr.n ? "best_of" : "n")
                              : "";
      ApiError e = error_from_status(id.status(), param);
      if (*param)
        e.message = fmt::format("'{}' asks for {} candidates side by side, beyond what this "
                                "server runs at once: {}",
                                param, candidates, id.status().message());
      return send_error(res, e);
    }
    run->id = *id;
  }
  res.set_header("X-Request-Id", prep.setup.meta.id);
  if (pr.stream) serve_stream(run, res);
  else serve_whole(run, req, res);
}

}  // namespace dsv4::server
