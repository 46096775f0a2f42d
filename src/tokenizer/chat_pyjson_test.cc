// Python json.dumps compatibility; expected strings printed by CPython 3.11 json.dumps(v, ensure_ascii=False).
#include "tokenizer/chat_pyjson.h"

#include <gtest/gtest.h>

namespace dsv4::chat {
namespace {

using Json = nlohmann::ordered_json;

TEST(PythonJson, FloatReprMatchesCPython) {
  // (value, repr(value)) pairs printed by CPython 3.11.
  const std::pair<double, const char*> cases[] = {
      {1.0, "1.0"},          {0.1, "0.1"},
      {1e16, "1e+16"},       {1e15, "1000000000000000.0"},
      {1.5e16, "1.5e+16"},   {1e-5, "1e-05"},
      {0.0001, "0.0001"},    {2.5e-07, "2.5e-07"},
      {-0.0, "-0.0"},        {123456789.125, "123456789.125"},
      {1e300, "1e+300"},     {5e-324, "5e-324"},
      {3.141592653589793, "3.141592653589793"},
      {100.0, "100.0"},      {1e22, "1e+22"},
      {12345678901234567890.0, "1.2345678901234567e+19"},
  };
  for (const auto& [value, expected] : cases) EXPECT_EQ(python_float_repr(value), expected);
}

TEST(PythonJson, DumpsMatchesCPython) {
  Json v = Json::parse(
      "{\"a\": \"x\\\"y\\\\z\\n\\r\\t\\b\\f\\u0001\\u001f\\u007f\u00e9\u4e2d\U0001F600\","
      " \"b\": [1, -2, true, false, null, {\"c\": []}], \"d\": {}}");
  EXPECT_EQ(python_json_dumps(v),
            "{\"a\": \"x\\\"y\\\\z\\n\\r\\t\\b\\f\\u0001\\u001f\x7f\u00e9\u4e2d\U0001F600\", "
            "\"b\": [1, -2, true, false, null, {\"c\": []}], \"d\": {}}");
}

TEST(PythonJson, KeepsRequestKeyOrder) {
  Json v = Json::parse(R"({"type":"function","name":"get_weather","description":"Get weather",)"
                       R"("parameters":{"type":"object","properties":{"location":{"type":"string",)"
                       R"("description":"城市"},"unit":{"type":"string","enum":["celsius",)"
                       R"("fahrenheit"]}},"required":["location"]}})");
  EXPECT_EQ(python_json_dumps(v),
            R"({"type": "function", "name": "get_weather", "description": "Get weather", )"
            R"("parameters": {"type": "object", "properties": {"location": {"type": "string", )"
            R"("description": "城市"}, "unit": {"type": "string", "enum": ["celsius", )"
            R"("fahrenheit"]}}, "required": ["location"]}})");
}

}  // namespace
}  // namespace dsv4::chat
