// Request traces: the uniform lengths of the published form, the ShareGPT-like mix (bounds,
// spread, determinism), and the shared-prefix groups.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "serve_trace.h"
#include "tripath/error.h"

namespace tripath::cli {
namespace {

TEST(Trace, UniformIsThePublishedForm) {
  TraceSpec spec;  // defaults: isl 10240, osl 1024
  spec.num_requests = 5;
  const std::vector<TraceRequest> t = generate_trace(spec);
  ASSERT_EQ(t.size(), 5u);
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_EQ(t[i].id, static_cast<int32_t>(i));
    EXPECT_EQ(t[i].input_len, 10240);
    EXPECT_EQ(t[i].output_len, 1024);
    EXPECT_EQ(t[i].prefix_group, -1);
  }
}

TEST(Trace, ShareGptMixIsBoundedSpreadAndSeeded) {
  TraceSpec spec;
  spec.kind = TraceKind::kShareGpt;
  spec.num_requests = 2000;
  spec.isl = 8000;
  spec.osl = 1500;
  spec.seed = 1;
  const std::vector<TraceRequest> t = generate_trace(spec);
  std::vector<int64_t> in, out;
  for (const TraceRequest& r : t) {
    EXPECT_GE(r.input_len, 50);
    EXPECT_LE(r.input_len, 8000);
    EXPECT_GE(r.output_len, 20);
    EXPECT_LE(r.output_len, 1500);
    in.push_back(r.input_len);
    out.push_back(r.output_len);
  }
  std::sort(in.begin(), in.end());
  std::sort(out.begin(), out.end());
  // Medians near 800 and 250 (log-normal), with a long tail.
  EXPECT_NEAR(static_cast<double>(in[1000]), 800.0, 120.0);
  EXPECT_NEAR(static_cast<double>(out[1000]), 250.0, 40.0);
  EXPECT_GT(in[1990], 3 * in[1000]);
  EXPECT_GT(std::set<int64_t>(in.begin(), in.end()).size(), 500u);
  // Same seed, same trace; another seed, another one.
  const std::vector<TraceRequest> again = generate_trace(spec);
  for (size_t i = 0; i < t.size(); ++i) EXPECT_EQ(t[i].input_len, again[i].input_len);
  spec.seed = 2;
  const std::vector<TraceRequest> other = generate_trace(spec);
  int same = 0;
  for (size_t i = 0; i < t.size(); ++i) same += t[i].input_len == other[i].input_len;
  EXPECT_LT(same, 100);
}

TEST(Trace, SharedPrefixGroupsRoundRobin) {
  TraceSpec spec;
  spec.kind = TraceKind::kSharedPrefix;
  spec.num_requests = 10;
  spec.isl = 1000;
  spec.osl = 10;
  spec.prefix_groups = 3;
  const std::vector<TraceRequest> t = generate_trace(spec);
  for (const TraceRequest& r : t) {
    EXPECT_EQ(r.prefix_group, r.id % 3);
    EXPECT_EQ(r.prefix_len, 750);  // default: 3/4 of the input
    EXPECT_EQ(r.input_len, 1000);
  }
  spec.prefix_len = 1000;
  EXPECT_THROW(generate_trace(spec), Error);
}

TEST(Trace, NamesRoundTrip) {
  for (const std::string& name : trace_names()) {
    TraceKind kind;
    ASSERT_TRUE(parse_trace(name, &kind));
    EXPECT_EQ(name, trace_name(kind));
  }
  TraceKind kind;
  EXPECT_FALSE(parse_trace("poisson", &kind));
}

TEST(Trace, RejectsEmptyRequests) {
  TraceSpec spec;
  spec.osl = 0;
  EXPECT_THROW(generate_trace(spec), Error);
  spec.osl = 1;
  spec.num_requests = 0;
  EXPECT_THROW(generate_trace(spec), Error);
}

}  // namespace
}  // namespace tripath::cli
