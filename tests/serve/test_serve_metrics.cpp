// Metrics on a hand-made timeline: TPS, TTFT and TPOT means and p99, the step-time breakdown,
// the host overhead share, and the apportioning of a step's time over its paths.
#include <gtest/gtest.h>

#include "serve_metrics.h"
#include "serve_model.h"
#include "tripath/error.h"

namespace tripath::cli {
namespace {

TEST(Metrics, PercentileInterpolatesLikeNumpy) {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  EXPECT_DOUBLE_EQ(percentile(v, 50.0), 50.5);
  EXPECT_DOUBLE_EQ(percentile(v, 99.0), 99.01);
  EXPECT_DOUBLE_EQ(percentile(v, 100.0), 100.0);
  EXPECT_DOUBLE_EQ(percentile(v, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(percentile({3.0, 1.0, 2.0}, 50.0), 2.0);  // unsorted input
  EXPECT_DOUBLE_EQ(percentile({7.0}, 99.0), 7.0);
  EXPECT_DOUBLE_EQ(percentile({}, 99.0), 0.0);
}

TEST(Metrics, HandMadeTimeline) {
  // Three requests (seconds):
  //   a: arrives 0, first token 1, finishes 3 with 5 outputs  -> TTFT 1000 ms, TPOT 500 ms
  //   b: arrives 0, first token 2, finishes 4 with 3 outputs  -> TTFT 2000 ms, TPOT 1000 ms
  //   c: arrives 3, first token 3.5, finishes 3.5, 1 output   -> TTFT 500 ms, no TPOT
  std::vector<RequestTiming> requests = {
      {0.0, 1.0, 3.0, 100, 5, 0}, {0.0, 2.0, 4.0, 200, 3, 1}, {3.0, 3.5, 3.5, 50, 1, 0}};
  std::vector<StepRecord> steps(2);
  steps[0].device_ms = 100.0;
  steps[0].schedule_ms = 1.0;
  steps[0].plan_ms = 2.0;
  steps[0].prepare_ms = 1.0;
  steps[0].decode = {2, 2, 30.0, 0};
  steps[0].prefill = {1, 500, 70.0, 0};
  steps[0].preemptions = 1;
  steps[1].device_ms = 50.0;
  steps[1].schedule_ms = 1.0;
  steps[1].graph = true;
  steps[1].capture_ms = 9.0;
  steps[1].decode = {3, 3, 50.0, 0};
  const ServeMetrics m = compute_metrics(requests, steps);
  EXPECT_EQ(m.requests, 3);
  EXPECT_EQ(m.output_tokens, 9);
  EXPECT_EQ(m.input_tokens, 350);
  EXPECT_DOUBLE_EQ(m.duration_s, 4.0);
  EXPECT_DOUBLE_EQ(m.output_tps, 9.0 / 4.0);
  EXPECT_DOUBLE_EQ(m.total_tps, 359.0 / 4.0);
  EXPECT_DOUBLE_EQ(m.ttft_ms.mean, (1000.0 + 2000.0 + 500.0) / 3.0);
  EXPECT_DOUBLE_EQ(m.ttft_ms.p99, percentile({1000.0, 2000.0, 500.0}, 99.0));
  EXPECT_DOUBLE_EQ(m.ttft_ms.max, 2000.0);
  EXPECT_EQ(m.tpot_ms.count, 2);  // the one-output request has no TPOT
  EXPECT_DOUBLE_EQ(m.tpot_ms.mean, 750.0);
  EXPECT_DOUBLE_EQ(m.tpot_ms.p99, 500.0 + 500.0 * 0.99);
  EXPECT_DOUBLE_EQ(m.latency_ms.max, 4000.0);
  EXPECT_EQ(m.steps, 2);
  EXPECT_EQ(m.preemptions, 1);
  EXPECT_EQ(m.decode.tokens, 5);
  EXPECT_EQ(m.decode.steps, 2);
  EXPECT_DOUBLE_EQ(m.decode.ms, 80.0);
  EXPECT_EQ(m.prefill.steps, 1);
  EXPECT_EQ(m.extend.steps, 0);
  EXPECT_DOUBLE_EQ(m.device_ms, 150.0);
  EXPECT_DOUBLE_EQ(m.host_ms, 5.0);
  EXPECT_DOUBLE_EQ(m.overhead_pct, 100.0 * 5.0 / 150.0);
  EXPECT_EQ(m.graph_steps, 1);
  EXPECT_DOUBLE_EQ(m.capture_ms, 9.0);
  EXPECT_EQ(m.max_step_tokens, 502);
}

TEST(Metrics, ApportionByWeightsOrTokens) {
  StepRecord s;
  s.device_ms = 10.0;
  s.decode.tokens = 8;
  s.prefill.tokens = 2;
  const double weights[3] = {1.0, 0.0, 3.0};
  apportion(s, weights);
  EXPECT_DOUBLE_EQ(s.decode.ms, 2.5);
  EXPECT_DOUBLE_EQ(s.extend.ms, 0.0);
  EXPECT_DOUBLE_EQ(s.prefill.ms, 7.5);
  const double none[3] = {0.0, 0.0, 0.0};
  apportion(s, none);
  EXPECT_DOUBLE_EQ(s.decode.ms, 8.0);
  EXPECT_DOUBLE_EQ(s.prefill.ms, 2.0);
}

TEST(Metrics, PathWeightFollowsTheCostFormulas) {
  const ServeModel m = serve_model("qwen3-235b-tp8");
  // One decode over 4096 cached tokens: 4096 x 1 x 128 x 2 x 2 bytes of KV dominate.
  StepLengths decode{{1}, {4096}};
  const double w = path_weight(m, decode, 1, false);
  const double bytes = 4096.0 * 128 * 2 * 2 + 1.0 * 8 * 128 * 2 * 2;
  const double flops = 4.0 * (4096.0 + 0.5) * 8 * 128;
  EXPECT_NEAR(w, flops / kNominalFlops + bytes / kNominalBytesPerSecond, 1e-15);
  EXPECT_GT(path_weight(m, decode, 1, true), w);  // + projection FLOPs
  EXPECT_EQ(path_weight(m, StepLengths{}, 0, true), 0.0);
}

TEST(Metrics, ModelProjectionShapes) {
  const ServeModel q = serve_model("qwen3-235b-tp8");
  ASSERT_EQ(q.gemms.size(), 2u);
  EXPECT_EQ(q.gemms[0].k, 4096);
  EXPECT_EQ(q.gemms[0].n, (8 + 2) * 128);
  EXPECT_EQ(q.gemms[1].k, 8 * 128);
  EXPECT_EQ(q.gemms[1].n, 4096);
  EXPECT_DOUBLE_EQ(linear_flops(q, 10, 0), 2.0 * 10 * (4096.0 * 1280 + 1024.0 * 4096));
  const ServeModel d = serve_model("deepseek-r1-tp8");
  // Absorption GEMMs only on decode tokens.
  EXPECT_LT(linear_flops(d, 10, 0), linear_flops(d, 10, 10));
  EXPECT_THROW(serve_model("gpt-5"), Error);
}

}  // namespace
}  // namespace tripath::cli
