// The decode cost model shared by the uniform splits (decode_splits.cpp) and the segments
// (decode_segments.cpp): time in key-equivalents of one slot (one resident block), the slots
// streaming in parallel. Internal to the planner.
#pragma once

#include <cstdint>
#include <vector>

namespace tripath::plan_detail {

// Per-item cost beyond its keys: about one pipeline stage of the decode kernel of fill, plus
// the partial output and its merge. Measured, not derived: at 128 the model kept decode-mixed
// at S = 4080 (400 items: 190 us on the H200) over S = 1168 (1124 items: 174 us, run g1); 64
// ranks them as measured and leaves the uniform shapes' choices unchanged.
inline constexpr int64_t kItemOverheadKeys = 64;

// The merge launch that follows a decode launch whose requests have several parts: ~4-5 us in
// ncu (run f2), about what one slot streams in 128 keys of a 128-dim bf16 row set on the H200.
inline constexpr int64_t kMergeKeys = 128;

// Greedy longest-first makespan of the uniform split s on `slots` slots.
int64_t split_makespan(const std::vector<int32_t>& kv_lens, int64_t s, int num_kv_heads,
                       int64_t slots);

}  // namespace tripath::plan_detail
