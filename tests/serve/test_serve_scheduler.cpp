// The scheduler and its block manager, driven step by step on the CPU: the token budget, decodes
// before prompt chunks, chunked prefill continuing as extend, exact output counts, the block
// pool never over-committed (reference counts checked after every step), preemption under a
// scarce pool with the victims still finishing, shared-prefix forks, and the clients' arrivals.
#include <algorithm>
#include <map>
#include <ostream>
#include <set>
#include <string>

#include "serve_sim.h"
#include "serve_test_util.h"
#include "tripath/error.h"

namespace tripath::cli {
namespace {

using testing::drive;
using testing::DrivenStep;
using testing::uniform_trace;

struct Case {
  std::string name;
  TraceKind kind;
  int64_t requests, isl, osl, concurrency, budget;
  int block_size;
  int64_t num_blocks;  // 0: room for every client's largest request
  int64_t prefix_len = 0;
  int64_t prefix_groups = 1;
  bool expect_preemption = false;
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

std::vector<TraceRequest> trace_of(const Case& c) {
  TraceSpec spec;
  spec.kind = c.kind;
  spec.num_requests = c.requests;
  spec.isl = c.isl;
  spec.osl = c.osl;
  spec.prefix_len = c.prefix_len;
  spec.prefix_groups = c.prefix_groups;
  spec.seed = 7;
  return generate_trace(spec);
}

SchedulerConfig config_of(const Case& c, const std::vector<TraceRequest>& trace) {
  SchedulerConfig config;
  config.concurrency = c.concurrency;
  config.max_batched_tokens = c.budget;
  config.block_size = c.block_size;
  int64_t longest = 0;
  for (const TraceRequest& r : trace) longest = std::max(longest, r.input_len + r.output_len);
  config.num_blocks =
      c.num_blocks > 0 ? c.num_blocks
                       : c.concurrency * BlockAllocator::blocks_for_tokens(longest, c.block_size);
  config.seed = 3;
  return config;
}

class SchedulerProperties : public ::testing::TestWithParam<Case> {};

TEST_P(SchedulerProperties, HoldOnEveryStep) {
  const Case& c = GetParam();
  const std::vector<TraceRequest> trace = trace_of(c);
  const SchedulerConfig config = config_of(c, trace);
  Scheduler s(config, trace);
  // The first clients' requests arrive at t = 0.
  EXPECT_EQ(s.in_flight(), std::min(c.concurrency, c.requests));
  const std::vector<DrivenStep> steps = drive(s);
  ASSERT_TRUE(s.done());

  int64_t outputs = 0;
  for (const DrivenStep& d : steps) {
    const ScheduledBatch& b = d.batch;
    int64_t tokens = 0;
    std::set<int32_t> seen;
    bool prompt_seen = false;
    for (size_t i = 0; i < b.entries.size(); ++i) {
      const BatchEntry& e = b.entries[i];
      const testing::EntryState& before = d.before[i];
      tokens += e.query_len;
      EXPECT_TRUE(seen.insert(e.request).second) << "request " << e.request << " twice in a step";
      EXPECT_GE(e.query_len, 1);
      EXPECT_EQ(e.context_len, before.computed);
      EXPECT_LE(e.query_len, before.remaining);
      // Decodes (a generated request with one token left) come before every prompt chunk.
      const bool decode = before.generated >= 1 && before.remaining == 1;
      EXPECT_FALSE(decode && prompt_seen) << "a decode after a prompt chunk in a step";
      if (!decode) prompt_seen = true;
      if (e.context_len + e.query_len == before.computed + before.remaining) ++outputs;
    }
    EXPECT_EQ(tokens, b.num_tokens);
    EXPECT_LE(b.num_tokens, c.budget) << "token budget exceeded";
    EXPECT_LE(d.in_flight, c.concurrency);

    // The planner classes each entry as the scheduler meant it: a later chunk is extend.
    SimConfig sim;
    sim.scheduler = config;
    std::vector<int32_t> storage;
    const StepPlan plan = plan_step(step_input(b, sim));
    for (size_t i = 0; i < b.entries.size(); ++i) {
      const BatchEntry& e = b.entries[i];
      const RequestClass expected = e.query_len <= 1    ? RequestClass::kDecode
                                    : e.context_len > 0 ? RequestClass::kExtend
                                                        : RequestClass::kPrefill;
      EXPECT_EQ(plan.classes[i], expected);
    }
    EXPECT_EQ(plan_ordered(step_input(b, sim), storage).num_tokens, b.num_tokens);
  }

  int64_t expected_outputs = 0;
  std::multiset<double> finishes;
  for (const RequestRecord& r : s.requests()) {
    EXPECT_EQ(r.state, RequestState::kFinished);
    EXPECT_EQ(r.generated, r.spec.output_len) << "request " << r.spec.id;
    EXPECT_TRUE(r.blocks.empty());
    EXPECT_GE(r.arrival, 0.0);
    EXPECT_GT(r.first_token, r.arrival);
    EXPECT_GE(r.finish, r.first_token);
    expected_outputs += r.spec.output_len;
    finishes.insert(r.finish);
  }
  EXPECT_EQ(outputs, expected_outputs);
  // Later requests arrive exactly when earlier ones finish (a client's next request), at most
  // one per finish.
  std::map<double, size_t> arrivals;
  for (const RequestRecord& r : s.requests()) {
    if (r.spec.id < c.concurrency) {
      EXPECT_EQ(r.arrival, 0.0);
    } else {
      ++arrivals[r.arrival];
    }
  }
  for (const auto& [time, n] : arrivals) EXPECT_LE(n, finishes.count(time)) << "t = " << time;
  EXPECT_EQ(s.allocator().num_free(), s.allocator().num_blocks()) << "blocks leaked";
  if (c.expect_preemption) {
    EXPECT_GT(s.preemptions(), 0);
  } else {
    EXPECT_EQ(s.preemptions(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Traces, SchedulerProperties,
    ::testing::Values(
        Case{"uniform_roomy", TraceKind::kUniform, 12, 100, 7, 4, 64, 16, 0},
        Case{"uniform_tight_pool", TraceKind::kUniform, 12, 100, 20, 6, 128, 16, 20, 0, 1, true},
        Case{"sharegpt", TraceKind::kShareGpt, 40, 300, 60, 8, 96, 4, 0},
        Case{"sharegpt_tight_pool", TraceKind::kShareGpt, 40, 300, 60, 8, 96, 4, 110, 0, 1, true},
        Case{"shared_prefix", TraceKind::kSharedPrefix, 16, 80, 5, 5, 50, 16, 0, 50, 2},
        Case{"shared_prefix_tight_pool", TraceKind::kSharedPrefix, 16, 80, 9, 5, 50, 16, 14, 50, 2,
             true},
        Case{"block_size_1", TraceKind::kUniform, 6, 33, 9, 3, 16, 1, 0},
        Case{"odd_lengths_one_output", TraceKind::kUniform, 7, 113, 1, 3, 40, 16, 0},
        Case{"budget_equals_concurrency", TraceKind::kUniform, 9, 41, 6, 4, 4, 16, 0}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(Scheduler, ChunkedPrefillContinuesAsExtendThenDecodes) {
  SchedulerConfig config;
  config.concurrency = 1;
  config.max_batched_tokens = 64;
  config.block_size = 16;
  config.num_blocks = 16;
  Scheduler s(config, uniform_trace(1, 100, 3));
  const std::vector<DrivenStep> steps = drive(s);
  ASSERT_EQ(steps.size(), 4u);
  auto only = [&](size_t i) { return steps[i].batch.entries.at(0); };
  EXPECT_EQ(only(0).query_len, 64);  // prefill: the first chunk
  EXPECT_EQ(only(0).context_len, 0);
  EXPECT_EQ(only(1).query_len, 36);  // extend: the rest of the prompt over its cached start
  EXPECT_EQ(only(1).context_len, 64);
  EXPECT_EQ(only(2).query_len, 1);  // decodes
  EXPECT_EQ(only(2).context_len, 100);
  EXPECT_EQ(only(3).context_len, 101);
  // The first token comes with the step that finished the prompt.
  EXPECT_EQ(s.requests()[0].first_token, 2.0);
  EXPECT_EQ(s.requests()[0].finish, 4.0);
}

TEST(Scheduler, DecodesTakeTheBudgetBeforePromptChunks) {
  SchedulerConfig config;
  config.concurrency = 4;
  config.max_batched_tokens = 10;
  config.block_size = 4;
  config.num_blocks = 64;
  // Three short requests start decoding while a long fourth one is still in its prompt.
  std::vector<TraceRequest> trace = uniform_trace(4, 2, 20);
  trace[3].input_len = 40;
  Scheduler s(config, trace);
  const std::vector<DrivenStep> steps = drive(s);
  bool checked = false;
  for (const DrivenStep& d : steps) {
    const auto& e = d.batch.entries;
    if (e.size() == 4 && e[3].request == 3 && e[3].context_len > 0 && d.before[3].remaining > 1) {
      // 3 decodes first, one token each; the prompt chunk gets what is left of the budget.
      for (int i = 0; i < 3; ++i) EXPECT_EQ(e[i].query_len, 1);
      EXPECT_EQ(e[3].query_len, 7);
      checked = true;
    }
  }
  EXPECT_TRUE(checked);
}

TEST(Scheduler, PreemptedRequestRecomputesEverythingAndFinishes) {
  SchedulerConfig config;
  config.concurrency = 2;
  config.max_batched_tokens = 128;
  config.block_size = 16;
  config.num_blocks = 6;  // one request needs up to 5 blocks: both cannot grow together
  Scheduler s(config, uniform_trace(2, 32, 40));
  const std::vector<DrivenStep> steps = drive(s);
  const RequestRecord& young = s.requests()[1];
  EXPECT_GT(young.preemptions, 0);
  EXPECT_EQ(s.requests()[0].preemptions, 0) << "the oldest request is never the victim";
  EXPECT_EQ(young.generated, 40);
  // After its preemption the young request re-prefills its prompt and every token it had
  // generated, in one chunk (the budget allows), and that chunk yields its next token.
  bool recomputed = false;
  for (const DrivenStep& d : steps) {
    for (size_t i = 0; i < d.batch.entries.size(); ++i) {
      const BatchEntry& e = d.batch.entries[i];
      if (e.request == 1 && e.context_len == 0 && d.before[i].generated > 0) {
        EXPECT_EQ(e.query_len, 32 + d.before[i].generated);
        recomputed = true;
      }
    }
  }
  EXPECT_TRUE(recomputed);
  int64_t preempted = 0;
  for (const DrivenStep& d : steps) preempted += d.batch.preemptions;
  EXPECT_EQ(preempted, s.preemptions());
}

TEST(Scheduler, SharedPrefixIsPrefilledOnceAndForked) {
  TraceSpec spec;
  spec.kind = TraceKind::kSharedPrefix;
  spec.num_requests = 4;
  spec.isl = 64;
  spec.osl = 3;
  spec.prefix_len = 40;  // 32 tokens = 2 whole blocks are shareable
  spec.prefix_groups = 1;
  SchedulerConfig config;
  config.concurrency = 4;
  config.max_batched_tokens = 256;
  config.block_size = 16;
  config.num_blocks = 64;
  Scheduler s(config, generate_trace(spec));
  EXPECT_EQ(s.prefix_tokens(0), 32);

  // Step 1: only the first member runs; the others wait for its prefix.
  ScheduledBatch b1 = s.schedule();
  ASSERT_EQ(b1.entries.size(), 1u);
  EXPECT_EQ(b1.entries[0].request, 0);
  EXPECT_EQ(b1.entries[0].query_len, 64);
  s.complete(b1, 1.0);
  s.check_invariants();
  const std::vector<int32_t> prefix = s.prefix_blocks(0);
  ASSERT_EQ(prefix.size(), 2u);
  const std::vector<int32_t>& owner = s.requests()[0].blocks;
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), owner.begin()));
  for (int32_t b : prefix) EXPECT_EQ(s.allocator().ref_count(b), 2);  // owner + table

  // Step 2: the owner decodes; the others fork the prefix and extend from its 32 tokens.
  ScheduledBatch b2 = s.schedule();
  ASSERT_EQ(b2.entries.size(), 4u);
  EXPECT_EQ(b2.entries[0].request, 0);
  EXPECT_EQ(b2.entries[0].query_len, 1);
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_EQ(b2.entries[i].context_len, 32);
    EXPECT_EQ(b2.entries[i].query_len, 32);
    const std::vector<int32_t>& blocks = s.requests()[b2.entries[i].request].blocks;
    EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), blocks.begin()));
    // The member's own blocks are fresh.
    for (size_t j = prefix.size(); j < blocks.size(); ++j)
      EXPECT_EQ(s.allocator().ref_count(blocks[j]), 1);
  }
  for (int32_t b : prefix) EXPECT_EQ(s.allocator().ref_count(b), 5);  // 4 members + table
  EXPECT_EQ(s.prefix_forks(), 3);
  EXPECT_EQ(s.prefix_tokens_reused(), 96);
  s.complete(b2, 2.0);
  s.check_invariants();
  const std::vector<DrivenStep> rest = drive(s);
  EXPECT_TRUE(s.done());
  EXPECT_TRUE(s.prefix_blocks(0).empty()) << "the table lets go after the last member";
  EXPECT_EQ(s.allocator().num_free(), s.allocator().num_blocks());
  // Prompt tokens computed in all: the prefix once, then each member's own part.
  int64_t prompt_tokens = 64 + 3 * 32;
  EXPECT_EQ(b1.num_tokens + b2.num_tokens - 1, prompt_tokens);
}

TEST(Scheduler, PoolTooSmallForOneRequestIsAnError) {
  SchedulerConfig config;
  config.concurrency = 1;
  config.max_batched_tokens = 64;
  config.block_size = 16;
  config.num_blocks = 4;  // 64 tokens; the request needs 100 + 9
  try {
    Scheduler s(config, uniform_trace(1, 100, 10));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--num-blocks"), std::string::npos) << e.what();
  }
}

TEST(Scheduler, SameSeedSameSchedule) {
  TraceSpec spec;
  spec.kind = TraceKind::kShareGpt;
  spec.num_requests = 20;
  spec.isl = 200;
  spec.osl = 30;
  SchedulerConfig config;
  config.concurrency = 6;
  config.max_batched_tokens = 64;
  config.block_size = 8;
  config.num_blocks = 90;
  Scheduler a(config, generate_trace(spec)), b(config, generate_trace(spec));
  const auto sa = drive(a), sb = drive(b);
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].batch.block_table, sb[i].batch.block_table);
    ASSERT_EQ(sa[i].batch.entries.size(), sb[i].batch.entries.size());
  }
}

TEST(Scheduler, BlockTablesAreFragmented) {
  SchedulerConfig config;
  config.concurrency = 1;
  config.max_batched_tokens = 512;
  config.block_size = 16;
  config.num_blocks = 256;
  Scheduler s(config, uniform_trace(1, 256, 2));
  const ScheduledBatch b = s.schedule();
  int consecutive = 0;
  for (size_t i = 1; i < b.block_table.size(); ++i)
    consecutive += b.block_table[i] == b.block_table[i - 1] + 1;
  EXPECT_LT(consecutive, 8) << "the pool should hand out a shuffled order";
}

}  // namespace
}  // namespace tripath::cli
