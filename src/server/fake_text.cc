// The fake text side (byte tokens, a toy chat template and output markup) for HTTP-layer tests.
#include <nlohmann/json.hpp>

#include "server/fake_engine.h"

namespace dsv4::server {
namespace {

using json = nlohmann::json;

std::string message_text(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (content.is_array())
    for (const auto& part : content)
      if (part.contains("text") && part["text"].is_string()) out += part["text"].get<std::string>();
  return out;
}

// Length of the longest prefix of `s` that is complete UTF-8 (a trailing partial sequence is held).
size_t complete_utf8(const std::string& s) {
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

class ByteText final : public TextStream {
 public:
  std::string push(std::string_view bytes) override {
    held_.append(bytes);
    size_t n = complete_utf8(held_);
    std::string out = held_.substr(0, n);
    held_.erase(0, n);
    return out;
  }
  std::string flush() override {
    std::string out;
    out.swap(held_);
    return out;
  }

 private:
  std::string held_;
};

// Splits "reasoning</think>content<tool>NAME ARGS</tool>" incrementally, holding back text that
// may be the start of a tag.
class FakeParser final : public OutputParser {
 public:
  explicit FakeParser(ChatParseOptions o) : opts_(o), mode_(o.thinking ? Mode::reasoning : Mode::content) {}

  void push(std::string_view text, ChatDelta& out) override {
    buf_.append(text);
    run(out, false);
  }
  void finish(ChatDelta& out) override { run(out, true); }

 private:
  enum class Mode { reasoning, content, tool_name, tool_args };

  // Emits buf_ up to a possible partial `tag` at its end; returns true when `tag` was found
  // (the text before it emitted via `emit`, the tag consumed).
  template <typename Emit>
  bool scan(const std::string& tag, bool final, Emit emit) {
    size_t at = buf_.find(tag);
    if (at != std::string::npos) {
      emit(buf_.substr(0, at));
      buf_.erase(0, at + tag.size());
      return true;
    }
    size_t keep = 0;
    if (!final)
      for (size_t len = std::min(tag.size() - 1, buf_.size()); len > 0; --len)
        if (buf_.compare(buf_.size() - len, len, tag, 0, len) == 0) {
          keep = len;
          break;
        }
    emit(buf_.substr(0, buf_.size() - keep));
    buf_.erase(0, buf_.size() - keep);
    return false;
  }

  void run(ChatDelta& out, bool final) {
    for (;;) {
      switch (mode_) {
        case Mode::reasoning:
          if (!scan("</think>", final, [&](const std::string& s) { out.reasoning += s; })) return;
          mode_ = Mode::content;
          break;
        case Mode::content:
          if (!opts_.tools) {
            out.content += buf_;
            buf_.clear();
            return;
          }
          if (!scan("<tool>", final, [&](const std::string& s) { out.content += s; })) return;
          mode_ = Mode::tool_name;
          break;
        case Mode::tool_name: {
          size_t sp = buf_.find(' ');
          if (sp == std::string::npos) {
            if (!final) return;
            sp = buf_.size();
          }
          ToolCallDelta d;
          d.index = calls_;
          d.name = buf_.substr(0, sp);
          out.tool_calls.push_back(d);
          buf_.erase(0, std::min(sp + 1, buf_.size()));
          mode_ = Mode::tool_args;
          break;
        }
        case Mode::tool_args: {
          bool closed = scan("</tool>", final, [&](const std::string& s) {
            if (s.empty()) return;
            ToolCallDelta d;
            d.index = calls_;
            d.arguments = s;
            out.tool_calls.push_back(d);
          });
          if (!closed) return;
          ++calls_;
          mode_ = Mode::content;
          break;
        }
      }
    }
  }

  ChatParseOptions opts_;
  Mode mode_;
  std::string buf_;
  int32_t calls_ = 0;
};

}  // namespace

TextSide make_fake_text_side(int32_t context_length) {
  TextSide t;
  t.vocab_size = kFakeVocab;
  t.context_length = context_length;
  t.tokenize = [](const std::string& text, bool add_special) -> StatusOr<std::vector<int32_t>> {
    std::vector<int32_t> ids;
    if (add_special) ids.push_back(kFakeBos);
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  };
  t.render_chat = [](std::string_view body, const ThinkingOptions& thinking) -> StatusOr<RenderedChat> {
    const json req = json::parse(body, nullptr, false);
    if (!req.is_object()) return Status(StatusCode::invalid_argument, "the body is not a JSON object");
    std::string text;
    if (req.contains("tools") && req["tools"].is_array() && !req["tools"].empty()) {
      text += "<|tools|>";
      for (const auto& tool : req["tools"]) text += tool["function"]["name"].get<std::string>() + " ";
      text += "\n";
    }
    for (const auto& m : req["messages"]) {
      text += "<|" + m["role"].get<std::string>() + "|>";
      if (m.contains("content")) text += message_text(m["content"]);
      if (m.contains("tool_calls") && m["tool_calls"].is_array())
        for (const auto& c : m["tool_calls"]) {
          const json& args = c["function"].contains("arguments") ? c["function"]["arguments"] : json("");
          text += "<tool>" + c["function"]["name"].get<std::string>() + " " +
                  (args.is_string() ? args.get<std::string>() : args.dump()) + "</tool>";
        }
      text += "\n";
    }
    RenderedChat r;
    r.thinking = thinking.enabled.value_or(false);
    text += r.thinking ? "<|assistant|><think>" : "<|assistant|>";
    r.tokens.push_back(kFakeBos);
    for (unsigned char c : text) r.tokens.push_back(c);
    return r;
  };
  t.new_text_stream = [] { return std::make_unique<ByteText>(); };
  t.output_bytes = [](int32_t token) -> std::string {
    if (token >= 0 && token < 256) return std::string(1, static_cast<char>(token));
    return {};  // BOS, EOS
  };
  t.close_reasoning = "</think>";
  t.tool_call_opening = [](const std::string& name) {
    return name.empty() ? std::string("<tool>") : "<tool>" + name + " ";
  };
  t.new_output_parser = [](const ChatParseOptions& o) { return std::make_unique<FakeParser>(o); };
  t.token_bytes = [](int32_t token) -> std::string {
    if (token == kFakeBos) return "<s>";
    if (token == kFakeEos) return "</s>";
    if (token >= 0 && token < 256) return std::string(1, static_cast<char>(token));
    return {};
  };
  return t;
}

}  // namespace dsv4::server
