// libFuzzer entry point for the safetensors header parser (built only with clang; see CMakeLists.txt).
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto h = dsv4::parse_safetensors("fuzz.safetensors", std::span<const uint8_t>(data, size));
  if (h.ok()) {
    // Invariants of an accepted header: the entries tile the data section inside the input.
    int64_t pos = 0;
    for (const auto& e : h->entries) {
      if (e.begin != pos || e.end < e.begin) __builtin_trap();
      pos = e.end;
    }
    if (pos != h->data_size || h->data_offset + h->data_size != static_cast<int64_t>(size)) __builtin_trap();
  } else if (h.status().message().rfind("fuzz.safetensors: ", 0) != 0) {
    __builtin_trap();  // every error names the file
  }
  return 0;
}
