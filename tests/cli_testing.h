// What the CLI tests share: running the built `dsv4` binary with arguments, its exit status and output.
#pragma once

#include <cstdio>
#include <string>

namespace dsv4::cli_testing {

struct CliRun {
  int status = -1;
  std::string out;  // stdout and stderr
};

// DSV4_BINARY_DIR/dsv4 ARGS with stderr folded into stdout (the including target defines DSV4_BINARY_DIR).
inline CliRun run_dsv4(const std::string& args) {
  const std::string cmd = std::string(DSV4_BINARY_DIR) + "/dsv4 " + args + " 2>&1";
  CliRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  r.status = ::pclose(p);
  return r;
}

}  // namespace dsv4::cli_testing
