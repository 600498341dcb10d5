// tripath: the command-line tool. `tripath info` reports the build, the machine and the backend
// selection; `tripath bench` times backends on the step workloads of shared/BENCH.md; `tripath
// serve` simulates continuous-batching serving on them (docs/serving.md).
// Exit codes: 0 success, 1 failure, 2 usage mistake.
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"
#include "flags.h"
#include "tripath/backend.h"
#include "tripath/error.h"

namespace {

constexpr const char* kUsage =
    "usage: tripath <command> [--name=value ...]\n"
    "\n"
    "commands:\n"
    "  info    version, build options, machine, every backend and what auto / the environment\n"
    "          select\n"
    "  bench   time backends on the shared/BENCH.md step workloads\n"
    "  serve   simulate continuous-batching serving: TPS, TTFT, TPOT per backend\n"
    "  help    print this help\n"
    "\n"
    "`tripath <command> --help` lists a command's flags. `tripath --version` prints the version.\n";

}  // namespace

int main(int argc, char** argv) {
  using tripath::cli::UsageError;
  if (argc < 2) {
    std::cerr << "tripath: missing command\n\n" << kUsage;
    return 2;
  }
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  try {
    if (command == "info") return tripath::cli::run_info(args);
    if (command == "bench") return tripath::cli::run_bench(args);
    if (command == "serve") return tripath::cli::run_serve(args);
    if (command == "help" || command == "--help" || command == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (command == "--version") {
      std::cout << "tripath " << tripath::build_info().version << "\n";
      return 0;
    }
    std::cerr << "tripath: unknown command '" << command
              << "'; valid commands: info, bench, serve, help\n\n"
              << kUsage;
    return 2;
  } catch (const UsageError& e) {
    std::cerr << e.what() << "\n\n" << e.usage();
    return 2;
  } catch (const tripath::Error& e) {
    std::cerr << "tripath " << command << ": error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "tripath " << command << ": unexpected error: " << e.what() << "\n";
    return 1;
  }
}
