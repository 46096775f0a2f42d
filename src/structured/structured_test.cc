// The byte matcher against JSON Schema's meaning, token masks against a brute-force check of every token, and
// random walks under a mask whose outputs must parse (nlohmann::json) and validate (a small checker written here
// from the JSON Schema rules, independent of the matcher).
#include <gtest/gtest.h>

#include <random>

#include "structured/grammar_constraint.h"
#include "structured/json_schema.h"

namespace dsv4::structured {
namespace {

using ojson = nlohmann::ordered_json;

Grammar compile(const char* schema) {
  StatusOr<Grammar> g = json_schema_grammar(ojson::parse(schema));
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return g.ok() ? std::move(*g) : Grammar{};
}

// Whole-text acceptance: every byte allowed and the end allowed after the last.
bool accepts(const Grammar& g, std::string_view text) {
  Matcher m(g);
  MatchState s;
  m.start(s);
  return m.feed(s, text) && m.may_end(s);
}

TEST(Matcher, ObjectPropertiesInOrderWithRequired) {
  const Grammar g = compile(R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
      "tags":{"type":"array","items":{"type":"string"},"maxItems":2}},"required":["name","age"]})");
  EXPECT_TRUE(accepts(g, R"({"name":"Ann","age":31})"));
  EXPECT_TRUE(accepts(g, "{\n  \"name\": \"Ann\",\n  \"age\": -3,\n  \"tags\": [\"a\", \"b\"]\n}"));
  EXPECT_TRUE(accepts(g, R"(  {"name":"\u00e9\n","age":0})"));
  EXPECT_FALSE(accepts(g, R"({"name":"Ann"})"));                       // age is required
  EXPECT_FALSE(accepts(g, R"({"age":3,"name":"Ann"})"));               // declared order
  EXPECT_FALSE(accepts(g, R"({"name":"Ann","age":3.5})"));             // integer
  EXPECT_FALSE(accepts(g, R"({"name":"Ann","age":03})"));              // leading zero
  EXPECT_FALSE(accepts(g, R"({"name":"Ann","age":3,"tags":["a","b","c"]})"));  // maxItems
  EXPECT_FALSE(accepts(g, R"({"name":"Ann","age":3,})"));              // trailing comma
  EXPECT_FALSE(accepts(g, R"({"name":"Ann","age":3,"x":1})"));         // undeclared key
  EXPECT_FALSE(accepts(g, R"({"name":"Ann","age":3} )"));              // nothing after the value
  EXPECT_FALSE(accepts(g, "{\"name\":\"a\tb\",\"age\":1}"));           // raw control character in a string
  EXPECT_FALSE(accepts(g, "{\"name\":\"\xC0\xAF\",\"age\":1}"));       // overlong UTF-8
  EXPECT_FALSE(accepts(g, "{\"name\":\"\xED\xA0\x80\",\"age\":1}"));   // a UTF-16 surrogate in UTF-8
}

TEST(Matcher, EnumsConstsAnyOfAndRefs) {
  const Grammar g = compile(R"({"$defs":{"node":{"type":"object","properties":{"v":{"enum":[1,10,"x",null]},
      "next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"]}},
      "$ref":"#/$defs/node"})");
  EXPECT_TRUE(accepts(g, R"({"v":1,"next":null})"));
  EXPECT_TRUE(accepts(g, R"({"v":10,"next":{"v":"x","next":{"v":null,"next":null}}})"));
  EXPECT_FALSE(accepts(g, R"({"v":100,"next":null})"));
  EXPECT_FALSE(accepts(g, R"({"v":"y","next":null})"));
  EXPECT_FALSE(accepts(g, R"({"v":1})"));
  const Grammar c = compile(R"({"const":"on"})");
  EXPECT_TRUE(accepts(c, R"("on")"));
  EXPECT_FALSE(accepts(c, R"("off")"));
  const Grammar n = compile(R"({"type":["number","null"]})");
  EXPECT_TRUE(accepts(n, "-1.5e+3"));
  EXPECT_TRUE(accepts(n, "null"));
  EXPECT_FALSE(accepts(n, "1."));
  EXPECT_FALSE(accepts(n, "\"1\""));
}

TEST(Matcher, StringLengthsAndFreeObjects) {
  const Grammar g = compile(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_FALSE(accepts(g, R"("a")"));
  EXPECT_TRUE(accepts(g, R"("\u00e9b")"));
  EXPECT_TRUE(accepts(g, "\"\xE2\x82\xAC\xE2\x82\xAC\""));  // two code points, six bytes
  EXPECT_FALSE(accepts(g, R"("abcd")"));
  const Grammar o = json_object_grammar();
  EXPECT_TRUE(accepts(o, R"({"a":[1,{"b":true},"c"],"d":{}})"));
  EXPECT_FALSE(accepts(o, "[1]"));
  EXPECT_FALSE(accepts(o, R"({"a":tru})"));
  const Grammar m = compile(R"({"type":"object","additionalProperties":{"type":"boolean"}})");
  EXPECT_TRUE(accepts(m, R"({"x":true,"y":false})"));
  EXPECT_FALSE(accepts(m, R"({"x":1})"));
}

TEST(Matcher, BoundedIntegers) {
  const Grammar g = compile(R"({"type":"integer","minimum":-15,"exclusiveMaximum":120})");
  for (const char* ok : {"-15", "-9", "0", "7", "119", "99"}) EXPECT_TRUE(accepts(g, ok)) << ok;
  for (const char* bad : {"-16", "-150", "120", "1000", "-0x", "01", "1.5"}) EXPECT_FALSE(accepts(g, bad)) << bad;
  // zod's int(): the safe-integer range.
  const Grammar safe = compile(R"({"type":"integer","minimum":-9007199254740991,"maximum":9007199254740991})");
  EXPECT_TRUE(accepts(safe, "-9007199254740991"));
  EXPECT_TRUE(accepts(safe, "42"));
  EXPECT_FALSE(accepts(safe, "9007199254740992"));
  const Grammar pos = compile(R"({"type":"integer","minimum":5})");
  EXPECT_FALSE(accepts(pos, "-1"));
  EXPECT_FALSE(accepts(pos, "4"));
  EXPECT_TRUE(accepts(pos, "40"));
}

TEST(Matcher, WhitespaceAndNumbersAreBounded) {
  const Grammar g = compile(R"({"type":"array","items":{"type":"number"}})");
  EXPECT_TRUE(accepts(g, "[" + std::string(12, ' ') + "1]"));
  EXPECT_FALSE(accepts(g, "[" + std::string(13, ' ') + "1]"));
  EXPECT_TRUE(accepts(g, "[" + std::string(16, '9') + "]"));
  EXPECT_FALSE(accepts(g, "[" + std::string(17, '9') + "]"));
}

TEST(Schema, RefusalsNameTheKeyword) {
  struct Case {
    const char* schema;
    const char* keyword;
  };
  const Case cases[] = {
      {R"({"type":"string","pattern":"^a"})", "'pattern'"},
      {R"({"type":"string","format":"email"})", "'format'"},
      {R"({"type":"number","minimum":0})", "'minimum'"},
      {R"({"type":"object","properties":{"a":{"type":"string"}},"required":["b"]})", "'required'"},
      {R"({"allOf":[{"type":"string"}]})", "'allOf'"},
      {R"({"anyOf":[{"type":"object"},{"type":"object","properties":{"a":{}}}]})", "'anyOf'"},
      {R"({"$ref":"#/$defs/a","$defs":{"a":{"$ref":"#/$defs/a"}}})", "'$ref'"},
      {R"({"$ref":"https://example.com/s.json"})", "'$ref'"},
      {R"({"type":"array","items":[{"type":"string"}]})", "'items'"},
      {R"({"type":"wat"})", "'type'"},
      {R"({"$defs":{"n":{"type":"object","properties":{"c":{"$ref":"#/$defs/n"}},"required":["c"]}},"$ref":"#/$defs/n"})",
       "never ends"},
  };
  for (const Case& c : cases) {
    StatusOr<Grammar> g = json_schema_grammar(ojson::parse(c.schema));
    ASSERT_FALSE(g.ok()) << c.schema;
    EXPECT_NE(g.status().message().find(c.keyword), std::string::npos) << g.status().message();
  }
  ojson big = {{"enum", ojson::array()}};
  for (int i = 0; i < 2000; ++i) big["enum"].push_back(i);
  StatusOr<Grammar> g = json_schema_grammar(big);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("'enum' has 2000 values"), std::string::npos);
}

// A vocabulary of every single byte plus multi-byte pieces typical of JSON tokenizations.
std::shared_ptr<const Vocabulary> test_vocab() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  for (const char* s : {"{\"", "\":", "\",", "\"}", "},", "}}", "true", "false", "null", "name", "\"name\"",
                        "age", "\": \"", "\n  ", "  ", "12", "0.5", "e+", "\\n", "\\u00", "\xC3\xA9", "\xE2\x82",
                        "]}", "[\"", "\"]", ", \"", "tags", "\"v\":", "},{", "<special>"}) {
    bytes.push_back(s);
  }
  std::vector<bool> usable(bytes.size(), true);
  usable.back() = false;  // a special token: never allowed
  return std::make_shared<Vocabulary>(std::move(bytes), std::move(usable));
}

// Validation from the JSON Schema rules, for the subset the tests use.
bool valid(const ojson& v, const ojson& s, const ojson& doc) {
  if (s.contains("$ref")) {
    const std::string r = s["$ref"];
    return valid(v, doc["$defs"][r.substr(std::string("#/$defs/").size())], doc);
  }
  if (s.contains("enum")) {
    for (const auto& e : s["enum"]) {
      if (e == v) return true;
    }
    return false;
  }
  if (s.contains("anyOf")) {
    for (const auto& a : s["anyOf"]) {
      if (valid(v, a, doc)) return true;
    }
    return false;
  }
  const std::string t = s.value("type", "");
  if (t == "string") {
    if (!v.is_string()) return false;
    return !s.contains("maxLength") || v.get<std::string>().size() <= s["maxLength"].get<size_t>() * 4;
  }
  if (t == "integer") return v.is_number_integer();
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  if (t == "array") {
    if (!v.is_array()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    for (const auto& e : v) {
      if (!valid(e, s["items"], doc)) return false;
    }
    return true;
  }
  if (t == "object") {
    if (!v.is_object()) return false;
    for (const auto& r : s.value("required", ojson::array())) {
      if (!v.contains(r.get<std::string>())) return false;
    }
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!s["properties"].contains(it.key())) return false;
      if (!valid(it.value(), s["properties"][it.key()], doc)) return false;
    }
    return true;
  }
  return true;
}

const char* kWalkSchema = R"({"$defs":{"item":{"type":"object","properties":{"v":{"enum":[1,10,"x"]},
    "sub":{"anyOf":[{"$ref":"#/$defs/item"},{"type":"null"}]}},"required":["v"]}},
    "type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer"},
    "score":{"type":"number"},"ok":{"type":"boolean"},"tags":{"type":"array","items":{"type":"string",
    "maxLength":4},"minItems":1,"maxItems":3},"items":{"type":"array","items":{"$ref":"#/$defs/item"},"maxItems":2}},
    "required":["name","age","tags"]})";

TEST(GrammarConstraint, MasksEqualBruteForceAndWalksValidate) {
  const ojson schema = ojson::parse(kWalkSchema);
  StatusOr<Grammar> g = json_schema_grammar(schema);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  auto vocab = test_vocab();
  auto c = std::make_shared<GrammarConstraint>(vocab, std::move(*g));
  std::mt19937 rng(7);
  int finished = 0;
  for (int walk = 0; walk < 200; ++walk) {
    std::unique_ptr<lanes::ConstraintCursor> cur = c->start();
    std::string out;
    for (int step = 0; step < 400; ++step) {
      std::shared_ptr<const lanes::TokenMask> m = cur->allowed();
      // Brute force: token t is allowed iff all its bytes are.
      for (TokenId t = 0; t < vocab->size(); ++t) {
        auto probe = cur->clone();
        ASSERT_EQ(m->contains(t), probe->advance(t)) << "token " << t << " after " << out;
      }
      if (cur->may_end() && (m->empty() || rng() % 4 == 0)) break;
      ASSERT_FALSE(m->empty()) << "stuck after " << out;
      const std::vector<TokenId> ids = m->ids();
      // Prefer closing tokens now and then so walks end.
      const TokenId t = ids[rng() % ids.size()];
      ASSERT_TRUE(cur->advance(t));
      out += vocab->bytes(t);
    }
    if (!cur->may_end()) continue;
    ++finished;
    const ojson v = ojson::parse(out, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << out;
    EXPECT_TRUE(valid(v, schema, schema)) << out;
  }
  EXPECT_GT(finished, 20);  // enough walks ended to mean something
  EXPECT_GT(c->stats().masks_cached, 0);
}

}  // namespace
}  // namespace dsv4::structured
