// The simulation loop: the clock follows host + device time, TTFT and TPOT come out of it, one
// ordered plan per step reaches the executor; and tiny end-to-end runs through the CPU reference
// backend (MHA and MLA), including preemption and shared prefixes.
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>

#include "serve_executor.h"
#include "serve_sim.h"
#include "serve_test_util.h"
#include "tripath/error.h"

namespace tripath::cli {
namespace {

// A device whose step takes 1 ms plus 0.01 ms per token; records the plans it got.
class FakeExecutor final : public StepExecutor {
 public:
  StepTiming run(const StepPlan& plan) override {
    EXPECT_TRUE(plan.is_ordered) << "the executor must get the [decode|extend|prefill] plan";
    plans.push_back(plan);
    StepTiming t;
    t.device_ms = 1.0 + 0.01 * static_cast<double>(plan.num_tokens);
    return t;
  }
  std::vector<StepPlan> plans;
};

SimConfig small_config(const char* model, int64_t concurrency, int64_t budget, int64_t num_blocks) {
  SimConfig c;
  c.scheduler.concurrency = concurrency;
  c.scheduler.max_batched_tokens = budget;
  c.scheduler.block_size = 16;
  c.scheduler.num_blocks = num_blocks;
  c.model = serve_model(model);
  c.num_kv_heads = c.model.preset->is_mla ? 1 : c.model.preset->num_kv_heads;
  c.check_invariants = true;
  return c;
}

TEST(Simulation, ClockFollowsMeasuredStepsAndHostTime) {
  FakeExecutor fake;
  const SimConfig config = small_config("qwen3-235b-tp8", 3, 64, 64);
  const SimResult r = simulate(config, testing::uniform_trace(5, 100, 4), fake);
  ASSERT_EQ(r.steps.size(), fake.plans.size());
  double clock = 0.0;
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const StepRecord& s = r.steps[i];
    EXPECT_DOUBLE_EQ(s.device_ms, 1.0 + 0.01 * static_cast<double>(fake.plans[i].num_tokens));
    EXPECT_GE(s.host_ms(), 0.0);
    clock += (s.device_ms + s.host_ms()) * 1e-3;
    EXPECT_NEAR(s.end_time, clock, 1e-12);
    EXPECT_NEAR(s.decode.ms + s.extend.ms + s.prefill.ms, s.device_ms, 1e-9);
    EXPECT_EQ(s.decode.tokens + s.extend.tokens + s.prefill.tokens, fake.plans[i].num_tokens);
  }
  EXPECT_NEAR(r.metrics.duration_s, clock, 1e-12);
  // Every request's times are step ends; TTFT and TPOT follow from them.
  for (const RequestRecord& q : r.requests) {
    bool first = false, finish = false;
    for (const StepRecord& s : r.steps) {
      first |= s.end_time == q.first_token;
      finish |= s.end_time == q.finish;
    }
    EXPECT_TRUE(first && finish);
    EXPECT_EQ(q.generated, 4);
  }
  EXPECT_EQ(r.metrics.output_tokens, 20);
  EXPECT_NEAR(r.metrics.output_tps, 20.0 / clock, 1e-9);
  // The prompt of 100 tokens over a 64-token budget: some steps carry extend requests.
  EXPECT_GT(r.metrics.extend.tokens, 0);
  EXPECT_GT(r.metrics.prefill.tokens, 0);
  EXPECT_GT(r.metrics.decode.tokens, 0);
}

// SimConfig::split_waves reaches the planner (serve passes mla_split_waves for MLA models): decode
// steps over long contexts get at most work units x waves splits, and more with more waves.
TEST(Simulation, SplitWavesReachThePlanner) {
  int most[3] = {0, 0, 0};
  for (int waves : {1, 2}) {
    FakeExecutor fake;
    SimConfig config = small_config("deepseek-r1-tp8", 2, 4096, 1024);
    config.num_work_units = 8;
    config.split_waves = waves;
    simulate(config, testing::uniform_trace(2, 3000, 3), fake);
    for (const StepPlan& plan : fake.plans) {
      if (plan.decode.num_requests() == 0) continue;
      const int splits = plan.decode_cu_splits.back();
      EXPECT_LE(splits, 8 * waves);
      most[waves] = std::max(most[waves], splits);
    }
  }
  EXPECT_GT(most[1], 2);
  EXPECT_GT(most[2], most[1]);
}

TEST(Simulation, PlansAreOrderedEvenWhenTheBatchIsNot) {
  // Budget 65 with 64-token prompts: the first step is request 0's whole prompt, then one token
  // of request 1's (a one-token query: the planner classes it decode), so the scheduler's order
  // is [prefill, decode] and the engine reorders it before planning.
  const SimConfig config = small_config("qwen3-235b-tp8", 2, 65, 64);
  Scheduler scheduler(config.scheduler, testing::uniform_trace(2, 64, 3));
  const ScheduledBatch first = scheduler.schedule();
  ASSERT_EQ(first.entries.size(), 2u);
  EXPECT_FALSE(plan_step(step_input(first, config)).is_ordered);

  FakeExecutor fake;
  simulate(config, testing::uniform_trace(2, 64, 3), fake);
  ASSERT_FALSE(fake.plans.empty());
  for (const StepPlan& p : fake.plans) EXPECT_TRUE(p.is_ordered);
  const StepPlan& p0 = fake.plans[0];
  EXPECT_EQ(p0.decode.num_requests(), 1);
  EXPECT_EQ(p0.prefill.num_requests(), 1);
  EXPECT_EQ(p0.query_lens[0], 1);
  EXPECT_EQ(p0.query_lens[1], 64);
}

struct EndToEnd {
  const char* name;
  const char* model;
  TraceKind kind;
  int64_t num_blocks;
  bool expect_preemption;
};

std::ostream& operator<<(std::ostream& os, const EndToEnd& c) { return os << c.name; }

class ReferenceServing : public ::testing::TestWithParam<EndToEnd> {};

TEST_P(ReferenceServing, RunsEveryStepThroughTheBackend) {
  const EndToEnd& c = GetParam();
  TraceSpec spec;
  spec.kind = c.kind;
  spec.num_requests = 6;
  spec.isl = 40;
  spec.osl = 12;  // 51 tokens at most: 4 blocks, so two requests overflow a 6-block pool
  spec.prefix_len = 20;
  spec.prefix_groups = 2;
  SimConfig config = small_config(c.model, 3, 48, c.num_blocks);
  ExecutorConfig e;
  e.model = config.model;
  e.backend = "reference";
  e.layers = 2;
  e.num_blocks = c.num_blocks;
  e.block_size = 16;
  e.max_tokens = 48;
  e.max_requests = 3;
  std::unique_ptr<ServeExecutor> executor = make_executor(e);
  const SimResult r = simulate(config, generate_trace(spec), *executor);
  EXPECT_EQ(r.metrics.requests, 6);
  for (const RequestRecord& q : r.requests) EXPECT_EQ(q.generated, q.spec.output_len);
  EXPECT_GT(r.metrics.output_tps, 0.0);
  EXPECT_GT(r.metrics.device_ms, 0.0);
  EXPECT_GT(r.metrics.ttft_ms.mean, 0.0);
  EXPECT_GT(r.metrics.tpot_ms.mean, 0.0);
  EXPECT_FALSE(executor->info().on_gpu);
  if (c.expect_preemption) {
    EXPECT_GT(r.metrics.preemptions, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Backends, ReferenceServing,
    ::testing::Values(EndToEnd{"mha_uniform", "qwen3-235b-tp8", TraceKind::kUniform, 64, false},
                      EndToEnd{"mha_tight_pool", "qwen3-235b-tp8", TraceKind::kUniform, 6, true},
                      EndToEnd{"mha_shared_prefix", "qwen3-235b-tp8", TraceKind::kSharedPrefix, 64,
                               false},
                      EndToEnd{"gqa_sinks_window", "gpt-oss-120b", TraceKind::kShareGpt, 64, false},
                      EndToEnd{"mla_uniform", "deepseek-r1-tp8", TraceKind::kUniform, 64, false},
                      EndToEnd{"mla_tight_pool", "deepseek-r1-tp8", TraceKind::kUniform, 6, true}),
    [](const ::testing::TestParamInfo<EndToEnd>& info) { return std::string(info.param.name); });

TEST(Simulation, GpuBackendWithoutCudaIsAClearError) {
#ifndef TRIPATH_WITH_CUDA
  ExecutorConfig e;
  e.model = serve_model("qwen3-235b-tp8");
  e.backend = "unified";
  e.num_blocks = 8;
  e.max_tokens = 8;
  e.max_requests = 1;
  try {
    make_executor(e);
    FAIL() << "no error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("TRIPATH_CUDA"), std::string::npos) << err.what();
  }
#else
  GTEST_SKIP() << "CUDA build";
#endif
}

}  // namespace
}  // namespace tripath::cli
