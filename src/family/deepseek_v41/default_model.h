// The embedded default model: a tiny synthetic V4.1 checkpoint created on first use in the user's cache.
#pragma once

#include <functional>
#include <string>

#include "core/status.h"
#include "family/deepseek_v41/synth.h"

namespace dsv4::family {

// $XDG_CACHE_HOME/dsv4 when XDG_CACHE_HOME is an absolute path, else $HOME/.cache/dsv4.
StatusOr<std::string> default_cache_dir();

// The directory of the default model (preset tiny, variant v41, seed 0), written on first use and
// reused afterwards. Creation is atomic: the checkpoint is built in a temporary directory beside
// the final one and renamed into place, so a crash or a concurrent first use never leaves a
// partial model under the final name. `progress` (optional) sees each shard written.
// The name carries kSynthFormatVersion, so a build whose synthetic output differs never reuses an
// older build's model.
StatusOr<std::string> ensure_default_model(const std::function<void(const SynthProgress&)>& progress = {});

}  // namespace dsv4::family
