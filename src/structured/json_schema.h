// JSON Schema to grammar: the subset that constrained decoding supports, and a named refusal for the rest.
//
// Supported: `type` (one or a list), `properties` / `required` / `additionalProperties`, `enum`, `const`, `items`
// with `minItems` / `maxItems`, `minLength` / `maxLength`, `anyOf` / `oneOf` whose alternatives start with
// different bytes, `$ref` into `$defs` / `definitions` (recursion allowed, bounded by the nesting limit),
// `nullable`, and the annotations (`title`, `description`, `default`, `examples`, `$schema`, `$id`, `$comment`).
// Objects are written with their declared properties in declared order (optional ones may be left out); other
// keys are never written, which every schema accepts. Any other keyword is refused by name.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "core/status.h"
#include "structured/grammar.h"

namespace dsv4::structured {

struct SchemaLimits {
  int32_t max_nodes = 20000;          // grammar nodes one schema may compile to
  int32_t max_enum_values = 1024;     // values of one enum
  int64_t max_enum_bytes = 64 << 10;  // their JSON text together
  int32_t max_properties = 64;        // declared properties of one object
};

// The node of a value held to `schema` (ordered: properties are written in the order the schema lists them).
// Errors are invalid_argument naming the keyword and where it is ("'pattern' is not supported (at
// /properties/name)").
StatusOr<NodeId> add_json_schema(Grammar& g, const nlohmann::ordered_json& schema, const SchemaLimits& limits = {});

// Refuses a value node that no output within the grammar's nesting limit can finish (recursion through required
// properties that never ends, or nesting deeper than the limit).
Status check_nesting(const Grammar& g, NodeId value);

// A whole output that is one JSON value held to `schema`.
StatusOr<Grammar> json_schema_grammar(const nlohmann::ordered_json& schema, const SchemaLimits& limits = {});

// A whole output that is one JSON object (response_format json_object).
Grammar json_object_grammar();

}  // namespace dsv4::structured
