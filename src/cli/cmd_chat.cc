// `dsv4 chat`: an interactive terminal chat against a running `dsv4 serve` (or any OpenAI-compatible
// server), streaming reasoning (dimmed) and the reply as they arrive.
#include <CLI/CLI.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "cli/command.h"

namespace dsv4::cli {
namespace {

using json = nlohmann::json;

struct ChatFlags {
  std::string url = "http://127.0.0.1:8000";
  std::string api_key;
  std::string model;
  std::string system;
  bool no_thinking = false;
  int32_t max_tokens = 1024;
  double temperature = 1.0;
  double top_p = 1.0;
  bool show_usage = false;
};

// Streams one reply; prints it as it comes. Returns the assistant message to keep in the history,
// or an error text.
bool stream_reply(httplib::Client& client, const ChatFlags& f, const json& messages, json& message,
                  std::string& error) {
  json body{{"messages", messages},       {"stream", true},
            {"max_tokens", f.max_tokens}, {"temperature", f.temperature},
            {"top_p", f.top_p},           {"stream_options", {{"include_usage", true}}},
            {"chat_template_kwargs", {{"thinking", !f.no_thinking}}}};
  if (!f.model.empty()) body["model"] = f.model;
  const bool tty = isatty(STDOUT_FILENO);
  std::string buffer, content, reasoning, status_body;
  bool in_reasoning = false;
  json usage;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = body.dump();
  req.headers = {{"Content-Type", "application/json"}};
  if (!f.api_key.empty()) req.headers.emplace("Authorization", "Bearer " + f.api_key);
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    status_body.append(data, std::min<size_t>(n, 4096));
    size_t end;
    while ((end = buffer.find("\n\n")) != std::string::npos) {
      std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;  // keepalive comments
      std::string payload = event.substr(6);
      if (payload == "[DONE]") continue;
      json chunk = json::parse(payload, nullptr, false);
      if (chunk.is_discarded()) continue;
      if (chunk.contains("error")) {
        error = chunk["error"].value("message", "error");
        continue;
      }
      if (chunk.contains("usage") && chunk["usage"].is_object()) usage = chunk["usage"];
      if (!chunk.contains("choices") || chunk["choices"].empty()) continue;
      const json& delta = chunk["choices"][0]["delta"];
      if (delta.contains("reasoning_content") && delta["reasoning_content"].is_string()) {
        std::string r = delta["reasoning_content"];
        if (!in_reasoning && tty) std::fputs("\x1b[2m", stdout);
        in_reasoning = true;
        reasoning += r;
        std::fputs(r.c_str(), stdout);
      }
      if (delta.contains("content") && delta["content"].is_string()) {
        std::string c = delta["content"];
        if (in_reasoning && !c.empty()) {
          std::fputs(tty ? "\x1b[0m\n\n" : "\n\n", stdout);
          in_reasoning = false;
        }
        content += c;
        std::fputs(c.c_str(), stdout);
      }
      if (delta.contains("tool_calls"))
        for (const auto& t : delta["tool_calls"])
          if (t.contains("function") && t["function"].contains("name"))
            std::printf("\n[tool call: %s]", t["function"]["name"].get<std::string>().c_str());
      std::fflush(stdout);
    }
    return true;
  };
  auto res = client.send(req);
  if (in_reasoning && tty) std::fputs("\x1b[0m", stdout);
  std::fputs("\n", stdout);
  if (!res) {
    error = "cannot reach " + f.url + " (" + httplib::to_string(res.error()) + ")";
    return false;
  }
  if (res->status != 200) {
    json e = json::parse(status_body, nullptr, false);
    error = e.is_object() && e.contains("error") ? e["error"].value("message", "error")
                                                : "HTTP " + std::to_string(res->status);
    return false;
  }
  if (!error.empty()) return false;
  message = json{{"role", "assistant"}, {"content", content}};
  if (!reasoning.empty()) message["reasoning_content"] = reasoning;
  if (f.show_usage && usage.is_object())
    std::fprintf(stderr, "[%d prompt tokens (%d cached), %d completion tokens]\n",
                 usage.value("prompt_tokens", 0),
                 usage["prompt_tokens_details"].value("cached_tokens", 0),
                 usage.value("completion_tokens", 0));
  return true;
}

int run_chat(int argc, char** argv) {
  CLI::App app{"dsv4 chat - interactive terminal chat with a running dsv4 serve (or any "
               "OpenAI-compatible server). Lines starting with / are commands: /reset clears the "
               "conversation, /think on|off toggles reasoning, /quit leaves (so does end of input).",
               "dsv4 chat"};
  ChatFlags f;
  app.add_option("--url", f.url, "server address")->capture_default_str();
  app.add_option("--api-key", f.api_key, "sent as 'Authorization: Bearer KEY' (also $DSV4_API_KEY)");
  app.add_option("--model", f.model, "model id to ask for (default: the server's)");
  app.add_option("--system", f.system, "a system message opening the conversation");
  app.add_flag("--no-thinking", f.no_thinking, "ask for replies without reasoning");
  app.add_option("--max-tokens", f.max_tokens, "tokens per reply at most")->capture_default_str();
  app.add_option("--temperature", f.temperature, "sampling temperature (0 = greedy)")
      ->capture_default_str();
  app.add_option("--top-p", f.top_p, "nucleus sampling threshold")->capture_default_str();
  app.add_flag("--usage", f.show_usage, "print token counts after each reply (stderr)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (f.api_key.empty())
    if (const char* k = std::getenv("DSV4_API_KEY")) f.api_key = k;

  httplib::Client client(f.url);
  if (!client.is_valid()) {
    std::fprintf(stderr, "dsv4 chat: not a usable server address: %s\n", f.url.c_str());
    return 2;
  }
  client.set_read_timeout(600, 0);
  const bool tty = isatty(STDIN_FILENO);
  json messages = json::array();
  if (!f.system.empty()) messages.push_back({{"role", "system"}, {"content", f.system}});
  if (tty) std::fprintf(stderr, "dsv4 chat with %s (/quit to leave, /reset, /think on|off)\n", f.url.c_str());
  std::string line;
  for (;;) {
    if (tty) std::fputs("\n> ", stdout), std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    if (line == "/quit" || line == "/exit") break;
    if (line == "/reset") {
      messages = json::array();
      if (!f.system.empty()) messages.push_back({{"role", "system"}, {"content", f.system}});
      continue;
    }
    if (line == "/think on" || line == "/think off") {
      f.no_thinking = line == "/think off";
      continue;
    }
    messages.push_back({{"role", "user"}, {"content", line}});
    json reply;
    std::string error;
    if (!stream_reply(client, f, messages, reply, error)) {
      std::fprintf(stderr, "dsv4 chat: %s\n", error.c_str());
      messages.erase(messages.size() - 1);  // the turn did not happen
      continue;
    }
    messages.push_back(reply);
  }
  return 0;
}

}  // namespace

DSV4_COMMAND("chat", "interactive terminal chat with a running dsv4 serve", run_chat);

}  // namespace dsv4::cli
