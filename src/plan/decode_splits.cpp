// Decode split-KV partition.
//
// A decode request has one (or decode_threshold) query token(s) and a long context: one thread
// block per (request, KV head) leaves most SMs idle when requests are few or contexts uneven.
// We cut every request's keys into splits of one common length S (a multiple of the block size,
// so a split never straddles a cache block) and merge the partial results by log-sum-exp.
//
// S minimizes the predicted time of the decode launch. The machine is modelled as
// split_waves x work units identical slots (two resident blocks per SM for the decode kernel)
// that take items longest first, as the backends order them and the hardware dispatches them:
// greedy list scheduling (LPT). An item costs its keys plus a fixed overhead (pipeline fill, the
// partial write and its merge read), so splitting finer is paid for. The first rule here, "the
// smallest S whose item count fits the slots", took one split per request on decode-mixed
// (contexts 1024..8192): the 8K requests set the time while most slots idled (63% of copy
// bandwidth on the H200); the makespan model cuts them so every slot ends near the mean.
#include <algorithm>
#include <functional>
#include <queue>

#include "decode_cost.h"
#include "tripath/error.h"
#include "tripath/step_plan.h"

namespace tripath {
namespace {
// Finer splits than this many items per slot are not considered (merge traffic, plan time).
constexpr int64_t kMaxItemsPerSlot = 16;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

int64_t work_items(const std::vector<int32_t>& kv_lens, int64_t split, int num_kv_heads) {
  int64_t items = 0;
  for (int32_t len : kv_lens) items += (len + split - 1) / split;
  return items * num_kv_heads;
}

}  // namespace

namespace plan_detail {

// Full splits (all of cost s + overhead) come first and fill the slots round robin; then each
// request's remainder (one per KV head), longest first, goes to the least-loaded slot.
int64_t split_makespan(const std::vector<int32_t>& kv_lens, int64_t s, int num_kv_heads,
                       int64_t slots) {
  int64_t full = 0;
  std::vector<int64_t> rest;
  for (int32_t len : kv_lens) {
    if (len <= 0) continue;
    full += len / s;
    if (len % s != 0) rest.push_back(len % s);
  }
  full *= num_kv_heads;
  const int64_t cost = s + kItemOverheadKeys;
  const int64_t base = full / slots * cost;
  const int64_t loaded = full % slots;  // slots holding one more full split
  std::sort(rest.begin(), rest.end(), std::greater<int64_t>());
  if (rest.empty()) return loaded > 0 ? base + cost : base;
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<int64_t>> free_at;
  // Only the slots that can receive a remainder matter: at most rest x heads of the least loaded.
  const int64_t n_rest = static_cast<int64_t>(rest.size()) * num_kv_heads;
  const int64_t light = slots - loaded;
  for (int64_t i = 0; i < std::min(light, n_rest); ++i) free_at.push(base);
  for (int64_t i = 0; i < std::min(loaded, std::max<int64_t>(0, n_rest - light)); ++i) {
    free_at.push(base + cost);
  }
  int64_t end = loaded > 0 ? base + cost : base;
  for (int64_t r : rest) {
    for (int h = 0; h < num_kv_heads; ++h) {
      const int64_t t = free_at.top() + r + kItemOverheadKeys;
      free_at.pop();
      free_at.push(t);
      end = std::max(end, t);
    }
  }
  return end;
}

}  // namespace plan_detail

using plan_detail::kItemOverheadKeys;
using plan_detail::split_makespan;

int32_t choose_split_tokens(const std::vector<int32_t>& kv_lens, int num_work_units,
                            int num_kv_heads, int min_split_tokens, int split_waves, int align) {
  TRIPATH_CHECK_ARG(num_work_units >= 1, "num_work_units", num_work_units, "at least 1");
  TRIPATH_CHECK_ARG(num_kv_heads >= 1, "num_kv_heads", num_kv_heads, "at least 1");
  TRIPATH_CHECK_ARG(min_split_tokens >= 1, "min_split_tokens", min_split_tokens, "at least 1");
  TRIPATH_CHECK_ARG(split_waves >= 1, "split_waves", split_waves, "at least 1");
  TRIPATH_CHECK_ARG(align >= 1, "align", align, "at least 1");
  int32_t longest = 0;
  for (int32_t len : kv_lens) longest = std::max(longest, len);
  const int64_t hi = round_up(std::max<int64_t>(longest, 1), align);
  const int64_t lo = std::min(hi, round_up(min_split_tokens, align));
  const int64_t slots = static_cast<int64_t>(num_work_units) * split_waves;
  // Candidates: the longest request cut into k equal parts, k = 1..32 and then in steps of about
  // 12%, down to lo or until the items exceed kMaxItemsPerSlot per slot. The model costs
  // O(requests x heads x log slots) per candidate, whatever the item count; a lower bound (all
  // work spread evenly, or the longest item) skips most candidates: a serving step plans in
  // tens of microseconds, not hundreds.
  int64_t total_keys = 0;
  for (int32_t len : kv_lens) total_keys += std::max(len, 0);
  total_keys *= num_kv_heads;
  int64_t best = hi, best_time = split_makespan(kv_lens, hi, num_kv_heads, slots);
  int64_t prev = hi;
  for (int64_t k = 2;; k = k < 32 ? k + 1 : k + k / 8) {
    const int64_t s = std::max(lo, round_up((longest + k - 1) / k, align));
    if (s < prev) {  // a new candidate: each has strictly more items than the one before
      prev = s;
      const int64_t items = work_items(kv_lens, s, num_kv_heads);
      if (items > kMaxItemsPerSlot * slots) break;
      // Smaller S only adds items, so once the even spread alone is no better, none is.
      const int64_t even = (total_keys + items * kItemOverheadKeys) / slots;
      if (even >= best_time) break;
      // A finer split must win by more than 2% (the model ignores the merge launch itself):
      // the lower bound (even spread, or the longest item) rules most candidates out unsimulated.
      const int64_t bound = std::max(even, std::min<int64_t>(s, longest) + kItemOverheadKeys);
      if (bound * 50 < best_time * 49) {
        const int64_t t = split_makespan(kv_lens, s, num_kv_heads, slots);
        if (t * 50 < best_time * 49) best = s, best_time = t;
      }
    }
    if (s == lo) break;
  }
  return static_cast<int32_t>(best);
}

}  // namespace tripath
