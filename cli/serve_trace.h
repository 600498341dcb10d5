// Request traces for the serving simulation (shared/BENCH.md "Serving simulation"):
//   uniform        every request has --isl input and --osl output tokens (the published form:
//                  10240 / 1024).
//   sharegpt       a ShareGPT-like mix: log-normal input and output lengths, seeded, with --isl
//                  and --osl as the largest lengths (defaults 8000 and 1500: inputs 50..8000
//                  around a median of 800, outputs 20..1500 around a median of 250).
//   shared-prefix  uniform lengths, but requests come in --prefix-groups groups whose prompts
//                  start with a common --prefix-len-token prefix (a system prompt, a shared
//                  document). The scheduler prefills each group's prefix once and forks its
//                  blocks (BlockAllocator::fork) for the other members: the one place where the
//                  simulation shares a prefix (the other traces have no prefix caching).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tripath::cli {

enum class TraceKind { kUniform, kShareGpt, kSharedPrefix };
const char* trace_name(TraceKind kind);  // "uniform", "sharegpt", "shared-prefix"
bool parse_trace(const std::string& name, TraceKind* kind);  // false for an unknown name
std::vector<std::string> trace_names();

struct TraceSpec {
  TraceKind kind = TraceKind::kUniform;
  int64_t num_requests = 64;
  int64_t isl = 10240;        // uniform / shared-prefix: every input; sharegpt: the longest input
  int64_t osl = 1024;         // uniform / shared-prefix: every output; sharegpt: the longest output
  int64_t prefix_len = 0;     // shared-prefix: common prefix tokens (< isl); 0 = 3/4 of isl
  int64_t prefix_groups = 4;  // shared-prefix: distinct prefixes, requests assigned round-robin
  uint64_t seed = 0;
};

struct TraceRequest {
  int32_t id = 0;             // position in the trace: the order the client sends requests in
  int64_t input_len = 0;      // prompt tokens
  int64_t output_len = 0;     // tokens to generate (>= 1)
  int32_t prefix_group = -1;  // shared-prefix group, -1 for none
  int64_t prefix_len = 0;     // tokens of the prompt that are the group's common prefix
};

// Deterministic for a given spec (seeded). Throws tripath::Error on impossible specs.
std::vector<TraceRequest> generate_trace(const TraceSpec& spec);

// The shared-prefix default: 3/4 of the input.
int64_t default_prefix_len(int64_t isl);

}  // namespace tripath::cli
