// Normalizer steps on ICU: NFC/NFD/NFKC/NFKD via Normalizer2, lowercase via the root locale.
#include "tokenizer/normalizer.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <nlohmann/json.hpp>

namespace dsv4 {
namespace {

Status parse_into(const nlohmann::json& j, std::vector<Normalizer::Step>& steps) {
  if (j.is_null()) return ok_status();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    return error(StatusCode::invalid_argument, "normalizer: expected an object with a \"type\"");
  std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array())
      return error(StatusCode::invalid_argument, "normalizer Sequence: missing \"normalizers\" array");
    for (const auto& n : j["normalizers"]) DSV4_RETURN_IF_ERROR(parse_into(n, steps));
    return ok_status();
  }
  using Step = Normalizer::Step;
  if (type == "NFC") steps.push_back(Step::nfc);
  else if (type == "NFD") steps.push_back(Step::nfd);
  else if (type == "NFKC") steps.push_back(Step::nfkc);
  else if (type == "NFKD") steps.push_back(Step::nfkd);
  else if (type == "Lowercase") steps.push_back(Step::lowercase);
  else return error(StatusCode::unimplemented, "normalizer type \"{}\" is not supported", type);
  return ok_status();
}

}  // namespace

StatusOr<Normalizer> Normalizer::from_json(const nlohmann::json& j) {
  Normalizer n;
  DSV4_RETURN_IF_ERROR(parse_into(j, n.steps_));
  return n;
}

std::string Normalizer::apply(std::string_view text) const {
  if (steps_.empty()) return std::string(text);
  icu::UnicodeString s = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  for (Step step : steps_) {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* n2 = nullptr;
    switch (step) {
      case Step::nfc: n2 = icu::Normalizer2::getNFCInstance(status); break;
      case Step::nfd: n2 = icu::Normalizer2::getNFDInstance(status); break;
      case Step::nfkc: n2 = icu::Normalizer2::getNFKCInstance(status); break;
      case Step::nfkd: n2 = icu::Normalizer2::getNFKDInstance(status); break;
      case Step::lowercase: s.toLower(icu::Locale::getRoot()); continue;
    }
    DSV4_CHECK(U_SUCCESS(status) && n2 != nullptr);  // ICU data is linked in
    icu::UnicodeString out = n2->normalize(s, status);
    DSV4_CHECK(U_SUCCESS(status));
    s = out;
  }
  std::string result;
  s.toUTF8String(result);
  return result;
}

}  // namespace dsv4
