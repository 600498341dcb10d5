// Decode split-KV partition.
//
// A decode request has one (or decode_threshold) query token(s) and a long context: one thread
// block per (request, KV head) leaves most SMs idle when requests are few or contexts uneven.
// We cut every request's keys into splits of one common length S (a multiple of the block size,
// so a split never straddles a cache block) and merge the partial results by log-sum-exp. S is
// the smallest length >= min_split_tokens for which the work items (splits x KV heads) do not
// exceed split_waves x work units: enough to fill the machine, few enough that the merge stays
// cheap. When requests x heads already fill that many items, S covers the longest request (no
// split).
#include <algorithm>

#include "tripath/error.h"
#include "tripath/step_plan.h"

namespace tripath {
namespace {

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

int64_t work_items(const std::vector<int32_t>& kv_lens, int64_t split, int num_kv_heads) {
  int64_t items = 0;
  for (int32_t len : kv_lens) items += (len + split - 1) / split;
  return items * num_kv_heads;
}

}  // namespace

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
  const int64_t target = static_cast<int64_t>(num_work_units) * split_waves;
  if (work_items(kv_lens, lo, num_kv_heads) <= target) return static_cast<int32_t>(lo);
  // work_items is non-increasing in the split length: binary search the smallest length (in
  // units of align) that meets the target, or the longest request when none does.
  int64_t a = lo / align, b = hi / align;
  while (a < b) {
    const int64_t mid = (a + b) / 2;
    if (work_items(kv_lens, mid * align, num_kv_heads) <= target) {
      b = mid;
    } else {
      a = mid + 1;
    }
  }
  return static_cast<int32_t>(a * align);
}

}  // namespace tripath
