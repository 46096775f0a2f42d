// Oniguruma wrapper: one-time library init, compile with a readable error, match iteration.
#include "tokenizer/regex.h"

#include <oniguruma.h>

#include <mutex>

#include "tokenizer/utf8.h"

namespace dsv4 {

struct Regex::Compiled {
  OnigRegex re = nullptr;
  ~Compiled() {
    if (re) onig_free(re);
  }
};

namespace {

// One match region per thread, reused across searches (searching a shared regex_t is read-only).
struct ThreadRegion {
  OnigRegion* region = onig_region_new();
  ~ThreadRegion() { onig_region_free(region, 1); }
};

}  // namespace

void ensure_oniguruma() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
}

StatusOr<Regex> Regex::compile(std::string_view pattern) {
  ensure_oniguruma();
  auto compiled = std::make_shared<Compiled>();
  OnigErrorInfo info;
  const auto* p = reinterpret_cast<const OnigUChar*>(pattern.data());
  int rc = onig_new(&compiled->re, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8,
                    ONIG_SYNTAX_RUBY, &info);
  if (rc != ONIG_NORMAL) {
    OnigUChar message[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(message, rc, &info);
    compiled->re = nullptr;
    return error(StatusCode::invalid_argument, "regex /{}/ does not compile: {}", pattern,
                 reinterpret_cast<const char*>(message));
  }
  Regex r;
  r.compiled_ = std::move(compiled);
  r.pattern_ = std::string(pattern);
  return r;
}

void Regex::find_all(std::string_view text, std::vector<Span>& out) const {
  thread_local ThreadRegion tr;
  const auto* begin = reinterpret_cast<const OnigUChar*>(text.data());
  const auto* end = begin + text.size();
  size_t from = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (from <= text.size()) {
    onig_region_clear(tr.region);
    int rc = onig_search(compiled_->re, begin, end, begin + from, end, tr.region, ONIG_OPTION_NONE);
    if (rc < 0) return;  // ONIG_MISMATCH (or a resource error, which cannot occur for these inputs)
    size_t s = static_cast<size_t>(tr.region->beg[0]);
    size_t e = static_cast<size_t>(tr.region->end[0]);
    if (s == e && have_last && last_end == e) {
      if (from >= text.size()) return;
      size_t n = utf8::valid_sequence_length(text, from);
      from += n == 0 ? 1 : n;
      continue;
    }
    out.push_back({static_cast<uint32_t>(s), static_cast<uint32_t>(e)});
    from = e;
    have_last = true;
    last_end = e;
  }
}

}  // namespace dsv4
