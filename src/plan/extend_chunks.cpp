// Extend context chunk schedule.
//
// Rule: chunks are filled greedily, each with min(budget, tokens left) context tokens, so the
// count is the minimum, ceil(total / budget). Inside a chunk the budget is shared by remaining
// context length, not equally per request: request i gets floor(budget * left_i / left_total)
// tokens, and the few tokens that flooring leaves over go one each to the requests with the
// largest remainders (ties: lower index). Every request thus advances through its context at
// the same rate and all finish in the last chunk, which keeps each chunk's work balanced across
// requests (a 128K context and a 1K context do not leave the short one idle after chunk one).
#include <algorithm>
#include <numeric>

#include "tripath/error.h"
#include "tripath/step_plan.h"

namespace tripath {

int32_t partition_extend_chunks(const std::vector<int32_t>& contexts, int64_t budget,
                                std::vector<int32_t>& starts, std::vector<int32_t>& lens) {
  TRIPATH_CHECK_ARG(budget >= 1, "extend_chunk_budget", budget, "at least 1 token");
  const size_t n = contexts.size();
  std::vector<int64_t> left(contexts.begin(), contexts.end());
  std::vector<int64_t> done(n, 0);
  int64_t total_left = std::accumulate(left.begin(), left.end(), int64_t{0});
  starts.clear();
  lens.clear();
  int32_t chunks = 0;
  std::vector<int64_t> share(n), remainder(n);
  std::vector<size_t> by_remainder(n);
  while (total_left > 0) {
    if (total_left <= budget) {
      share = left;
    } else {
      int64_t given = 0;
      for (size_t i = 0; i < n; ++i) {
        share[i] = budget * left[i] / total_left;  // budget * left < 2^46: no overflow
        remainder[i] = budget * left[i] % total_left;
        given += share[i];
      }
      std::iota(by_remainder.begin(), by_remainder.end(), size_t{0});
      std::stable_sort(by_remainder.begin(), by_remainder.end(),
                       [&](size_t a, size_t b) { return remainder[a] > remainder[b]; });
      // share[i] < left[i] whenever left[i] > 0 (budget < total_left), so each +1 fits.
      for (size_t k = 0; given < budget; ++k) {
        const size_t i = by_remainder[k];
        if (share[i] < left[i]) {
          ++share[i];
          ++given;
        }
      }
    }
    for (size_t i = 0; i < n; ++i) {
      starts.push_back(static_cast<int32_t>(done[i]));
      lens.push_back(static_cast<int32_t>(share[i]));
      done[i] += share[i];
      left[i] -= share[i];
      total_left -= share[i];
    }
    ++chunks;
  }
  return chunks;
}

}  // namespace tripath
