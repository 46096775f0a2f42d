// The stored bytes a backend reads to load a model, or one tensor-parallel rank's slice of one: every tensor its
// views hold and every EXL3 trellis, located in their files (core/staged_reader.h runs them).
#pragma once

#include <vector>

#include "core/staged_reader.h"
#include "family/deepseek_v41/model.h"

namespace dsv4::engine {

// One job per stored tensor the views hold (a rank's row cut is its rows only) and per EXL3 trellis; the Engram
// tables stay out unless `engram_tables` (a backend reads their rows per step, or pins them apart). The small
// vectors an EXL3 part carries (suh, svh, bias) are held in memory already and not listed. Jobs are tagged by
// their index.
std::vector<ReadJob> weight_reads(const family::Model& m, bool engram_tables = false);

}  // namespace dsv4::engine
