// `dsv4`: dispatches to the registered subcommands and prints the top-level help.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/command.h"

namespace dsv4::cli {

std::vector<Command>& commands() {
  static std::vector<Command> all;
  return all;
}

CommandRegistration::CommandRegistration(std::string name, std::string summary, CommandFn run) {
  commands().push_back({std::move(name), std::move(summary), std::move(run)});
}

namespace {
void print_help() {
  std::printf(
      "dsv4 - inference engine and OpenAI-compatible server for the DeepSeek-V4 family\n\n"
      "usage: dsv4 <command> [options]   (dsv4 <command> --help for its options)\n\ncommands:\n");
  auto all = commands();
  std::sort(all.begin(), all.end(), [](const Command& a, const Command& b) { return a.name < b.name; });
  size_t width = 0;
  for (const auto& c : all) width = std::max(width, c.name.size());
  for (const auto& c : all) std::printf("  %-*s  %s\n", static_cast<int>(width), c.name.c_str(), c.summary.c_str());
}
}  // namespace
}  // namespace dsv4::cli

int main(int argc, char** argv) {
  using namespace dsv4::cli;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    print_help();
    return argc < 2 ? 2 : 0;
  }
  for (const auto& c : commands())
    if (c.name == argv[1]) return c.run(argc - 1, argv + 1);
  std::fprintf(stderr, "dsv4: unknown command '%s' (see dsv4 --help)\n", argv[1]);
  return 2;
}
