// Output parsing: reference-grammar examples, render/parse round trips, every-byte splits, malformed fuzz.
#include "tokenizer/dsml_parser.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "tokenizer/chat_template.h"

namespace dsv4::chat {
namespace {

#define EOS "<｜end▁of▁sentence｜>"
#define T "｜DSML｜"

// tokenizer-and-chat.md §2.5 (TF template.jsonl case 1), as the model emits it in chat mode.
const std::string kWeatherCall =
    "Let me check.\n\n<" T " calls>\n<" T " invoke name=\"get_weather\">\n<" T
    " parameter name=\"location\" string=\"true\">Beijing</" T " parameter>\n<" T
    " parameter name=\"unit\" string=\"true\">celsius</" T " parameter>\n</" T " invoke>\n</" T
    " calls>" EOS;

ParserOptions opts(bool reasoning, ChatFormat format = ChatFormat::v41) {
  ParserOptions o;
  o.format = format;
  o.starts_in_reasoning = reasoning;
  return o;
}

// Merged deltas of a stream cut at `cuts` (sorted byte offsets).
ChatDelta stream(std::string_view text, const std::vector<size_t>& cuts, const ParserOptions& o,
                 bool check_prefix = false, const ParsedMessage* whole = nullptr) {
  DsmlStreamParser p(o);
  ChatDelta all;
  size_t at = 0;
  for (size_t i = 0; i <= cuts.size(); ++i) {
    const size_t end = i < cuts.size() ? cuts[i] : text.size();
    append_delta(all, p.feed(text.substr(at, end - at)));
    at = end;
    if (check_prefix && whole) {
      // Nothing emitted so far may later turn out to be markup.
      EXPECT_EQ(whole->content.compare(0, all.content.size(), all.content), 0) << "leak at " << end;
      EXPECT_EQ(whole->reasoning_content.compare(0, all.reasoning_content.size(),
                                                 all.reasoning_content), 0);
    }
  }
  append_delta(all, p.finish());
  return all;
}

void expect_same(const ChatDelta& d, const ParsedMessage& m, const std::string& what) {
  EXPECT_EQ(d.content, m.content) << what;
  EXPECT_EQ(d.reasoning_content, m.reasoning_content) << what;
  ASSERT_EQ(d.tool_calls.size(), m.tool_calls.size()) << what;
  for (size_t i = 0; i < m.tool_calls.size(); ++i) {
    EXPECT_EQ(d.tool_calls[i].index, static_cast<int32_t>(i)) << what;
    EXPECT_EQ(d.tool_calls[i].id, m.tool_calls[i].id) << what;
    EXPECT_EQ(d.tool_calls[i].name, m.tool_calls[i].name) << what;
    EXPECT_EQ(d.tool_calls[i].arguments, m.tool_calls[i].arguments) << what;
  }
}

// Every 2-piece split and the byte-by-byte feed give the one-shot parse.
void check_all_splits(const std::string& text, const ParserOptions& o, bool check_prefix) {
  const ParsedMessage whole = parse_completion(text, o);
  for (size_t cut = 0; cut <= text.size(); ++cut)
    expect_same(stream(text, {cut}, o, check_prefix, &whole), whole, "cut " + std::to_string(cut));
  std::vector<size_t> bytes;
  for (size_t i = 1; i < text.size(); ++i) bytes.push_back(i);
  expect_same(stream(text, bytes, o, check_prefix, &whole), whole, "byte by byte");
}

TEST(DsmlParser, ReferenceToolCallExample) {
  const ParsedMessage m = parse_completion(kWeatherCall, opts(false));
  EXPECT_EQ(m.content, "Let me check.");
  EXPECT_EQ(m.reasoning_content, "");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].name, "get_weather");
  // decode_dsml_to_arguments: "{" + ", ".join(json.dumps(k) + ": " + json.dumps(v)) + "}".
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"location": "Beijing", "unit": "celsius"})");
  EXPECT_EQ(m.tool_calls[0].id, "call_0");
  EXPECT_TRUE(m.ended_with_eos);
}

TEST(DsmlParser, ThinkingContentAndTypedParameters) {
  const std::string text = "I should call f.</think>Sure.\n\n<" T " calls>\n<" T
                           " invoke name=\"f\">\n<" T " parameter name=\"n\" string=\"false\">42</" T
                           " parameter>\n<" T " parameter name=\"s\" string=\"true\">a \"q\"\n</" T
                           " parameter>\n<" T " parameter name=\"o\" string=\"false\">{\"k\": [1, 2]}</" T
                           " parameter>\n<" T " parameter name=\"bad\" string=\"false\">not json</" T
                           " parameter>\n</" T " invoke>\n<" T " invoke name=\"g\">\n\n</" T
                           " invoke>\n</" T " calls>" EOS;
  const ParsedMessage m = parse_completion(text, opts(true));
  EXPECT_EQ(m.reasoning_content, "I should call f.");
  EXPECT_EQ(m.content, "Sure.");
  ASSERT_EQ(m.tool_calls.size(), 2u);
  EXPECT_EQ(m.tool_calls[0].arguments,
            R"({"n": 42, "s": "a \"q\"\n", "o": {"k": [1, 2]}, "bad": "not json"})");
  EXPECT_EQ(m.tool_calls[1].name, "g");
  EXPECT_EQ(m.tool_calls[1].arguments, "{}");
  EXPECT_EQ(m.tool_calls[1].id, "call_1");
  check_all_splits(text, opts(true), true);
}

TEST(DsmlParser, PlainTextAndHeldBackPrefixes) {
  // A lone "\n\n<" or a partial EOS is held back only until it cannot be a marker any more.
  const std::string text = "a\n\n<b> c\n\n<｜DS x </thin> y" EOS "ignored";
  const ParsedMessage m = parse_completion(text, opts(false));
  EXPECT_EQ(m.content, "a\n\n<b> c\n\n<｜DS x </thin> y");
  EXPECT_TRUE(m.tool_calls.empty());
  check_all_splits(text, opts(false), true);
  DsmlStreamParser p(opts(false));
  EXPECT_EQ(p.feed("hello\n\n<｜DSML").content, "hello");
  EXPECT_EQ(p.finish().content, "\n\n<｜DSML");  // end of stream: the held text is content
}

TEST(DsmlParser, PrefilledBlockAndSingleNewlineEmptyInvoke) {
  // The reference accepts "<T invoke name=\"g\">\n</T invoke>" (no blank line) as a no-argument call.
  const std::string text = "<" T " invoke name=\"g\">\n</" T " invoke>\n</" T " calls>" EOS;
  ParserOptions o = opts(false);
  o.starts_in_tool_block = true;
  const ParsedMessage m = parse_completion(text, o);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].name, "g");
  EXPECT_EQ(m.tool_calls[0].arguments, "{}");
  EXPECT_EQ(m.content, "");
  check_all_splits(text, o, true);
  // A prefilled block the model abandons: its text is content.
  EXPECT_EQ(parse_completion("no call" EOS, o).content, "no call");
}

TEST(DsmlParser, LongValuesFedByteByByteStayLinear) {
  // 300 kB non-string and string values fed one byte at a time (a quadratic re-scan would take
  // minutes here).
  std::string big = "[";
  for (int i = 0; i < 60000; ++i) big += (i ? ",1234" : "1234");
  big += "]";
  const std::string text = "\n\n<" T " calls>\n<" T " invoke name=\"f\">\n<" T
                           " parameter name=\"a\" string=\"false\">" + big + "</" T " parameter>\n<" T
                           " parameter name=\"b\" string=\"true\">" + big + "</" T " parameter>\n</" T
                           " invoke>\n</" T " calls>" EOS;
  DsmlStreamParser p(opts(false));
  ChatDelta all;
  for (char c : text) append_delta(all, p.feed(std::string_view(&c, 1)));
  append_delta(all, p.finish());
  ASSERT_EQ(all.tool_calls.size(), 1u);
  EXPECT_EQ(all.tool_calls[0].arguments, "{\"a\": " + big + ", \"b\": \"" + big + "\"}");
}

TEST(DsmlParser, V4Tags) {
  const std::string text = "\n\n<" T "tool_calls>\n<" T "invoke name=\"f\">\n<" T
                           "parameter name=\"k\" string=\"true\">v</" T "parameter>\n</" T
                           "invoke>\n</" T "tool_calls>" EOS;
  const ParsedMessage m = parse_completion(text, opts(false, ChatFormat::v4));
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"k": "v"})");
  check_all_splits(text, opts(false, ChatFormat::v4), true);
  // The V4.1 parser does not take V4 tags for tool calls: it is content.
  EXPECT_TRUE(parse_completion(text, opts(false)).tool_calls.empty());
}

TEST(DsmlParser, RoundTripThroughTheEncoder) {
  for (ChatFormat format : {ChatFormat::v41, ChatFormat::v4}) {
    for (bool thinking : {false, true}) {
      Conversation c;
      c.options.format = format;
      c.options.thinking = thinking;
      Message u;
      u.role = Role::user;
      u.content.push_back({ContentPart::Kind::text, "go", ""});
      Message a;
      a.role = Role::assistant;
      a.content.push_back({ContentPart::Kind::text, "Calling <tools> now.", ""});
      a.reasoning_content = "need data, 2 < 3";
      a.tool_calls = {{"x", "search", R"({"query": "é \"quoted\"\nline", "limit": 5, "opts": {"a": [true, null, 1.5]}})"},
                      {"y", "noop", "{}"}};
      c.messages = {u, a};
      auto prompt = render_conversation(c);
      ASSERT_TRUE(prompt.ok());
      // The reply is what follows the generation header of the last user turn.
      const std::string header = std::string(kAssistantToken) + (thinking ? "<think>" : "</think>");
      const size_t at = prompt->text.rfind(header);
      ASSERT_NE(at, std::string::npos);
      const std::string reply = prompt->text.substr(at + header.size());
      const ParsedMessage m = parse_completion(reply, opts(thinking, format));
      EXPECT_EQ(m.content, "Calling <tools> now.");
      EXPECT_EQ(m.reasoning_content, thinking ? "need data, 2 < 3" : "");
      ASSERT_EQ(m.tool_calls.size(), 2u);
      EXPECT_EQ(m.tool_calls[0].name, "search");
      EXPECT_EQ(m.tool_calls[0].arguments, a.tool_calls[0].arguments);
      EXPECT_EQ(m.tool_calls[1].name, "noop");
      EXPECT_EQ(m.tool_calls[1].arguments, "{}");
      EXPECT_TRUE(m.ended_with_eos);
      check_all_splits(reply, opts(thinking, format), true);
    }
  }
}

TEST(DsmlParser, MalformedBecomesContent) {
  // Block header broken before any call: the markup is content, verbatim.
  const std::string broken = "x\n\n<" T " calls>oops <" T " invoke name=\"f\">\n";
  ParsedMessage m = parse_completion(broken, opts(false));
  EXPECT_EQ(m.content, broken);
  EXPECT_TRUE(m.tool_calls.empty());
  check_all_splits(broken, opts(false), true);
  // Truncated inside a string value: the call is closed and its arguments stay valid JSON.
  const std::string cut = "\n\n<" T " calls>\n<" T " invoke name=\"f\">\n<" T
                          " parameter name=\"k\" string=\"true\">partial va";
  m = parse_completion(cut, opts(false));
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"k": "partial va"})");
  check_all_splits(cut, opts(false), false);
  // Duplicate parameter: the call keeps what was complete; the rest is content.
  const std::string dup = "\n\n<" T " calls>\n<" T " invoke name=\"f\">\n<" T
                          " parameter name=\"k\" string=\"false\">1</" T " parameter>\n<" T
                          " parameter name=\"k\" string=\"false\">2</" T " parameter>\n</" T
                          " invoke>\n</" T " calls>";
  m = parse_completion(dup, opts(false));
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"k": 1})");
  EXPECT_EQ(m.content.rfind("<" T " parameter name=\"k\" string=\"false\">2", 0), 0u) << m.content;
  check_all_splits(dup, opts(false), false);
}

TEST(DsmlParser, SeededFuzzOfMalformedDsml) {
  std::mt19937 rng(20261129);
  const std::vector<std::string> pieces = {
      "\n\n<" T " calls>\n", "<" T " invoke name=\"f\">\n", "<" T " parameter name=\"a\" string=\"true\">",
      "<" T " parameter name=\"b\" string=\"false\">", "</" T " parameter>\n", "</" T " invoke>\n",
      "</" T " calls>", EOS, "</think>", "\n", "\n\n", "<", ">", "\"", "text", "é", "{\"x\": 1}", "｜",
      "<｜", " ", "name=\"", "true", "false"};
  std::vector<std::string> seeds = {kWeatherCall};
  int with_calls = 0, preserved = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    std::string text;
    if (iter % 2 == 0) {
      const int n = 1 + static_cast<int>(rng() % 14);
      for (int i = 0; i < n; ++i) text += pieces[rng() % pieces.size()];
    } else {
      text = seeds[0];
      const int edits = 1 + static_cast<int>(rng() % 4);
      // Edits keep UTF-8 valid (pieces reach the parser from a detokenizer as whole characters).
      auto boundary = [&](size_t i) {
        while (i > 0 && i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) --i;
        return i;
      };
      for (int e = 0; e < edits && !text.empty(); ++e) {
        const size_t at = boundary(rng() % text.size());
        switch (rng() % 3) {
          case 0: text.erase(at, boundary(std::min(text.size(), at + 1 + rng() % 3)) - at); break;
          case 1: text.insert(at, pieces[rng() % pieces.size()]); break;
          default: text.resize(at); break;
        }
      }
    }
    const ParserOptions o = opts(rng() % 2 == 0);
    const ParsedMessage whole = parse_completion(text, o);
    with_calls += !whole.tool_calls.empty();
    for (const ParsedToolCall& call : whole.tool_calls) {
      auto parsed = nlohmann::json::parse(call.arguments, nullptr, false);
      EXPECT_TRUE(parsed.is_object()) << call.arguments;
    }
    // Text with no tool call, no EOS and no complete block end is preserved as content/reasoning.
    if (whole.tool_calls.empty() && text.find(EOS) == std::string::npos &&
        text.find("</" T " calls>") == std::string::npos) {
      std::string back = whole.reasoning_content;
      if (o.starts_in_reasoning && text.find("</think>") != std::string::npos) back += "</think>";
      back += whole.content;
      ++preserved;
      EXPECT_EQ(back, text) << "reasoning=" << whole.reasoning_content;
    }
    std::vector<size_t> cuts;
    for (size_t i = 1; i < text.size(); ++i)
      if (rng() % 5 == 0) cuts.push_back(i);
    expect_same(stream(text, cuts, o), whole, "fuzz " + std::to_string(iter));
    std::vector<size_t> bytes;
    for (size_t i = 1; i < text.size(); ++i) bytes.push_back(i);
    expect_same(stream(text, bytes, o), whole, "fuzz bytes " + std::to_string(iter));
  }
  // Both kinds of outcome are exercised (counts for this seed: see the failure message).
  EXPECT_GT(with_calls, 100) << with_calls;
  EXPECT_GT(preserved, 100) << preserved;
  std::printf("fuzz: %d with tool calls, %d checked for preservation\n", with_calls, preserved);
}

}  // namespace
}  // namespace dsv4::chat
