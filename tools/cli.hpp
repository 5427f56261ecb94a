// How every weft command parses its arguments: CLI11 (Debian's libcli11-dev), with the
// command's own help text where it has one (nccl-tests' flags and columns read better as
// prose than as a generated list) and one shape of error: "weft CMD: what (try --help)",
// exit status 2.
#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace weft::tools {

/// Whether -h or --help comes before any "--": a command then prints its help, whatever
/// else its arguments get wrong.
bool asks_for_help(int argc, char** argv);

/// Parses argv[1..argc) with `app` (named "weft CMD"). `help`, when not empty, replaces
/// CLI11's generated help for -h/--help. Returns nothing to go on, or the exit status to
/// leave with: 0 after the help, 2 after a usage error (printed to stderr).
std::optional<int> parse_args(CLI::App& app, int argc, char** argv, const std::string& help = "");

/// A value a command refuses, for an option's callback: the message is printed as it is.
struct BadValue : CLI::ValidationError {
  explicit BadValue(const std::string& message) : CLI::ValidationError(message) {}
};

}  // namespace weft::tools
