// Python-compatible JSON serialisation used for tool schemas and tool-call arguments in prompts.
#include "tokenizer/chat_pyjson.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace dsv4::chat {

void append_python_json_string(std::string& out, std::string_view text) {
  out.push_back('"');
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
}

std::string python_float_repr(double value) {
  if (value == 0) return std::signbit(value) ? "-0.0" : "0.0";
  // Shortest round-trip digits in scientific form: "-d.ddde[+-]x".
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  const bool negative = sci.front() == '-';
  if (negative) sci.remove_prefix(1);
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos))
    if (c != '.') digits.push_back(c);
  const int exponent = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
  std::string out = negative ? "-" : "";
  // Python (float_repr_style 'short'): exponent form when exponent < -4 or exponent >= 16.
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += ebuf;
  } else if (exponent < 0) {
    out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  } else {
    const size_t int_len = static_cast<size_t>(exponent) + 1;
    if (digits.size() <= int_len) {
      out += digits + std::string(int_len - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, int_len) + "." + digits.substr(int_len);
    }
  }
  return out;
}

void append_python_json(std::string& out, const nlohmann::ordered_json& value) {
  using V = nlohmann::ordered_json::value_t;
  switch (value.type()) {
    case V::null: out += "null"; break;
    case V::boolean: out += value.get<bool>() ? "true" : "false"; break;
    case V::number_integer: out += std::to_string(value.get<int64_t>()); break;
    case V::number_unsigned: out += std::to_string(value.get<uint64_t>()); break;
    case V::number_float: {
      const double d = value.get<double>();
      // Python writes NaN / Infinity (allow_nan=True); JSON input never carries them.
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
      else out += python_float_repr(d);
      break;
    }
    case V::string: append_python_json_string(out, value.get_ref<const std::string&>()); break;
    case V::array: {
      out.push_back('[');
      bool first = true;
      for (const auto& item : value) {
        if (!first) out += ", ";
        first = false;
        append_python_json(out, item);
      }
      out.push_back(']');
      break;
    }
    case V::object: {
      out.push_back('{');
      bool first = true;
      for (const auto& [key, item] : value.items()) {
        if (!first) out += ", ";
        first = false;
        append_python_json_string(out, key);
        out += ": ";
        append_python_json(out, item);
      }
      out.push_back('}');
      break;
    }
    case V::binary:
    case V::discarded: out += "null"; break;
  }
}

std::string python_json_dumps(const nlohmann::ordered_json& value) {
  std::string out;
  append_python_json(out, value);
  return out;
}

}  // namespace dsv4::chat
