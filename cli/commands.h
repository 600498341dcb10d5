// The subcommands of the tripath CLI. Each parses its own flags (flags.h) from the arguments after
// its name and returns the process exit code: 0 success, 1 failure (an error from the library,
// a --verify mismatch), 2 a usage mistake (thrown as UsageError, printed by main).
#pragma once

#include <string>
#include <vector>

namespace tripath::cli {

int run_info(const std::vector<std::string>& args);
int run_bench(const std::vector<std::string>& args);
int run_serve(const std::vector<std::string>& args);

}  // namespace tripath::cli
