// Tool-call blocks as a byte grammar: every call's name one of the offered tools, its arguments held to that tool's
// parameter schema, in the chat format's markup (DSML for the DeepSeek-V4 family):
//
//   block  = block_open invoke ("\n" invoke)* "\n" block_close          (one invoke when parallel calls are off)
//   invoke = invoke_open NAME "\">\n" params "\n" invoke_close
//   params = param ("\n" param)* | ""
//   param  = param_open KEY "\" string=\"true\">" TEXT param_close       (string-typed parameters, raw text)
//          | param_open KEY "\" string=\"false\">" JSON param_close      (any other type, a JSON value)
//
// Parameters come in the schema's order; optional ones may be left out, required ones may not.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/status.h"
#include "structured/grammar.h"
#include "structured/json_schema.h"

namespace dsv4::structured {

// The markup pieces, e.g. block_open "\n\n<｜DSML｜ calls>\n", invoke_open "<｜DSML｜ invoke name=\"",
// invoke_close "</｜DSML｜ invoke>", block_close "</｜DSML｜ calls>", param_open "<｜DSML｜ parameter name=\"",
// param_close "</｜DSML｜ parameter>".
struct ToolMarkup {
  std::string block_open, block_close, invoke_open, invoke_close, param_open, param_close;
  bool empty() const { return block_open.empty(); }
};

struct ToolSpec {
  std::string name;
  nlohmann::ordered_json parameters;  // a JSON Schema object (null or absent: no parameters)
  bool strict = false;                // a schema the grammar cannot hold is refused (else the arguments are free)
};

enum class ToolStart {
  content,     // free text that may end the reply, or open a block (strict tools under tool_choice auto)
  block_name,  // just after the first invoke_open: the name comes next (tool_choice required)
  named,       // just after the first invoke's header line: its parameters come next (a named tool_choice)
};

struct ToolGrammarOptions {
  ToolStart start = ToolStart::block_name;
  std::string named;      // ToolStart::named: the tool whose parameters come first
  bool parallel = true;   // more than one call per block
};

// Errors name the tool and the schema keyword ("tools[1] 'search': 'pattern' is not supported (at /properties/q)").
StatusOr<Grammar> tool_call_grammar(const ToolMarkup& markup, const std::vector<ToolSpec>& tools,
                                    const ToolGrammarOptions& options, const SchemaLimits& limits = {});

}  // namespace dsv4::structured
