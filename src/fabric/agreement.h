// Agreement at start: every rank's settings, model identity and library versions must match rank 0's.
//
// Each rank builds an Identity (ordered key = value pairs); followers send theirs to rank 0, which compares
// every key and either welcomes all (agreed) or ends every rank with kExitAgreement and one message naming
// each difference ("'context': rank 0 has 4096, rank 1 has 2048"). Only keys that change what a rank
// computes belong here (never the rank itself, ports or test-only switches).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "fabric/control.h"

namespace dsv4::fabric {

struct Identity {
  std::vector<std::pair<std::string, std::string>> entries;  // in insertion order; keys unique

  void set(std::string key, std::string value);
  std::vector<uint8_t> encode() const;
  static StatusOr<Identity> decode(std::span<const uint8_t> bytes);
};

// Every difference between rank 0's identity and rank `rank`'s, one line each; empty when they match.
std::vector<std::string> identity_differences(const Identity& rank0, const Identity& other, int32_t rank);

// The library facts every rank adds: fabric protocol, compiler, fmt, and a digest of this executable's bytes
// (one build everywhere). NCCL's version is agreed when a communicator is created (nccl/nccl_comm.h).
void add_build_identity(Identity& id);

// Runs the agreement on every rank. Ok when all match; otherwise fails the fabric (every rank exits with
// kExitAgreement) and returns the differences as invalid_argument.
Status agree(Control& control, const Identity& mine);

}  // namespace dsv4::fabric
