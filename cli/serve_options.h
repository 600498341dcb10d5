// The flags of `tripath serve` and their defaults: the published form (shared/BENCH.md
// "Serving simulation") by default, and --quick sizes that run in about a minute on a 2-core
// CPU (reference backend) or in a few minutes on an H200. Parsing is separate from running so
// tests check every usage error (exit code 2) without simulating anything.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "serve_trace.h"

namespace tripath::cli {

// Numbers are long long: the type FlagSet::add_int fills.
struct ServeOptions {
  std::vector<std::string> models;
  std::string backend;      // --backend as given (empty: not given)
  std::string mla_backend;  // --mla-backend as given
  std::vector<TraceKind> traces;
  long long isl = 0;  // uniform and shared-prefix: every request's input / output tokens
  long long osl = 0;
  long long sharegpt_isl = 0;  // sharegpt: the longest input / output (--isl / --osl when given)
  long long sharegpt_osl = 0;
  std::vector<int64_t> concurrency;
  long long requests = 0;  // 0: requests_per_client x concurrency
  long long requests_per_client = 1;
  long long max_batched_tokens = 0;
  long long block_size = 16;
  // MHA cache layout: tiled, the one three_path's decode reads by bulk copies (the fastest
  // measured: docs/perf-notes.md, run w4); nhd / hnd for the others.
  std::string layout = "tiled";
  long long num_blocks = 0;  // 0: sized for concurrency x (isl + osl) + headroom
  long long layers = 0;      // 0: the preset's
  bool linear = false;
  bool cuda_graphs = true;
  long long prefix_len = 0;  // 0: 3/4 of the input
  long long prefix_groups = 4;
  long long seed = 0;
  std::string json_path;
  std::string plot_dir;
  bool quick = false;
  bool progress = true;
  bool check = false;  // check the block manager after every step
};

struct ParsedServeOptions {
  ServeOptions options;
  bool help = false;  // --help given: print usage, exit 0
  std::string usage;  // the command's usage text
};

// `gpu`: a CUDA build on a machine with a GPU (the defaults of --quick and --linear depend on
// it). Throws UsageError (exit code 2) for every mistake, naming the flag and what it expects.
ParsedServeOptions parse_serve_options(const std::vector<std::string>& args, bool gpu);

// The default KV cache pool: every client's largest request (input + output tokens) with 10%
// headroom, so the published-form runs never preempt; --num-blocks overrides it.
int64_t default_num_blocks(int64_t concurrency, int64_t max_request_tokens, int block_size);

}  // namespace tripath::cli
