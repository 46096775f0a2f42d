// The CUDA devices visible to this process.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsv4::cuda {

struct DeviceInfo {
  int index;
  std::string name;
  int compute_capability;  // e.g. 90 for H100/H200
  int64_t memory_bytes;
};

// Empty when no driver or no device is present (never an error: the CPU backend still works).
std::vector<DeviceInfo> list_devices();

}  // namespace dsv4::cuda
