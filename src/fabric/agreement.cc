// Agreement of identities across ranks (see agreement.h).
#include "fabric/agreement.h"

#include <fmt/format.h>

#include <fstream>
#include <map>


namespace dsv4::fabric {

void Identity::set(std::string key, std::string value) {
  for (auto& [k, v] : entries)
    if (k == key) {
      v = std::move(value);
      return;
    }
  entries.emplace_back(std::move(key), std::move(value));
}

std::vector<uint8_t> Identity::encode() const {
  ByteWriter w;
  w.u64(entries.size());
  for (const auto& [k, v] : entries) {
    w.str(k);
    w.str(v);
  }
  return w.take();
}

StatusOr<Identity> Identity::decode(std::span<const uint8_t> bytes) {
  ByteReader in(bytes);
  Identity id;
  const uint64_t n = in.count("entries", 16);
  for (uint64_t i = 0; i < n && in.status().ok(); ++i) {
    std::string k = in.str("key");
    std::string v = in.str("value");
    id.entries.emplace_back(std::move(k), std::move(v));
  }
  DSV4_RETURN_IF_ERROR(in.finish("identity"));
  return id;
}

std::vector<std::string> identity_differences(const Identity& rank0, const Identity& other, int32_t rank) {
  std::map<std::string, std::pair<const std::string*, const std::string*>> keys;
  std::vector<std::string> order;
  for (const auto& [k, v] : rank0.entries) {
    keys[k].first = &v;
    order.push_back(k);
  }
  for (const auto& [k, v] : other.entries) {
    if (!keys.count(k)) order.push_back(k);
    keys[k].second = &v;
  }
  std::vector<std::string> out;
  for (const std::string& k : order) {
    const auto [a, b] = keys[k];
    if (a != nullptr && b != nullptr && *a == *b) continue;
    out.push_back(fmt::format("'{}': rank 0 has {}, rank {} has {}", k, a ? "'" + *a + "'" : "nothing", rank,
                              b ? "'" + *b + "'" : "nothing"));
  }
  return out;
}

void add_build_identity(Identity& id) {
  id.set("fabric protocol", std::to_string(kProtocolVersion));
#if defined(__VERSION__)
  id.set("compiler", __VERSION__);
#endif
  id.set("fmt", std::to_string(FMT_VERSION));
  // One build on every rank: a rebuilt binary may round differently.
  std::ifstream exe("/proc/self/exe", std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(exe)), std::istreambuf_iterator<char>());
  id.set("executable digest", fmt::format("{:016x} ({} bytes)", digest_bytes(bytes), bytes.size()));
}

Status agree(Control& control, const Identity& mine) {
  if (control.world() == 1) return ok_status();
  if (control.rank() != 0) {
    DSV4_RETURN_IF_ERROR(control.send(0, FrameKind::agree, mine.encode()));
    DSV4_ASSIGN_OR_RETURN(Frame f, control.expect(0, FrameKind::agreed));
    (void)f;
    return ok_status();
  }
  std::vector<std::string> diffs;
  for (int32_t r = 1; r < control.world(); ++r) {
    DSV4_ASSIGN_OR_RETURN(Frame f, control.expect(r, FrameKind::agree));
    StatusOr<Identity> theirs = Identity::decode(f.payload);
    if (!theirs.ok()) {
      diffs.push_back(fmt::format("rank {} sent a damaged identity: {}", r, theirs.status().message()));
      continue;
    }
    for (std::string& d : identity_differences(mine, *theirs, r)) diffs.push_back(std::move(d));
  }
  if (!diffs.empty()) {
    std::string text = "the ranks disagree: " + fmt::format("{}", fmt::join(diffs, "; "));
    control.fail(kExitAgreement, text);
    return Status(StatusCode::invalid_argument, text);
  }
  for (int32_t r = 1; r < control.world(); ++r) DSV4_RETURN_IF_ERROR(control.send(r, FrameKind::agreed, {}));
  return ok_status();
}

}  // namespace dsv4::fabric
