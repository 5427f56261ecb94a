#pragma once

namespace weft::tools {

/// Each takes the arguments after "weft" (argv[0] is the command name) and returns the
/// process exit code.
int run_command(int argc, char** argv);
int bench_command(int argc, char** argv);
int info_command(int argc, char** argv);
int cleanup_command(int argc, char** argv);
int version_command(int argc, char** argv);
int diag_command(int argc, char** argv);
int health_command(int argc, char** argv);

}  // namespace weft::tools
