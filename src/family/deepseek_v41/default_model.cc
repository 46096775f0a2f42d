// ensure_default_model: build-once, rename-into-place creation of the tiny default checkpoint.
#include "family/deepseek_v41/default_model.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "family/deepseek_v41/preset.h"

namespace dsv4::family {

namespace fs = std::filesystem;

StatusOr<std::string> default_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && xdg[0] == '/') return (fs::path(xdg) / "dsv4").string();
  const char* home = std::getenv("HOME");
  if (!home || !home[0])
    return error(StatusCode::unavailable, "no cache directory: neither XDG_CACHE_HOME nor HOME is set");
  return (fs::path(home) / ".cache" / "dsv4").string();
}

StatusOr<std::string> ensure_default_model(const std::function<void(const SynthProgress&)>& progress) {
  DSV4_ASSIGN_OR_RETURN(const std::string cache, default_cache_dir());
  const fs::path final_dir = fs::path(cache) / fmt::format("default-tiny-v41-seed0-v{}", kSynthFormatVersion);
  std::error_code ec;
  if (fs::exists(final_dir / "model.safetensors.index.json", ec) && fs::exists(final_dir / "config.json", ec))
    return final_dir.string();
  fs::create_directories(cache, ec);
  if (ec) return error(StatusCode::unavailable, "{}: cannot create the cache directory: {}", cache, ec.message());
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  const fs::path tmp = fs::path(cache) / fmt::format(".{}.tmp-{}-{}", final_dir.filename().string(), ::getpid(), now);
  SynthOptions o;
  o.seed = 0;
  o.sync = true;
  o.progress = progress;
  auto r = write_synthetic_checkpoint(preset_config(Preset::tiny, Variant::v41), tmp.string(), o);
  if (!r.ok()) {
    fs::remove_all(tmp, ec);
    return r.status().with_context("while creating the default model");
  }
  fs::rename(tmp, final_dir, ec);
  if (ec) {
    // Another process finished first (the target exists and is not empty): use theirs.
    fs::remove_all(tmp);
    if (fs::exists(final_dir / "model.safetensors.index.json")) return final_dir.string();
    return error(StatusCode::unavailable, "{}: cannot move the default model into place: {}", final_dir.string(),
                 ec.message());
  }
  return final_dir.string();
}

}  // namespace dsv4::family
