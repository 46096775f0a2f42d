// DeepSeek-V4 text side for the server (see v41_text_side.h).
#include "cli/v41_text_side.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "tokenizer/chat_openai.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/dsml_parser.h"
#include "tokenizer/v41_tokenizer.h"

namespace dsv4::cli {
namespace {

// Output bytes to text (special tokens such as BOS and EOS have no output bytes, so the parser
// sees only what the model wrote as text).
class Utf8Text final : public server::TextStream {
 public:
  std::string push(std::string_view bytes) override { return stream_.push(bytes); }
  std::string flush() override { return stream_.finish(); }

 private:
  Utf8Stream stream_;
};

void convert(const chat::ChatDelta& from, server::ChatDelta& into) {
  into.reasoning += from.reasoning_content;
  into.content += from.content;
  for (const auto& c : from.tool_calls) into.tool_calls.push_back({c.index, c.id, c.name, c.arguments});
}

class Parser final : public server::OutputParser {
 public:
  Parser(chat::ChatFormat format, bool thinking) : parser_(options(format, thinking)) {}
  void push(std::string_view text, server::ChatDelta& out) override { convert(parser_.feed(text), out); }
  void finish(server::ChatDelta& out) override { convert(parser_.finish(), out); }

 private:
  static chat::ParserOptions options(chat::ChatFormat format, bool thinking) {
    chat::ParserOptions o;
    o.format = format;
    o.starts_in_reasoning = thinking;
    o.make_tool_call_id = [](int32_t) { return std::string(); };  // the server names calls
    return o;
  }
  chat::DsmlStreamParser parser_;
};

}  // namespace

StatusOr<int32_t> v41_eos_id() {
  DSV4_ASSIGN_OR_RETURN(Tokenizer tok, load_v41_tokenizer());
  auto id = tok.token_to_id(chat::kEos);
  if (!id) return Status(StatusCode::not_found, "the V4.1 tokenizer has no end-of-sentence token");
  return *id;
}

StatusOr<server::TextSide> make_v41_text_side(int32_t context_length, chat::ChatFormat format) {
  DSV4_ASSIGN_OR_RETURN(Tokenizer tok, load_v41_tokenizer());
  std::optional<TokenId> bos = tok.token_to_id(chat::kBos);
  if (!bos) return Status(StatusCode::not_found, "the V4.1 tokenizer has no begin-of-sentence token");
  server::TextSide t;
  t.vocab_size = tok.vocab_size();
  t.context_length = context_length;
  t.tokenize = [tok, bos](const std::string& text, bool add_special) -> StatusOr<std::vector<int32_t>> {
    std::vector<int32_t> ids;
    if (add_special) ids.push_back(*bos);
    tok.encode(text, ids);
    return ids;
  };
  std::optional<TokenId> image = tok.token_to_id(chat::kImagePlaceholder);
  if (!image) return Status(StatusCode::not_found, "the V4.1 tokenizer has no image token");
  t.render_chat = [tok, format, image](std::string_view body,
                                       const server::ThinkingOptions&) -> StatusOr<server::RenderedChat> {
    DSV4_ASSIGN_OR_RETURN(chat::Conversation conv, chat::conversation_from_openai_text(body, format));
    DSV4_ASSIGN_OR_RETURN(chat::RenderedPrompt prompt, chat::render_conversation(conv));
    server::RenderedChat r;
    r.tokens = tok.encode(prompt.text);
    r.thinking = prompt.reply_starts_in_reasoning;
    // Exactly one image token per image part: the placeholder written anywhere else (a tool call's arguments, a
    // schema) would be an image without pixels.
    const auto n = std::count(r.tokens.begin(), r.tokens.end(), *image);
    if (n != static_cast<int64_t>(prompt.images.size()))
      return error(StatusCode::invalid_argument,
                   "the prompt holds {} image tokens ({}) for {} image parts; send images as image_url parts only", n,
                   chat::kImagePlaceholder, prompt.images.size());
    for (chat::ImageRef& i : prompt.images) r.images.push_back({std::move(i.url), std::move(i.source)});
    return r;
  };
  t.new_text_stream = [] { return std::make_unique<Utf8Text>(); };
  t.output_bytes = [tok](int32_t id) -> std::string {
    if (tok.is_special(id)) return {};
    auto b = tok.token_bytes(id);
    return b ? std::string(*b) : std::string();
  };
  t.close_reasoning = std::string(chat::kThinkEnd);
  const chat::DsmlTags tags = chat::dsml_tags(format);
  // "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"NAME\">\n" (tokenizer-and-chat.md §2.5).
  t.tool_call_opening = [tags](const std::string& name) {
    const std::string d(chat::kDsml);
    std::string s = "\n\n<" + d + std::string(tags.block) + ">\n<" + d + std::string(tags.invoke) +
                    " name=\"";
    if (!name.empty()) s += name + "\">\n";
    return s;
  };
  t.new_output_parser = [format](const server::ChatParseOptions& o) {
    return std::make_unique<Parser>(format, o.thinking);
  };
  t.constrainable = [tok](int32_t id) {
    const AddedToken* added = tok.added_token(id);
    return added == nullptr || added->content == chat::kDsml;  // chat markup other than the tool-call marker: never
  };
  t.tool_markup = structured::ToolMarkup{
      "\n\n<" + std::string(chat::kDsml) + std::string(tags.block) + ">\n",
      "</" + std::string(chat::kDsml) + std::string(tags.block) + ">",
      "<" + std::string(chat::kDsml) + std::string(tags.invoke) + " name=\"",
      "</" + std::string(chat::kDsml) + std::string(tags.invoke) + ">",
      "<" + std::string(chat::kDsml) + std::string(tags.parameter) + " name=\"",
      "</" + std::string(chat::kDsml) + std::string(tags.parameter) + ">"};
  t.token_bytes = [tok](int32_t id) -> std::string {
    if (auto b = tok.token_bytes(id)) return std::string(*b);
    if (auto s = tok.id_to_token(id)) return std::string(*s);
    return {};
  };
  return t;
}

}  // namespace dsv4::cli
