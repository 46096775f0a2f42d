// Chat rendering goldens: tokenizer-and-chat.md §2.3/§2.5 strings and prompts derived by hand from its rules.
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "tokenizer/chat_openai.h"
#include "tokenizer/v41_tokenizer.h"

namespace dsv4::chat {
namespace {

#define BOS "<｜begin▁of▁sentence｜>"
#define EOS "<｜end▁of▁sentence｜>"
#define SYS "<｜System｜>"
#define USR "<｜User｜>"
#define AST "<｜Assistant｜>"
#define EFFORT(n) "Reasoning Effort: " #n " (range 1-100, the higher the value, the more thorough the reasoning)\n\n"

Message msg(Role role, std::string text) {
  Message m;
  m.role = role;
  m.content.push_back({ContentPart::Kind::text, std::move(text), ""});
  return m;
}

Message assistant(std::string text, std::optional<std::string> reasoning = std::nullopt,
                  std::vector<ToolCall> calls = {}) {
  Message m = msg(Role::assistant, std::move(text));
  m.reasoning_content = std::move(reasoning);
  m.tool_calls = std::move(calls);
  return m;
}

Message tool_result(std::string id, std::string text) {
  Message m = msg(Role::tool, std::move(text));
  m.tool_call_id = std::move(id);
  return m;
}

std::string render(const Conversation& c) {
  auto r = render_conversation(c);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? r->text : "";
}

Conversation chat_mode(std::vector<Message> msgs) {
  Conversation c;
  c.messages = std::move(msgs);
  c.options.thinking = false;
  return c;
}

Conversation thinking_mode(std::vector<Message> msgs) {
  Conversation c;
  c.messages = std::move(msgs);
  c.options.thinking = true;
  return c;
}

Tool weather_tool() {
  return {nlohmann::ordered_json::parse(
      R"({"name":"get_weather","description":"Get weather","parameters":{"type":"object",)"
      R"("properties":{"location":{"type":"string"}},"required":["location"]}})")};
}

// tokenizer-and-chat.md §2.3 short goldens.
TEST(ChatTemplate, DocGoldenChatOneUserTurn) {
  EXPECT_EQ(render(chat_mode({msg(Role::user, "Hi")})), BOS USR "Hi" AST "</think>");
}

TEST(ChatTemplate, DocGoldenChatWithSystem) {
  EXPECT_EQ(render(chat_mode({msg(Role::system, "You are a helpful assistant."),
                              msg(Role::user, "Hi")})),
            BOS SYS "You are a helpful assistant." USR "Hi" AST "</think>");
}

TEST(ChatTemplate, DocGoldenThinkingDefaultEffort) {
  auto r = render_conversation(thinking_mode({msg(Role::user, "Hi")}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->text, BOS SYS EFFORT(75) USR "Hi" AST "<think>");
  EXPECT_TRUE(r->reply_starts_in_reasoning);
}

TEST(ChatTemplate, DocGoldenThinkingMultiTurnDropsEarlierReasoning) {
  Conversation c = thinking_mode(
      {msg(Role::system, "You are a helpful assistant."), msg(Role::user, "Hello"),
       assistant("Hi there! How can I help you?", "greeting, dropped"),
       msg(Role::user, "What is the capital of France?"),
       assistant("The capital of France is Paris.",
                 "The user asks about the capital of France. It is Paris.")});
  EXPECT_EQ(render(c),
            BOS SYS EFFORT(75) "You are a helpful assistant." USR "Hello" AST
            "</think>Hi there! How can I help you?" EOS USR "What is the capital of France?" AST
            "<think>The user asks about the capital of France. It is Paris.</think>"
            "The capital of France is Paris." EOS);
}

// §2.5: the assistant tool-call block of TF template.jsonl case 1.
TEST(ChatTemplate, DocGoldenAssistantToolCalls) {
  Conversation c = chat_mode(
      {msg(Role::user, "Weather?"),
       assistant("", std::nullopt,
                 {{"c1", "get_weather", R"({"location": "Beijing", "unit": "celsius"})"}})});
  EXPECT_EQ(render(c), BOS USR "Weather?" AST
            "</think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n"
            "<｜DSML｜ parameter name=\"location\" string=\"true\">Beijing</｜DSML｜ parameter>\n"
            "<｜DSML｜ parameter name=\"unit\" string=\"true\">celsius</｜DSML｜ parameter>\n"
            "</｜DSML｜ invoke>\n</｜DSML｜ calls>" EOS);
}

TEST(ChatTemplate, EffortLevelsAndThinkingOff) {
  for (auto [effort, line] : {std::pair{50, EFFORT(50)}, std::pair{100, EFFORT(100)},
                              std::pair{30, EFFORT(30)}}) {
    Conversation c = thinking_mode({msg(Role::system, "S"), msg(Role::user, "Hi")});
    c.options.reasoning_effort = effort;
    EXPECT_EQ(render(c), std::string(BOS SYS) + line + "S" USR "Hi" AST "<think>");
  }
  EXPECT_EQ(*reasoning_effort_from_name("low"), 50);
  EXPECT_EQ(*reasoning_effort_from_name("high"), 75);
  EXPECT_EQ(*reasoning_effort_from_name("max"), 100);
  EXPECT_EQ(*reasoning_effort_from_name("none"), 0);
  EXPECT_FALSE(reasoning_effort_from_name("extreme").ok());
  Conversation bad = thinking_mode({msg(Role::user, "Hi")});
  bad.options.reasoning_effort = 101;
  EXPECT_FALSE(render_conversation(bad).ok());
}

TEST(ChatTemplate, ToolsAttachToAnInsertedEmptySystem) {
  Conversation c = chat_mode({msg(Role::user, "Hi")});
  c.tools.push_back(weather_tool());
  const std::string expected_tools =
      "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can "
      "invoke tools by writing a \"<｜DSML｜ calls>\" block like the following:\n\n"
      "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"$TOOL_NAME\">\n<｜DSML｜ parameter "
      "name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜ parameter>\n...\n"
      "</｜DSML｜ invoke>\n<｜DSML｜ invoke name=\"$TOOL_NAME2\">\n...\n</｜DSML｜ invoke>\n"
      "</｜DSML｜ calls>\n\nString parameters should be specified as is and set `string=\"true\"`. "
      "For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and "
      "set `string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by <think>), you MUST "
      "output your complete reasoning inside <think>...</think> BEFORE any tool calls or final "
      "response.\n\nOtherwise, output directly after </think> with tool calls or final response."
      "\n\n### Available Tool Schemas\n\n"
      R"({"name": "get_weather", "description": "Get weather", "parameters": {"type": "object", )"
      R"("properties": {"location": {"type": "string"}}, "required": ["location"]}})"
      "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
      "tool calls.\n";
  EXPECT_EQ(render(c), BOS SYS "\n\n" + expected_tools + USR "Hi" AST "</think>");
  // With a system message the block follows its content; thinking keeps the effort line first.
  Conversation t = thinking_mode({msg(Role::user, "Hi"), msg(Role::system, "Late system")});
  t.tools.push_back(weather_tool());
  EXPECT_EQ(render(t), BOS SYS EFFORT(75) USR "Hi" SYS "Late system\n\n" + expected_tools +
                           AST "<think>");
}

TEST(ChatTemplate, ToolResultsMergeAndFollowCallOrder) {
  Conversation c = chat_mode(
      {msg(Role::user, "Go"),
       assistant("", std::nullopt, {{"a", "f", R"({"x": 1})"}, {"b", "g", R"({})"}}),
       tool_result("b", "B-result"), tool_result("a", "A-result"), msg(Role::user, "thanks")});
  EXPECT_EQ(render(c),
            BOS USR "Go" AST "</think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n"
            "<｜DSML｜ parameter name=\"x\" string=\"false\">1</｜DSML｜ parameter>\n"
            "</｜DSML｜ invoke>\n<｜DSML｜ invoke name=\"g\">\n\n</｜DSML｜ invoke>\n</｜DSML｜ calls>" EOS
            USR "<tool_result>A-result</tool_result>\n\n<tool_result>B-result</tool_result>\n\nthanks"
            AST "</think>");
}

TEST(ChatTemplate, ToolsKeepAllReasoningInThinkingMode) {
  Conversation c = thinking_mode(
      {msg(Role::user, "Go"), assistant("", "plan", {{"a", "f", R"({"q": "v"})"}}),
       tool_result("a", "R"), assistant("done", "wrap up"), msg(Role::user, "again")});
  c.tools.push_back(weather_tool());
  const std::string out = render(c);
  const std::string tail =
      USR "Go" AST "<think>plan</think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n"
      "<｜DSML｜ parameter name=\"q\" string=\"true\">v</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n"
      "</｜DSML｜ calls>" EOS USR "<tool_result>R</tool_result>" AST
      "<think>wrap up</think>done" EOS USR "again" AST "<think>";
  ASSERT_GE(out.size(), tail.size());
  EXPECT_EQ(out.substr(out.size() - tail.size()), tail);
  EXPECT_EQ(out.rfind(BOS SYS EFFORT(75) "\n\n## Tools\n\n", 0), 0u);
}

TEST(ChatTemplate, ArgumentValuesUsePythonJson) {
  // Non-string values are json.dumps-ed (CPython 3.11 output); strings go in raw, unescaped.
  Conversation c = chat_mode(
      {msg(Role::user, "u"),
       assistant("", std::nullopt,
                 {{"a", "f", R"({"n": 1.0, "x": [1, 2.5e-7], "o": {"k": null}, "s": "é\n<", "b": true})"}})});
  const std::string out = render(c);
  EXPECT_NE(out.find("name=\"n\" string=\"false\">1.0<"), std::string::npos);
  EXPECT_NE(out.find("name=\"x\" string=\"false\">[1, 2.5e-07]<"), std::string::npos);
  EXPECT_NE(out.find("name=\"o\" string=\"false\">{\"k\": null}<"), std::string::npos);
  EXPECT_NE(out.find("name=\"s\" string=\"true\">é\n<</"), std::string::npos);
  EXPECT_NE(out.find("name=\"b\" string=\"false\">true<"), std::string::npos);
  // Double-encoded JSON is decoded; a non-object becomes {"arguments": raw}.
  Conversation d = chat_mode({msg(Role::user, "u"),
                              assistant("", std::nullopt, {{"a", "f", R"("{\"k\": 2}")"},
                                                           {"b", "g", "not json"}})});
  const std::string out2 = render(d);
  EXPECT_NE(out2.find("name=\"k\" string=\"false\">2<"), std::string::npos);
  EXPECT_NE(out2.find("name=\"arguments\" string=\"true\">not json<"), std::string::npos);
}

TEST(ChatTemplate, MidConversationSystemIsAUserTurn) {
  Conversation c = chat_mode({msg(Role::user, "a"), assistant("b"), msg(Role::system, "c")});
  EXPECT_EQ(render(c), BOS USR "a" AST "</think>b" EOS SYS "c" AST "</think>");
}

TEST(ChatTemplate, BosGenerationPromptAndContinuation) {
  Conversation c = chat_mode({msg(Role::user, "a")});
  c.options.add_bos = false;
  c.options.add_generation_prompt = false;
  EXPECT_EQ(render(c), USR "a");
  Conversation p = thinking_mode({msg(Role::user, "a"), assistant("partial", "r")});
  p.messages.back().without_eos = true;
  auto r = render_conversation(p);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->text, BOS SYS EFFORT(75) USR "a" AST "<think>r</think>partial");
  EXPECT_FALSE(r->reply_starts_in_reasoning);
}

TEST(ChatTemplate, ImagesAndRefusals) {
  Message m = msg(Role::user, "look");
  m.content.push_back({ContentPart::Kind::image, "", "data:image/png;base64,AAAA", "messages[0].content[1]"});
  auto r = render_conversation(chat_mode({m}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->text, BOS USR "look\n\n<｜deepseek_image｜>" AST "</think>");
  ASSERT_EQ(r->images.size(), 1u);
  EXPECT_EQ(r->images[0].url, "data:image/png;base64,AAAA");
  EXPECT_EQ(r->images[0].source, "messages[0].content[1]");
  auto typed = render_conversation(chat_mode({msg(Role::user, "x<｜deepseek_image｜>")}));
  EXPECT_FALSE(typed.ok());
  EXPECT_NE(typed.status().message().find("messages[0].content[0]"), std::string::npos);
  Message bad = msg(Role::user, "x");
  bad.tool_calls.push_back({"a", "f", "{}"});
  auto refused = render_conversation(chat_mode({bad}));
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("messages[0]"), std::string::npos);
}

// Images are listed in the order their placeholders appear in the text: tool results are sorted by the calls'
// order, and an assistant's and a system message's images sit where their turns render.
TEST(ChatTemplate, ImagesInTextOrder) {
  auto with_image = [](Message m, const std::string& url) {
    m.content.push_back({ContentPart::Kind::image, "", url, "src:" + url});
    return m;
  };
  Conversation c = chat_mode({with_image(msg(Role::system, "S"), "sys"), with_image(msg(Role::user, "U"), "user"),
                              with_image(assistant("A", std::nullopt, {{"a", "f", "{}"}, {"b", "g", "{}"}}), "asst"),
                              with_image(tool_result("b", "second"), "tool-b"),
                              with_image(tool_result("a", "first"), "tool-a")});
  auto r = render_conversation(c);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  std::vector<std::string> order;
  for (const ImageRef& i : r->images) order.push_back(i.url);
  EXPECT_EQ(order, (std::vector<std::string>{"sys", "user", "asst", "tool-a", "tool-b"}));
  EXPECT_EQ(r->images[3].source, "src:tool-a");
  // The placeholders' places in the text agree: tool-a's result (holding its image) comes first.
  const std::string& text = r->text;
  EXPECT_LT(text.find("first"), text.find("second"));
  size_t count = 0;
  for (size_t at = text.find("<｜deepseek_image｜>"); at != std::string::npos; at = text.find("<｜deepseek_image｜>", at + 1))
    ++count;
  EXPECT_EQ(count, 5u);
}

TEST(ChatTemplate, V4Format) {
  // V4 / 0731: no <｜System｜> token, the "max" paragraph instead of a numeric effort, DSML tags
  // without the leading space.
  Conversation c = thinking_mode({msg(Role::system, "S"), msg(Role::user, "Hi"),
                                  assistant("", "r", {{"a", "f", R"({"k": "v"})"}}),
                                  tool_result("a", "R")});
  c.options.format = ChatFormat::v4;
  c.options.reasoning_effort = 100;
  c.options.drop_thinking = false;
  EXPECT_EQ(render(c),
            BOS "Reasoning Effort: Absolute maximum with no shortcuts permitted.\nYou MUST be very "
            "thorough in your thinking and comprehensively decompose the problem to resolve the root "
            "cause, rigorously stress-testing your logic against all potential paths, edge cases, and "
            "adversarial scenarios.\nExplicitly write out your entire deliberation process, "
            "documenting every intermediate step, considered alternative, and rejected hypothesis to "
            "ensure absolutely no assumption is left unchecked.\n\nS" USR "Hi" AST
            "<think>r</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
            "<｜DSML｜parameter name=\"k\" string=\"true\">v</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
            "</｜DSML｜tool_calls>" EOS USR "<tool_result>R</tool_result>" AST "<think>");
  c.options.reasoning_effort = 75;
  c.messages.resize(2);
  EXPECT_EQ(render(c), BOS "S" USR "Hi" AST "<think>");
  Message dev = msg(Role::developer, "D");
  Conversation d = chat_mode({dev, msg(Role::user, "u")});
  d.options.format = ChatFormat::v4;
  EXPECT_EQ(render(d), BOS USR "D" USR "u" AST "</think>");
  d.options.format = ChatFormat::v41;  // no developer role in the V4.1 release: rendered as system
  EXPECT_EQ(render(d), BOS SYS "D" USR "u" AST "</think>");
}

TEST(ChatTemplate, RenderedMarkersTokenizeAsSingleIds) {
  // tokenizer-and-chat.md §1.6: "<｜User｜>hi<｜Assistant｜></think>ok<｜end▁of▁sentence｜>" is
  // [128803, 6366, 128804, 1718, 37947, 32, 633, 1] with the V3 file, where </think> is not an added
  // token; with V4.1 it is id 128822 (§1.4), so the prompt must give the ids below.
  Conversation c = chat_mode({msg(Role::user, "hi"), assistant("ok")});
  c.options.add_bos = false;
  const std::string text = render(c);
  EXPECT_EQ(text, USR "hi" AST "</think>ok" EOS);
  auto tok = load_v41_tokenizer();
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ(tok->encode(text), (std::vector<TokenId>{128803, 6366, 128804, 128822, 633, 1}));
}

TEST(ChatOpenAi, ParsesRequestAndNamesBadFields) {
  auto c = conversation_from_openai_text(
      R"({"messages":[{"role":"system","content":"S"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},)"
      R"({"role":"assistant","content":null,"reasoning_content":"r","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},)"
      R"({"role":"tool","tool_call_id":"c1","content":"ok"}],)"
      R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"reasoning_effort":"max"})",
      ChatFormat::v41);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE(c->options.thinking);
  EXPECT_EQ(c->options.reasoning_effort, 100);
  ASSERT_EQ(c->messages.size(), 4u);
  EXPECT_EQ(c->messages[2].tool_calls[0].arguments, "{\"x\":1}");
  EXPECT_EQ(c->messages[3].tool_call_id, "c1");
  auto r = render_conversation(*c);
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->text.find(USR "a\n\nb" AST "<think>r</think>"), std::string::npos);

  auto off = conversation_from_openai_text(
      R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"reasoning_effort":"none"}})",
      ChatFormat::v41);
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->options.thinking);
  auto ds = conversation_from_openai_text(
      R"({"messages":[{"role":"user","content":"x"}],"thinking":{"type":"disabled"}})", ChatFormat::v41);
  ASSERT_TRUE(ds.ok());
  EXPECT_FALSE(ds->options.thinking);

  auto bad = conversation_from_openai_text(
      R"({"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":7}]})",
      ChatFormat::v41);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "messages[2].content: expected string or array of text parts");
  auto bad_role = conversation_from_openai_text(R"({"messages":[{"role":"robot","content":"a"}]})",
                                                ChatFormat::v41);
  ASSERT_FALSE(bad_role.ok());
  EXPECT_NE(bad_role.status().message().find("messages[0].role"), std::string::npos);
  auto bad_effort = conversation_from_openai_text(
      R"({"messages":[{"role":"user","content":"a"}],"reasoning_effort":0})", ChatFormat::v41);
  ASSERT_FALSE(bad_effort.ok());
  EXPECT_NE(bad_effort.status().message().find("reasoning_effort"), std::string::npos);
  auto bad_args = conversation_from_openai_text(
      R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":5}}]}]})",
      ChatFormat::v41);
  ASSERT_FALSE(bad_args.ok());
  EXPECT_NE(bad_args.status().message().find("messages[0].tool_calls[0].function.arguments"),
            std::string::npos);
  EXPECT_FALSE(conversation_from_openai_text("{not json", ChatFormat::v41).ok());
}

// History as clients send it: `reasoning` for reasoning_content, arguments as an object, null, "" or missing,
// content as null or text parts; what the encoding cannot hold is refused naming the message and field.
TEST(ChatOpenAi, HistoryAsClientsSendIt) {
  auto c = conversation_from_openai_text(
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"q"}]},)"
      R"({"role":"assistant","content":null,"reasoning":"thought","tool_calls":[)"
      R"({"id":"a","type":"function","function":{"name":"f","arguments":{"x":1,"s":"t"}}},)"
      R"({"id":"b","type":"function","function":{"name":"g","arguments":null}},)"
      R"({"id":"c","type":"function","function":{"name":"g","arguments":""}},)"
      R"({"id":"d","type":"function","function":{"name":"g"}}]},)"
      R"({"role":"tool","tool_call_id":"a","content":"1"},{"role":"tool","tool_call_id":"b","content":"2"},)"
      R"({"role":"tool","tool_call_id":"c","content":"3"},{"role":"tool","tool_call_id":"d","content":"4"}],)"
      R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}},)"
      R"({"type":"function","function":{"name":"g","parameters":{"type":"object"}}}]})",
      ChatFormat::v41);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto it = std::find_if(c->messages.begin(), c->messages.end(), [](const Message& x) { return x.role == Role::assistant; });
  ASSERT_NE(it, c->messages.end());
  const Message& m = *it;
  EXPECT_EQ(m.reasoning_content, std::optional<std::string>("thought"));
  ASSERT_EQ(m.tool_calls.size(), 4u);
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"x": 1, "s": "t"})");  // Python's json.dumps spacing, request order
  for (int i = 1; i < 4; ++i) EXPECT_EQ(m.tool_calls[i].arguments, "{}") << i;
  auto r = render_conversation(*c);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  // The calls without arguments render with no parameter at all (not a parameter named "arguments").
  EXPECT_EQ(r->text.find("name=\"arguments\""), std::string::npos) << r->text;
  EXPECT_NE(r->text.find("name=\"x\" string=\"false\">1"), std::string::npos) << r->text;
  EXPECT_NE(r->text.find("name=\"s\" string=\"true\">t"), std::string::npos) << r->text;

  struct Bad {
    const char* body;
    const char* field;
  };
  for (const Bad& b : std::vector<Bad>{
           {R"({"messages":[{"role":"user","content":"a","tool_calls":[]}]})", "messages[0].tool_calls"},
           {R"({"messages":[{"role":"user","content":"a"},{"role":"assistant","reasoning":7}]})",
            "messages[1].reasoning: expected a string"},
           {R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":[1]}}]}]})",
            "messages[0].tool_calls[0].function.arguments"},
           {R"({"messages":[{"role":"assistant","tool_calls":{"id":"x"}}]})", "messages[0].tool_calls: expected an array"},
           {R"({"messages":[{"role":"user","content":[{"type":"audio"}]}]})", "messages[0].content[0].type"},
           {R"({"messages":[{"role":"tool","tool_call_id":5,"content":"r"}]})", "messages[0].tool_call_id"},
       }) {
    auto bad = conversation_from_openai_text(b.body, ChatFormat::v41);
    ASSERT_FALSE(bad.ok()) << b.body;
    EXPECT_NE(bad.status().message().find(b.field), std::string::npos) << bad.status().message();
  }
}

}  // namespace
}  // namespace dsv4::chat
