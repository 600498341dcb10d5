// Block allocator: allocation, reference counts, fork, all-or-nothing exhaustion, double free and
// bad ids that change nothing, and a random workload checked against a model.
#include <map>
#include <random>
#include <set>
#include <vector>

#include "test_util.h"

namespace {

using tripath::BlockAllocator;

// The allocator's whole observable state.
std::vector<int32_t> snapshot(const BlockAllocator& a) {
  std::vector<int32_t> s;
  for (int32_t b = 0; b < a.num_blocks(); ++b) s.push_back(a.ref_count(b));
  s.push_back(static_cast<int32_t>(a.num_free()));
  return s;
}

TEST(BlockAllocator, AllocateGivesDistinctFreshBlocks) {
  BlockAllocator a(10);
  EXPECT_EQ(a.num_blocks(), 10);
  EXPECT_EQ(a.num_free(), 10);
  for (int32_t b = 0; b < 10; ++b) EXPECT_EQ(a.ref_count(b), 0);
  const std::vector<int32_t> x = a.allocate(4);
  ASSERT_EQ(x.size(), 4u);
  EXPECT_EQ(a.num_free(), 6);
  std::set<int32_t> ids(x.begin(), x.end());
  EXPECT_EQ(ids.size(), 4u);
  for (int32_t b : x) {
    EXPECT_GE(b, 0);
    EXPECT_LT(b, 10);
    EXPECT_EQ(a.ref_count(b), 1);
  }
  const std::vector<int32_t> y = a.allocate(6);
  for (int32_t b : y) EXPECT_EQ(ids.count(b), 0u) << "block " << b << " handed out twice";
  EXPECT_EQ(a.num_free(), 0);
  EXPECT_TRUE(a.allocate(0).empty());
}

TEST(BlockAllocator, FreeReturnsBlocksLifo) {
  BlockAllocator a(8);
  const std::vector<int32_t> x = a.allocate(8);
  a.free({x[3]});
  EXPECT_EQ(a.num_free(), 1);
  EXPECT_EQ(a.ref_count(x[3]), 0);
  a.free({x[5]});
  EXPECT_EQ(a.allocate(1), std::vector<int32_t>{x[5]});  // most recently freed first
  EXPECT_EQ(a.allocate(1), std::vector<int32_t>{x[3]});
}

TEST(BlockAllocator, ForkSharesUntilTheLastOwnerFrees) {
  BlockAllocator a(6);
  const std::vector<int32_t> x = a.allocate(3);
  const std::vector<int32_t> y = a.fork(x);
  EXPECT_EQ(y, x);
  a.fork({x[0]});
  EXPECT_EQ(a.ref_count(x[0]), 3);
  EXPECT_EQ(a.ref_count(x[1]), 2);
  EXPECT_EQ(a.num_free(), 3);
  a.free(x);
  EXPECT_EQ(a.num_free(), 3);  // still owned by the fork
  EXPECT_EQ(a.ref_count(x[0]), 2);
  EXPECT_EQ(a.ref_count(x[1]), 1);
  a.free(y);
  EXPECT_EQ(a.num_free(), 5);
  EXPECT_EQ(a.ref_count(x[0]), 1);
  EXPECT_EQ(a.ref_count(x[2]), 0);
  a.free({x[0]});
  EXPECT_EQ(a.num_free(), 6);
}

TEST(BlockAllocator, ExhaustionThrowsAndChangesNothing) {
  BlockAllocator a(5);
  const std::vector<int32_t> x = a.allocate(3);
  a.fork({x[1]});
  const std::vector<int32_t> before = snapshot(a);
  EXPECT_THROW(a.allocate(3), tripath::OutOfBlocksError);
  EXPECT_EQ(snapshot(a), before);
  try {
    a.allocate(100);
    FAIL() << "no OutOfBlocksError";
  } catch (const tripath::Error& e) {  // OutOfBlocksError is a tripath::Error
    EXPECT_NE(dynamic_cast<const tripath::OutOfBlocksError*>(&e), nullptr);
  }
  EXPECT_EQ(snapshot(a), before);
  EXPECT_EQ(a.allocate(2).size(), 2u);  // what is free is still allocatable
}

TEST(BlockAllocator, TryAllocateFailsWithoutChange) {
  BlockAllocator a(4);
  std::vector<int32_t> out = {42};
  ASSERT_TRUE(a.try_allocate(3, out));
  EXPECT_EQ(out.size(), 4u);  // appended
  EXPECT_EQ(out[0], 42);
  const std::vector<int32_t> before = snapshot(a);
  std::vector<int32_t> more = {7};
  EXPECT_FALSE(a.try_allocate(2, more));
  EXPECT_EQ(more, std::vector<int32_t>{7});
  EXPECT_EQ(snapshot(a), before);
  EXPECT_TRUE(a.try_allocate(1, more));
  EXPECT_EQ(a.num_free(), 0);
}

TEST(BlockAllocator, DoubleFreeIsAnErrorThatChangesNothing) {
  BlockAllocator a(4);
  const std::vector<int32_t> x = a.allocate(2);
  a.free({x[0]});
  const std::vector<int32_t> before = snapshot(a);
  EXPECT_THROW(a.free({x[0]}), tripath::Error);
  EXPECT_EQ(snapshot(a), before);
  // A valid block listed with an invalid one: nothing freed.
  EXPECT_THROW(a.free({x[1], x[0]}), tripath::Error);
  EXPECT_EQ(snapshot(a), before);
  EXPECT_EQ(a.ref_count(x[1]), 1);
  // The same block twice with one reference.
  EXPECT_THROW(a.free({x[1], x[1]}), tripath::Error);
  EXPECT_EQ(snapshot(a), before);
  // Never allocated.
  int32_t never = 0;
  while (never == x[0] || never == x[1]) ++never;
  EXPECT_THROW(a.free({never}), tripath::Error);
  EXPECT_EQ(snapshot(a), before);
}

TEST(BlockAllocator, OutOfRangeIdsAreErrors) {
  BlockAllocator a(4);
  const std::vector<int32_t> x = a.allocate(4);
  const std::vector<int32_t> before = snapshot(a);
  EXPECT_TRIPATH_ERROR(a.free({4}), "4");
  EXPECT_TRIPATH_ERROR(a.free({x[0], -1}), "-1");
  EXPECT_EQ(snapshot(a), before);
  EXPECT_THROW(a.ref_count(-1), tripath::Error);
  EXPECT_THROW(a.ref_count(4), tripath::Error);
  EXPECT_THROW(a.fork({x[0], 9}), tripath::Error);
  EXPECT_EQ(snapshot(a), before);  // fork is all-or-nothing too
  a.free({x[2]});
  const std::vector<int32_t> after_free = snapshot(a);
  EXPECT_THROW(a.fork({x[0], x[2]}), tripath::Error);  // x[2] is free: nothing to share
  EXPECT_EQ(snapshot(a), after_free);
  EXPECT_THROW(a.allocate(-1), tripath::Error);
  EXPECT_THROW(BlockAllocator(-3), tripath::Error);
}

TEST(BlockAllocator, BlocksForTokens) {
  EXPECT_EQ(BlockAllocator::blocks_for_tokens(0, 16), 0);
  EXPECT_EQ(BlockAllocator::blocks_for_tokens(1, 16), 1);
  EXPECT_EQ(BlockAllocator::blocks_for_tokens(16, 16), 1);
  EXPECT_EQ(BlockAllocator::blocks_for_tokens(17, 16), 2);
  EXPECT_EQ(BlockAllocator::blocks_for_tokens(1025, 1), 1025);
}

// Random allocate / fork / free against a model of reference counts.
TEST(BlockAllocator, RandomWorkloadMatchesModel) {
  std::mt19937_64 rng(31);
  const int32_t n = 64;
  BlockAllocator a(n);
  std::vector<std::vector<int32_t>> owners;  // each owner holds one reference to its blocks
  std::vector<int32_t> model(n, 0);
  for (int step = 0; step < 5000; ++step) {
    const int op = tptest::rand_int(rng, 0, 2);
    if (op == 0) {
      const int want = tptest::rand_int(rng, 0, 12);
      int64_t free_blocks = 0;
      for (int32_t r : model) free_blocks += r == 0;
      std::vector<int32_t> got;
      const bool ok = a.try_allocate(want, got);
      ASSERT_EQ(ok, want <= free_blocks) << "step " << step;
      if (ok) {
        for (int32_t b : got) {
          ASSERT_EQ(model[b], 0) << "block " << b << " was still in use";
          model[b] = 1;
        }
        owners.push_back(got);
      }
    } else if (op == 1 && !owners.empty()) {
      const std::vector<int32_t> src = owners[rng() % owners.size()];
      owners.push_back(a.fork(src));
      for (int32_t b : src) ++model[b];
    } else if (!owners.empty()) {
      const size_t i = rng() % owners.size();
      a.free(owners[i]);
      for (int32_t b : owners[i]) --model[b];
      owners.erase(owners.begin() + static_cast<int64_t>(i));
    }
    int64_t free_blocks = 0;
    for (int32_t b = 0; b < n; ++b) {
      ASSERT_EQ(a.ref_count(b), model[b]) << "block " << b << " step " << step;
      free_blocks += model[b] == 0;
    }
    ASSERT_EQ(a.num_free(), free_blocks) << "step " << step;
  }
}

}  // namespace
