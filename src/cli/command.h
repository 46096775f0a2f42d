// The `dsv4` subcommand registry: each src/cli/cmd_*.cc registers itself with DSV4_COMMAND.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace dsv4::cli {

// A subcommand entry point: argv[0] is the subcommand name; returns the process exit code.
using CommandFn = std::function<int(int argc, char** argv)>;

struct Command {
  std::string name;
  std::string summary;  // one line, shown by `dsv4 --help`
  CommandFn run;
};

// All registered subcommands, sorted by name.
std::vector<Command>& commands();

struct CommandRegistration {
  CommandRegistration(std::string name, std::string summary, CommandFn run);
};

}  // namespace dsv4::cli

#define DSV4_COMMAND(name, summary, fn) \
  static ::dsv4::cli::CommandRegistration dsv4_command_##fn(name, summary, fn)
