#include "tools/cli.hpp"

#include <cstdio>
#include <cstring>

namespace weft::tools {

bool asks_for_help(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--")) return false;
    if (!std::strcmp(argv[i], "-h") || !std::strcmp(argv[i], "--help")) return true;
  }
  return false;
}

std::optional<int> parse_args(CLI::App& app, int argc, char** argv, const std::string& help) {
  if (!help.empty()) {
    if (asks_for_help(argc, argv)) {
      std::fputs(help.c_str(), stdout);
      return 0;
    }
    app.set_help_flag();
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s (try --help)\n", app.get_name().c_str(), e.what());
    return 2;
  }
  return std::nullopt;
}

}  // namespace weft::tools
