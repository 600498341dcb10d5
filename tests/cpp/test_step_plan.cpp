// The planner on hand-made steps (classes, order, ranges written out), the pure partition
// functions (extend chunks, decode split length) and every bad input, which must throw a
// tripath::Error naming the argument.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <queue>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using namespace tptest;
using tripath::RequestClass;
using tripath::StepInput;
using tripath::StepPlan;

struct OwnedStep {
  StepInput in;
  std::vector<int32_t> table;
};

// Requests with a block table of `stride` entries per row, ids r * stride + j (pool 64 blocks).
OwnedStep make_step(std::vector<int32_t> q, std::vector<int32_t> c, int block_size = 4,
                    int64_t stride = 8) {
  OwnedStep s;
  s.in.query_lens = std::move(q);
  s.in.context_lens = std::move(c);
  s.in.block_size = block_size;
  const size_t n = s.in.query_lens.size();
  s.table.resize(n * stride);
  for (size_t i = 0; i < s.table.size(); ++i) s.table[i] = static_cast<int32_t>((i * 7) % 64);
  s.in.block_table = s.table.data();
  s.in.block_table_stride = stride;
  s.in.num_cache_blocks = 64;
  return s;
}

TEST(PlanStep, ClassesOrderAndRangesOfAMixedStep) {
  OwnedStep s = make_step({5, 1, 0, 8, 1, 3}, {0, 10, 0, 20, 0, 7});
  const StepPlan p = tripath::plan_step(s.in);
  using C = RequestClass;
  EXPECT_EQ(p.classes, (std::vector<C>{C::kPrefill, C::kDecode, C::kDecode, C::kExtend, C::kDecode,
                                       C::kExtend}));
  EXPECT_EQ(p.order, (std::vector<int32_t>{1, 2, 4, 3, 5, 0}));
  EXPECT_EQ(p.inverse, (std::vector<int32_t>{5, 0, 1, 3, 2, 4}));
  EXPECT_FALSE(p.is_ordered);
  // The layout is the caller's order (the plan is not ordered).
  EXPECT_EQ(p.query_lens, (std::vector<int32_t>{5, 1, 0, 8, 1, 3}));
  EXPECT_EQ(p.context_lens, (std::vector<int32_t>{0, 10, 0, 20, 0, 7}));
  EXPECT_EQ(p.cu_seqlens_q, (std::vector<int32_t>{0, 5, 6, 6, 14, 15, 18}));
  EXPECT_EQ(p.cu_seqlens_k, (std::vector<int32_t>{0, 5, 16, 16, 44, 45, 55}));
  EXPECT_EQ(p.num_tokens, 18);
  EXPECT_EQ(p.max_query_len, 8);
  EXPECT_EQ(p.max_decode_query_len, 1);  // the prompts' 8 and 5 are not decode queries
  EXPECT_EQ(p.max_seq_len, 28);
  // Path ranges describe the ordered batch: decode 1, 2, 4 | extend 3, 5 | prefill 0.
  EXPECT_EQ(p.decode.begin, 0);
  EXPECT_EQ(p.decode.end, 3);
  EXPECT_EQ(p.decode.num_tokens(), 2);
  EXPECT_EQ(p.extend.begin, 3);
  EXPECT_EQ(p.extend.end, 5);
  EXPECT_EQ(p.extend.token_begin, 2);
  EXPECT_EQ(p.extend.token_end, 13);
  EXPECT_EQ(p.prefill.num_requests(), 1);
  EXPECT_EQ(p.prefill.num_tokens(), 5);
  // Request 1 (decode, context 10, block size 4) writes position 10: block row 1, entry 2; its
  // token is at cu_seqlens_q[1] = 5 of the caller's layout.
  EXPECT_EQ(p.slot_mapping[5], int64_t(s.table[1 * 8 + 2]) * 4 + 2);
  EXPECT_STREQ(tripath::class_name(C::kExtend), "extend");

  // The same step laid out [decode | extend | prefill]: the ordered arrays, the same ranges.
  std::vector<int32_t> storage;
  const StepPlan q = tripath::plan_step(tripath::ordered_input(s.in, p, storage));
  EXPECT_TRUE(q.is_ordered);
  EXPECT_EQ(q.query_lens, (std::vector<int32_t>{1, 0, 1, 8, 3, 5}));
  EXPECT_EQ(q.context_lens, (std::vector<int32_t>{10, 0, 0, 20, 7, 0}));
  EXPECT_EQ(q.cu_seqlens_q, (std::vector<int32_t>{0, 1, 1, 2, 10, 13, 18}));
  EXPECT_EQ(q.cu_seqlens_k, (std::vector<int32_t>{0, 11, 11, 12, 40, 50, 55}));
  EXPECT_EQ(q.num_tokens, 18);
  EXPECT_EQ(q.max_query_len, 8);
  EXPECT_EQ(q.max_decode_query_len, 1);
  EXPECT_EQ(q.max_seq_len, 28);
  EXPECT_EQ(q.decode.begin, 0);
  EXPECT_EQ(q.decode.end, 3);
  EXPECT_EQ(q.decode.num_tokens(), 2);
  EXPECT_EQ(q.extend.begin, 3);
  EXPECT_EQ(q.extend.end, 5);
  EXPECT_EQ(q.extend.token_begin, 2);
  EXPECT_EQ(q.extend.token_end, 13);
  EXPECT_EQ(q.prefill.num_requests(), 1);
  EXPECT_EQ(q.prefill.num_tokens(), 5);
  EXPECT_EQ(q.slot_mapping[0], int64_t(s.table[1 * 8 + 2]) * 4 + 2);
}

TEST(PlanStep, DecodeThresholdRaisesTheDecodeClass) {
  OwnedStep s = make_step({3, 4, 5, 5}, {0, 9, 0, 2});
  s.in.decode_threshold = 4;
  const StepPlan p = tripath::plan_step(s.in);
  using C = RequestClass;
  EXPECT_EQ(p.classes, (std::vector<C>{C::kDecode, C::kDecode, C::kPrefill, C::kExtend}));
  EXPECT_EQ(p.order, (std::vector<int32_t>{0, 1, 3, 2}));
}

TEST(PlanStep, OrderedInputPlansAsOrdered) {
  OwnedStep s = make_step({5, 1, 0, 8, 1, 3}, {0, 10, 0, 20, 0, 7});
  const StepPlan p = tripath::plan_step(s.in);
  ASSERT_FALSE(p.is_ordered);
  std::vector<int32_t> storage;
  const StepInput o = tripath::ordered_input(s.in, p, storage);
  EXPECT_EQ(o.query_lens, (std::vector<int32_t>{1, 0, 1, 8, 3, 5}));
  EXPECT_EQ(o.context_lens, (std::vector<int32_t>{10, 0, 0, 20, 7, 0}));
  const StepPlan q = tripath::plan_step(o);
  EXPECT_TRUE(q.is_ordered);
  EXPECT_EQ(q.order, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  // p's layout is the caller's order, q's the ordered one: request p.order[i] sits at i in q.
  ASSERT_EQ(q.max_blocks_per_request, p.max_blocks_per_request);
  ASSERT_EQ(q.block_table.size(), p.block_table.size());
  std::vector<int32_t> permuted_table(p.block_table.size());
  for (int32_t i = 0; i < p.num_requests; ++i)
    std::copy(p.block_row(p.order[i]), p.block_row(p.order[i]) + p.max_blocks_per_request,
              permuted_table.begin() + int64_t(i) * p.max_blocks_per_request);
  EXPECT_EQ(q.block_table, permuted_table);
  std::vector<int64_t> permuted_slots(p.slot_mapping.size());
  tripath::reorder_token_rows(p, p.slot_mapping.data(), permuted_slots.data(), sizeof(int64_t));
  EXPECT_EQ(q.slot_mapping, permuted_slots);
}

TEST(PlanStep, EmptyAndZeroLengthSteps) {
  StepInput empty;
  const StepPlan p = tripath::plan_step(empty);
  EXPECT_EQ(p.num_requests, 0);
  EXPECT_EQ(p.num_tokens, 0);
  EXPECT_EQ(p.cu_seqlens_q, std::vector<int32_t>{0});
  EXPECT_EQ(p.num_chunks, 0);
  EXPECT_EQ(p.num_splits(), 0);
  EXPECT_TRUE(p.is_ordered);
  // Requests with no tokens at all need no block table.
  StepInput zeros;
  zeros.query_lens = {0, 0};
  zeros.context_lens = {0, 0};
  const StepPlan z = tripath::plan_step(zeros);
  EXPECT_EQ(z.num_tokens, 0);
  EXPECT_EQ(z.decode.num_requests(), 2);
  EXPECT_EQ(z.num_splits(), 0);
}

TEST(PlanStep, SerialIsUniquePerCall) {
  OwnedStep s = make_step({1, 4, 3}, {10, 0, 5});
  const StepPlan a = tripath::plan_step(s.in), b = tripath::plan_step(s.in);
  EXPECT_NE(a.serial, b.serial);
  EXPECT_EQ(a.slot_mapping, b.slot_mapping);
}

TEST(PlanStep, DecodeSplitsFollowTheBlockSize) {
  OwnedStep s = make_step({1, 1}, {1000, 37}, 16, 80);
  s.in.num_cache_blocks = 200;
  for (int32_t& b : s.table) b %= 200;
  s.in.num_work_units = 16;
  s.in.min_split_tokens = 20;
  const StepPlan p = tripath::plan_step(s.in);
  EXPECT_GE(p.split_tokens, 32);  // min_split_tokens rounded up to the block size
  EXPECT_EQ(p.split_tokens % 16, 0);
  EXPECT_GT(p.num_splits(), 2);
  int64_t items = p.num_splits();
  EXPECT_LE(items, int64_t(s.in.split_waves) * s.in.num_work_units);
}

// ---------------------------------------------------------------------------------------------
// Pure partition functions

TEST(ExtendChunks, SharesProportionalToContext) {
  std::vector<int32_t> starts, lens;
  EXPECT_EQ(tripath::partition_extend_chunks({100, 400}, 50, starts, lens), 10);
  EXPECT_EQ(lens[0], 10);
  EXPECT_EQ(lens[1], 40);
  EXPECT_EQ(starts[2], 10);  // chunk 1 of request 0 follows chunk 0
  EXPECT_EQ(tripath::partition_extend_chunks({}, 50, starts, lens), 0);
  EXPECT_EQ(tripath::partition_extend_chunks({0, 0}, 50, starts, lens), 0);
  EXPECT_EQ(tripath::partition_extend_chunks({5, 3}, 100, starts, lens), 1);
  EXPECT_EQ(lens, (std::vector<int32_t>{5, 3}));
  EXPECT_EQ(tripath::partition_extend_chunks({7, 0, 2}, 1, starts, lens), 9);
  EXPECT_TRIPATH_ERROR(tripath::partition_extend_chunks({5}, 0, starts, lens),
                       "extend_chunk_budget");
}

TEST(ExtendChunks, RandomContextsCoveredOnceWithFullChunks) {
  std::mt19937_64 rng(43);
  for (int it = 0; it < 3000; ++it) {
    std::vector<int32_t> ctx(rand_int(rng, 1, 6));
    int64_t total = 0;
    for (int32_t& c : ctx) total += c = rand_int(rng, 0, 3) == 0 ? 0 : rand_int(rng, 1, 2000);
    const int64_t budget = rand_int(rng, 1, 900);
    std::vector<int32_t> starts, lens;
    const int32_t chunks = tripath::partition_extend_chunks(ctx, budget, starts, lens);
    ASSERT_EQ(chunks, (total + budget - 1) / budget);
    ASSERT_EQ(lens.size(), chunks * ctx.size());
    std::vector<int64_t> done(ctx.size(), 0);
    for (int32_t c = 0; c < chunks; ++c) {
      int64_t sum = 0;
      for (size_t e = 0; e < ctx.size(); ++e) {
        const int32_t len = lens[c * ctx.size() + e];
        ASSERT_GE(len, 0);
        if (len > 0) {
          ASSERT_EQ(starts[c * ctx.size() + e], done[e]);
        }
        done[e] += len;
        sum += len;
      }
      ASSERT_EQ(sum, c + 1 < chunks ? budget : total - budget * (chunks - 1));
    }
    for (size_t e = 0; e < ctx.size(); ++e) ASSERT_EQ(done[e], ctx[e]);
    if (total > budget) {
      for (size_t e = 0; e < ctx.size(); ++e)
        ASSERT_LE(std::fabs(lens[e] - double(budget) * ctx[e] / double(total)), 1.0);
    }
  }
}

int64_t items_for(const std::vector<int32_t>& kv, int64_t split, int heads) {
  int64_t n = 0;
  for (int32_t len : kv) n += (len + split - 1) / split;
  return n * heads;
}

// Independent model of the documented rule: items (every split of every request, once per KV
// head) cost their keys + 64, sorted longest first, each to the least-loaded of the slots.
int64_t simulated_makespan(const std::vector<int32_t>& kv, int64_t split, int heads,
                           int64_t slots) {
  std::vector<int64_t> items;
  for (int32_t len : kv) {
    for (int64_t start = 0; start < len; start += split) {
      for (int h = 0; h < heads; ++h) items.push_back(std::min<int64_t>(split, len - start) + 64);
    }
  }
  std::sort(items.begin(), items.end(), std::greater<int64_t>());
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<int64_t>> load(
      std::greater<int64_t>(), std::vector<int64_t>(static_cast<size_t>(slots), 0));
  int64_t end = 0;
  for (int64_t t : items) {
    const int64_t at = load.top() + t;
    load.pop();
    load.push(at);
    end = std::max(end, at);
  }
  return end;
}

// The H200 shapes of shared/BENCH.md (132 SMs, 2 slots each, block 16).
TEST(DecodeSplitTokens, BenchShapes) {
  // decode-4k: 64 x 4 KV heads already fill the 264 slots: no split.
  EXPECT_EQ(tripath::choose_split_tokens(std::vector<int32_t>(64, 4096), 132, 4, 256, 2, 16), 4096);
  // decode-long: 8 x 131072 x 4 heads -> 8 splits each, one item per slot.
  EXPECT_EQ(tripath::choose_split_tokens(std::vector<int32_t>(8, 131072), 132, 4, 256, 2, 16),
            16384);
  // the 8-way shard (1 KV head): 4 splits of 1024.
  EXPECT_EQ(tripath::choose_split_tokens(std::vector<int32_t>(64, 4096), 132, 1, 256, 2, 16), 1024);
  // decode-mixed: uneven contexts are cut so the 8K requests no longer set the time.
  std::mt19937_64 rng(0);
  std::vector<int32_t> mixed(64);
  for (int32_t& k : mixed) k = rand_int(rng, 1024, 8192);
  const int32_t longest = *std::max_element(mixed.begin(), mixed.end());
  const int32_t s = tripath::choose_split_tokens(mixed, 132, 4, 256, 2, 16);
  EXPECT_LT(s, longest);
  EXPECT_LT(simulated_makespan(mixed, s, 4, 264) * 10,
            simulated_makespan(mixed, longest, 4, 264) * 8);
  // one long request alone: cut to about one split per slot.
  const int32_t one = tripath::choose_split_tokens({100000}, 132, 1, 256, 2, 16);
  EXPECT_GE(one, 256);
  EXPECT_LE(one, 512);
  EXPECT_EQ(tripath::choose_split_tokens({40}, 132, 1, 256, 2, 16), 48);
  EXPECT_EQ(tripath::choose_split_tokens({0, 0}, 132, 1, 256, 2, 16), 16);
}

// Against the independent model on random GPU-sized shapes (16..132 SMs): S is a multiple of
// align in [min split, longest], and its makespan is within 15% of the best over every multiple
// of align (the rule tries the longest request cut in k parts, not every length, and prefers
// fewer items on near-ties; the makespan is jagged in S by up to ~12%). The first rule (fewest
// splits that fit the slots) misses decode-mixed by 56%.
TEST(DecodeSplitTokens, NearTheBestMakespan) {
  std::mt19937_64 rng(47);
  for (int it = 0; it < 60; ++it) {
    std::vector<int32_t> kv(rand_int(rng, 1, 64));
    int32_t longest = 0;
    for (int32_t& k : kv) longest = std::max(longest, k = rand_int(rng, 0, 12000));
    const int units = rand_int(rng, 16, 132), heads = rand_int(rng, 1, 8);
    const int min_split = rand_int(rng, 1, 512), waves = rand_int(rng, 1, 3);
    const int align = 1 << rand_int(rng, 4, 6);
    const int64_t s = tripath::choose_split_tokens(kv, units, heads, min_split, waves, align);
    const int64_t cap = (std::max(longest, 1) + align - 1) / align * align;
    const int64_t floor_len = std::min<int64_t>(cap, (min_split + align - 1) / align * align);
    ASSERT_EQ(s % align, 0);
    ASSERT_GE(s, floor_len);
    ASSERT_LE(s, cap);
    const int64_t slots = int64_t(units) * waves;
    int64_t best = INT64_MAX;
    for (int64_t c = floor_len; c <= cap; c += align) {
      if (items_for(kv, c, heads) > 16 * slots) continue;
      best = std::min(best, simulated_makespan(kv, c, heads, slots));
    }
    const int64_t got = simulated_makespan(kv, s, heads, slots);
    if (best != INT64_MAX) {
      std::string shape;
      for (int32_t k : kv) shape += std::to_string(k) + " ";
      ASSERT_LE(got * 100, best * 115)
          << "S " << s << " got " << got << " best " << best << " units " << units << " waves "
          << waves << " heads " << heads << " align " << align << " min " << min_split << " kv "
          << shape;
    }
  }
}

// Cuts near k / 4 of the 8030 keys: 2008 -> key 976 of request 2 (aligned to 16), 4015 -> its
// key 2992, 6023 -> its key 4993, within the snap of its end, so the end (request 3 whole).
TEST(DecodeSegments, PartitionByHand) {
  std::vector<int32_t> cu, start, len, seg;
  tripath::partition_decode_segments({1000, 30, 5000, 2000}, 4, 16, 64, cu, start, len, seg);
  EXPECT_EQ(cu, (std::vector<int32_t>{0, 1, 2, 5, 6}));
  EXPECT_EQ(start, (std::vector<int32_t>{0, 0, 0, 976, 2992, 0}));
  EXPECT_EQ(len, (std::vector<int32_t>{1000, 30, 976, 2016, 2008, 2000}));
  EXPECT_EQ(seg, (std::vector<int32_t>{0, 3, 4, 5, 6}));
  // Empty requests own no pieces; more segments than keys leave some segments empty.
  tripath::partition_decode_segments({0, 40, 0}, 8, 16, 64, cu, start, len, seg);
  EXPECT_EQ(cu, (std::vector<int32_t>{0, 0, 1, 1}));
  EXPECT_EQ(len, (std::vector<int32_t>{40}));
  EXPECT_EQ(seg.front(), 0);
  EXPECT_EQ(seg.back(), 1);
  EXPECT_TRIPATH_ERROR(tripath::partition_decode_segments({10}, 0, 16, 64, cu, start, len, seg),
                       "num_segments");
  EXPECT_TRIPATH_ERROR(tripath::partition_decode_segments({10}, 2, 0, 64, cu, start, len, seg),
                       "align");
  EXPECT_TRIPATH_ERROR(tripath::partition_decode_segments({10}, 2, 16, -1, cu, start, len, seg),
                       "snap");
}

// The planner takes segments where its model says uniform splits leave slots idle: on
// decode-mixed's contexts (132 SMs, 4 KV heads) and decode-long's, one segment per slot and
// head (66); not on decode-4k (one split per request already fills the slots, no merge) nor
// on the 8-way shard's decode-4k; never with decode_segments = 0.
TEST(DecodeSegments, PlannedForUnevenBenchShapes) {
  auto plan = [](std::vector<int32_t> contexts, int heads, int mode) {
    OwnedStep s = make_step(std::vector<int32_t>(contexts.size(), 1), contexts, 16, 8200);
    s.table.assign(contexts.size() * 8200, 0);
    s.in.block_table = s.table.data();
    s.in.num_work_units = 132;
    s.in.num_kv_heads = heads;
    s.in.decode_segments = mode;
    return tripath::plan_step(s.in);
  };
  std::mt19937_64 rng(0);  // decode-mixed's draw (tripath bench, seed 0)
  std::uniform_int_distribution<int> ctx(1024, 8192);
  std::vector<int32_t> mixed(64);
  for (int32_t& c : mixed) c = ctx(rng);
  const StepPlan m = plan(mixed, 4, 1);
  ASSERT_EQ(m.num_segments(), 66);
  int32_t most = 0;
  for (int32_t d = 0; d < 64; ++d)
    most = std::max(most, m.decode_cu_pieces[d + 1] - m.decode_cu_pieces[d]);
  EXPECT_LE(most, 3);
  EXPECT_LT(m.piece_request.size(), 64u * 3);
  EXPECT_EQ(plan(mixed, 4, 0).num_segments(), 0);
  EXPECT_EQ(plan(std::vector<int32_t>(8, 131072), 4, 1).num_segments(), 66);
  EXPECT_EQ(plan(std::vector<int32_t>(64, 4096), 4, 1).num_segments(), 0);
  EXPECT_EQ(plan(std::vector<int32_t>(64, 4096), 1, 1).num_segments(), 0);
  EXPECT_EQ(plan(std::vector<int32_t>(64, 4096), 4, 2).num_segments(), 66);
}

// ---------------------------------------------------------------------------------------------
// Bad inputs

struct BadStepCase {
  std::string name;
  void (*mutate)(OwnedStep&);
  std::string mentions;
};
std::ostream& operator<<(std::ostream& os, const BadStepCase& c) { return os << c.name; }

class PlanStepBadInput : public ::testing::TestWithParam<BadStepCase> {};

TEST_P(PlanStepBadInput, ThrowsNamingTheArgument) {
  OwnedStep s = make_step({1, 4, 3}, {10, 0, 5});
  ASSERT_NO_THROW(tripath::plan_step(s.in));
  GetParam().mutate(s);
  EXPECT_TRIPATH_ERROR(tripath::plan_step(s.in), GetParam().mentions);
}

INSTANTIATE_TEST_SUITE_P(
    Arguments, PlanStepBadInput,
    ::testing::Values(
        BadStepCase{"NegativeQueryLen", [](OwnedStep& s) { s.in.query_lens[1] = -1; },
                    "query_lens"},
        BadStepCase{"NegativeContextLen", [](OwnedStep& s) { s.in.context_lens[2] = -3; },
                    "context_lens"},
        BadStepCase{"BlockTableTooShort", [](OwnedStep& s) { s.in.block_table_stride = 2; },
                    "block_table"},
        BadStepCase{"BlockIdOutOfRange", [](OwnedStep& s) { s.table[1 * 8 + 0] = 64; },
                    "block_table[1][0]"},
        BadStepCase{"BlockIdNegative", [](OwnedStep& s) { s.table[2 * 8 + 1] = -1; },
                    "block_table[2][1]"},
        BadStepCase{"BlockTableNull", [](OwnedStep& s) { s.in.block_table = nullptr; },
                    "block_table"},
        BadStepCase{"NoCacheBlocks", [](OwnedStep& s) { s.in.num_cache_blocks = 0; },
                    "num_cache_blocks"},
        BadStepCase{"BlockSizeNotPowerOfTwo", [](OwnedStep& s) { s.in.block_size = 24; },
                    "block_size"},
        BadStepCase{"BlockSizeZero", [](OwnedStep& s) { s.in.block_size = 0; }, "block_size"},
        BadStepCase{"BlockSize512", [](OwnedStep& s) { s.in.block_size = 512; }, "block_size"},
        BadStepCase{"MismatchedLens", [](OwnedStep& s) { s.in.context_lens.pop_back(); }, "_lens"},
        BadStepCase{"DecodeThresholdZero", [](OwnedStep& s) { s.in.decode_threshold = 0; },
                    "decode_threshold"},
        BadStepCase{"DecodeSegmentsThree", [](OwnedStep& s) { s.in.decode_segments = 3; },
                    "decode_segments"},
        BadStepCase{"BudgetZero", [](OwnedStep& s) { s.in.extend_chunk_budget = 0; },
                    "extend_chunk_budget"},
        BadStepCase{"BudgetNegative", [](OwnedStep& s) { s.in.extend_chunk_budget = -5; },
                    "extend_chunk_budget"},
        BadStepCase{"WorkUnitsZero", [](OwnedStep& s) { s.in.num_work_units = 0; },
                    "num_work_units"},
        BadStepCase{"KvHeadsZero", [](OwnedStep& s) { s.in.num_kv_heads = 0; }, "num_kv_heads"},
        BadStepCase{"MinSplitZero", [](OwnedStep& s) { s.in.min_split_tokens = 0; },
                    "min_split_tokens"},
        BadStepCase{"SplitWavesZero", [](OwnedStep& s) { s.in.split_waves = 0; }, "split_waves"}),
    [](const ::testing::TestParamInfo<BadStepCase>& i) { return i.param.name; });

TEST(PlanStepBadInput, OrderedInputOfAnotherStep) {
  OwnedStep s = make_step({1, 4, 3}, {10, 0, 5});
  OwnedStep t = make_step({1, 4}, {10, 0});
  const StepPlan p = tripath::plan_step(t.in);
  std::vector<int32_t> storage;
  EXPECT_THROW(tripath::ordered_input(s.in, p, storage), tripath::Error);
}

}  // namespace

// The mla backend's kernels run one block per SM: its steps plan one wave of splits; the others
// keep StepInput's default.
TEST(StepPlanDefaults, MlaSplitWavesPerBackend) {
  EXPECT_EQ(tripath::mla_split_waves("mla"), tripath::kMlaSplitWaves);
  EXPECT_EQ(tripath::kMlaSplitWaves, 1);
  EXPECT_EQ(tripath::mla_split_waves("mla_baseline"), tripath::StepInput{}.split_waves);
  EXPECT_EQ(tripath::mla_split_waves("reference"), tripath::StepInput{}.split_waves);
}

// Blocks per split of the mla backend's steps: 64-row wgmma blocks above 64 heads; one block per
// split otherwise and for the other backends. At 128 heads mla-decode-4k then plans one split per
// request (128 blocks for 132 SMs) instead of two (256 blocks: two waves).
TEST(StepPlanDefaults, MlaSplitUnitsPerBackend) {
  EXPECT_EQ(tripath::mla_split_units("mla", 128), 2);
  EXPECT_EQ(tripath::mla_split_units("mla", 64), 1);
  EXPECT_EQ(tripath::mla_split_units("mla", 16), 1);
  EXPECT_EQ(tripath::mla_split_units("mla_baseline", 128), 1);
  const std::vector<int32_t> kv(64, 4097);
  EXPECT_EQ(tripath::choose_split_tokens(kv, 132, tripath::mla_split_units("mla", 128),
                                         tripath::StepInput{}.min_split_tokens,
                                         tripath::kMlaSplitWaves, 64),
            4160);
  EXPECT_LT(tripath::choose_split_tokens(kv, 132, 1, tripath::StepInput{}.min_split_tokens,
                                         tripath::kMlaSplitWaves, 64),
            4097);
}
