#include "serve_trace.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "tripath/error.h"

namespace tripath::cli {

namespace {

struct TraceName {
  TraceKind kind;
  const char* name;
};
constexpr TraceName kTraceNames[] = {{TraceKind::kUniform, "uniform"},
                                     {TraceKind::kShareGpt, "sharegpt"},
                                     {TraceKind::kSharedPrefix, "shared-prefix"}};

// Uniform in (0, 1) from the raw engine output, which the standard fixes (unlike
// std::normal_distribution), so a seed gives the same trace with every standard library.
double unit_open(std::mt19937_64& rng) {
  return (static_cast<double>(rng() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// A log-normal length with the given median and spread (sigma of the log; Box-Muller normal),
// clamped to [lo, hi] and rounded to a whole token.
int64_t log_normal_length(std::mt19937_64& rng, double median, double sigma, int64_t lo,
                          int64_t hi) {
  const double u1 = unit_open(rng), u2 = unit_open(rng);
  const double normal = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  const double value = std::min(median * std::exp(sigma * normal), static_cast<double>(hi));
  return std::clamp<int64_t>(static_cast<int64_t>(std::llround(value)), lo, hi);
}

}  // namespace

const char* trace_name(TraceKind kind) {
  for (const TraceName& t : kTraceNames)
    if (t.kind == kind) return t.name;
  return "?";
}

bool parse_trace(const std::string& name, TraceKind* kind) {
  for (const TraceName& t : kTraceNames) {
    if (name == t.name) {
      *kind = t.kind;
      return true;
    }
  }
  return false;
}

std::vector<std::string> trace_names() {
  std::vector<std::string> names;
  for (const TraceName& t : kTraceNames) names.emplace_back(t.name);
  return names;
}

int64_t default_prefix_len(int64_t isl) { return std::max<int64_t>(0, isl * 3 / 4); }

std::vector<TraceRequest> generate_trace(const TraceSpec& spec) {
  TRIPATH_CHECK_ARG(spec.num_requests >= 1, "requests", spec.num_requests, "at least 1");
  TRIPATH_CHECK_ARG(spec.isl >= 1, "isl", spec.isl, "at least 1 input token");
  TRIPATH_CHECK_ARG(spec.osl >= 1, "osl", spec.osl, "at least 1 output token");
  std::vector<TraceRequest> trace(static_cast<size_t>(spec.num_requests));
  for (size_t i = 0; i < trace.size(); ++i) trace[i].id = static_cast<int32_t>(i);

  switch (spec.kind) {
    case TraceKind::kUniform:
      for (TraceRequest& r : trace) {
        r.input_len = spec.isl;
        r.output_len = spec.osl;
      }
      break;
    case TraceKind::kShareGpt: {
      // ShareGPT conversations: most prompts short, a long tail of long ones; outputs shorter
      // and less spread. With the default maxima 8000 / 1500 the bounds are 50..8000 and
      // 20..1500; other maxima scale every bound and median with them.
      std::mt19937_64 rng(spec.seed * 0x9E3779B97F4A7C15ull + 0x5348415245ull);
      const int64_t in_lo = std::max<int64_t>(1, spec.isl / 160);
      const int64_t out_lo = std::max<int64_t>(1, spec.osl / 75);
      const double in_median = std::max(1.0, static_cast<double>(spec.isl) / 10.0);
      const double out_median = std::max(1.0, static_cast<double>(spec.osl) / 6.0);
      for (TraceRequest& r : trace) {
        r.input_len = log_normal_length(rng, in_median, 1.0, in_lo, spec.isl);
        r.output_len = log_normal_length(rng, out_median, 0.9, out_lo, spec.osl);
      }
      break;
    }
    case TraceKind::kSharedPrefix: {
      const int64_t prefix = spec.prefix_len > 0 ? spec.prefix_len : default_prefix_len(spec.isl);
      TRIPATH_CHECK_ARG(prefix < spec.isl, "prefix-len", prefix,
                        "fewer tokens than the input (--isl " + std::to_string(spec.isl) + ")");
      TRIPATH_CHECK_ARG(spec.prefix_groups >= 1, "prefix-groups", spec.prefix_groups, "at least 1");
      for (TraceRequest& r : trace) {
        r.input_len = spec.isl;
        r.output_len = spec.osl;
        r.prefix_group = static_cast<int32_t>(r.id % spec.prefix_groups);
        r.prefix_len = prefix;
      }
      break;
    }
  }
  return trace;
}

}  // namespace tripath::cli
