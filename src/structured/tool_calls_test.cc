// The tool-call block grammar against texts written by hand in the DSML shape (chat_template.cc renders assistant
// calls the same way), and random walks whose every call names an offered tool with its required parameters.
#include "structured/tool_calls.h"

#include <gtest/gtest.h>

#include <random>

#include "structured/grammar_constraint.h"
#include "structured/matcher.h"

namespace dsv4::structured {
namespace {

using ojson = nlohmann::ordered_json;

const ToolMarkup kMarkup{"\n\n<｜DSML｜ calls>\n",          "</｜DSML｜ calls>",
                         "<｜DSML｜ invoke name=\"",          "</｜DSML｜ invoke>",
                         "<｜DSML｜ parameter name=\"",       "</｜DSML｜ parameter>"};

std::vector<ToolSpec> tools() {
  return {{"get_weather",
           ojson::parse(R"({"type":"object","properties":{"city":{"type":"string","maxLength":8},
             "unit":{"enum":["c","f"]},"days":{"type":"integer"}},"required":["city","unit"]})"),
           true},
          {"ping", ojson(), true}};
}

bool accepts(const Grammar& g, const std::string& text) {
  Matcher m(g);
  MatchState s;
  m.start(s);
  return m.feed(s, text) && m.may_end(s);
}

std::string param(const std::string& k, bool raw, const std::string& v) {
  return "<｜DSML｜ parameter name=\"" + k + "\" string=\"" + (raw ? "true" : "false") + "\">" + v +
         "</｜DSML｜ parameter>";
}
std::string invoke(const std::string& name, const std::string& params) {
  return "<｜DSML｜ invoke name=\"" + name + "\">\n" + params + "\n</｜DSML｜ invoke>";
}

TEST(ToolCalls, BlockFromTheNameOn) {
  StatusOr<Grammar> g = tool_call_grammar(kMarkup, tools(), {ToolStart::block_name, "", true});
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  const std::string w = param("city", true, "Paris") + "\n" + param("unit", true, "c");
  // The prompt ends with the first invoke_open: the text starts at the name.
  const std::string first = invoke("get_weather", w).substr(std::string("<｜DSML｜ invoke name=\"").size());
  EXPECT_TRUE(accepts(*g, first + "\n</｜DSML｜ calls>"));
  EXPECT_TRUE(accepts(*g, first + "\n" + invoke("ping", "") + "\n</｜DSML｜ calls>"));
  EXPECT_TRUE(accepts(*g, "get_weather\">\n" + w + "\n" + param("days", false, "3") + "\n</｜DSML｜ invoke>\n</｜DSML｜ calls>"));
  EXPECT_FALSE(accepts(*g, "get_weather\">\n" + param("city", true, "Paris") + "\n</｜DSML｜ invoke>\n</｜DSML｜ calls>"));
  EXPECT_FALSE(accepts(*g, "get_weather\">\n" + param("unit", true, "c") + "\n" + param("city", true, "P") +
                               "\n</｜DSML｜ invoke>\n</｜DSML｜ calls>"));  // declared order
  EXPECT_FALSE(accepts(*g, "get_weather\">\n" + param("city", true, "Paris") + "\n" + param("unit", true, "k") +
                               "\n</｜DSML｜ invoke>\n</｜DSML｜ calls>"));  // not in the enum
  EXPECT_FALSE(accepts(*g, "get_weather\">\n" + param("city", true, "Paris") + "\n" + param("unit", true, "c") + "\n" +
                               param("days", false, "3.5") + "\n</｜DSML｜ invoke>\n</｜DSML｜ calls>"));  // integer
  EXPECT_FALSE(accepts(*g, "get_weather\">\n" + param("city", true, "Marseille") + "\n" + param("unit", true, "c") +
                               "\n</｜DSML｜ invoke>\n</｜DSML｜ calls>"));  // maxLength 8
  EXPECT_FALSE(accepts(*g, "weather\">\n\n</｜DSML｜ invoke>\n</｜DSML｜ calls>"));  // not offered
  EXPECT_FALSE(accepts(*g, first));  // the block must close
}

TEST(ToolCalls, NamedSerialAndContent) {
  StatusOr<Grammar> named = tool_call_grammar(kMarkup, tools(), {ToolStart::named, "ping", false});
  ASSERT_TRUE(named.ok());
  EXPECT_TRUE(accepts(*named, "\n</｜DSML｜ invoke>\n</｜DSML｜ calls>"));
  EXPECT_FALSE(accepts(*named, "\n</｜DSML｜ invoke>\n" + invoke("ping", "") + "\n</｜DSML｜ calls>"));  // one call
  StatusOr<Grammar> content = tool_call_grammar(kMarkup, tools(), {ToolStart::content, "", true});
  ASSERT_TRUE(content.ok());
  EXPECT_TRUE(accepts(*content, "Sure, nothing to call."));
  EXPECT_TRUE(accepts(*content, "Let me check." + kMarkup.block_open + invoke("ping", "") + "\n</｜DSML｜ calls>"));
  EXPECT_FALSE(accepts(*content, "Let me check." + kMarkup.block_open + invoke("pong", "") + "\n</｜DSML｜ calls>"));
}

TEST(ToolCalls, RefusalsNameToolAndKeyword) {
  std::vector<ToolSpec> t = {{"f", ojson::parse(R"({"type":"object","properties":{"q":{"type":"string","pattern":"x"}}})"),
                              true}};
  StatusOr<Grammar> g = tool_call_grammar(kMarkup, t, {});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("tools[0] 'f'"), std::string::npos) << g.status().message();
  EXPECT_NE(g.status().message().find("'pattern'"), std::string::npos) << g.status().message();
  t[0].strict = false;  // not strict: the arguments stay free
  EXPECT_TRUE(tool_call_grammar(kMarkup, t, {}).ok());
}

TEST(ToolCalls, RandomWalksCallOfferedToolsWithRequiredParameters) {
  StatusOr<Grammar> g = tool_call_grammar(kMarkup, tools(), {ToolStart::block_name, "", true});
  ASSERT_TRUE(g.ok());
  std::vector<std::string> bytes;
  for (int b = 1; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  for (const char* s : {"｜DSML｜", "<｜DSML｜ parameter name=\"", "\" string=\"", "true\">", "get_weather", "ping",
                        "</｜DSML｜ parameter>", "\n</｜DSML｜ invoke>", "\n</｜DSML｜ calls>", "city", "unit"}) {
    bytes.push_back(s);
  }
  auto c = std::make_shared<GrammarConstraint>(std::make_shared<Vocabulary>(bytes, std::vector<bool>(bytes.size(), true)),
                                               std::move(*g));
  std::mt19937 rng(3);
  int ended = 0;
  for (int walk = 0; walk < 100; ++walk) {
    auto cur = c->start();
    std::string out;
    for (int step = 0; step < 600 && !cur->may_end(); ++step) {
      const std::vector<TokenId> ids = cur->allowed()->ids();
      ASSERT_FALSE(ids.empty()) << out;
      // Prefer multi-byte pieces (the markup) so walks end.
      std::vector<TokenId> long_ones;
      for (TokenId t : ids) {
        if (t >= 255) long_ones.push_back(t);
      }
      const TokenId t = !long_ones.empty() && rng() % 2 ? long_ones[rng() % long_ones.size()] : ids[rng() % ids.size()];
      ASSERT_TRUE(cur->advance(t));
      out += bytes[static_cast<size_t>(t)];
    }
    if (!cur->may_end()) continue;
    ++ended;
    // Every invoke names an offered tool; every get_weather call has city and unit, unit one of the enum.
    size_t at = 0;
    std::string text = "<｜DSML｜ invoke name=\"" + out;
    while ((at = text.find("invoke name=\"", at)) != std::string::npos) {
      at += 13;
      const std::string name = text.substr(at, text.find('"', at) - at);
      ASSERT_TRUE(name == "get_weather" || name == "ping") << out;
      const size_t end = text.find("</｜DSML｜ invoke>", at);
      const std::string body = text.substr(at, end - at);
      if (name == "get_weather") {
        EXPECT_NE(body.find("name=\"city\" string=\"true\">"), std::string::npos) << out;
        EXPECT_TRUE(body.find("name=\"unit\" string=\"true\">c</") != std::string::npos ||
                    body.find("name=\"unit\" string=\"true\">f</") != std::string::npos)
            << out;
      }
    }
    EXPECT_EQ(out.substr(out.size() - std::string("</｜DSML｜ calls>").size()), "</｜DSML｜ calls>");
  }
  EXPECT_GT(ended, 30);
}

}  // namespace
}  // namespace dsv4::structured
