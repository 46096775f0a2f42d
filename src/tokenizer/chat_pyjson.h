// JSON text exactly as Python's json.dumps(value, ensure_ascii=False) writes it (the prompt encoder's rule).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace dsv4::chat {

// Separators ", " and ": ", keys in the object's own order, non-ASCII kept raw, floats in Python
// repr form (shortest round trip; exponent form below 1e-4 and from 1e16: 1e-05, 1e+16, 1.0).
std::string python_json_dumps(const nlohmann::ordered_json& value);
void append_python_json(std::string& out, const nlohmann::ordered_json& value);

// A JSON string literal with quotes: escapes \" \\ \n \r \t \b \f and \u00XX for other controls.
// Works byte by byte on UTF-8, so it may be applied to any split of the text.
void append_python_json_string(std::string& out, std::string_view text);

// Python repr() of a finite double.
std::string python_float_repr(double value);

}  // namespace dsv4::chat
