// Decode segments: the balanced alternative to uniform splits.
//
// Uniform splits (decode_splits.cpp) give every block one item and leave the balance to the
// hardware's greedy dispatch. On uneven contexts that ends with a partial last wave: on
// decode-mixed (contexts 1024..8192, 4 KV heads) the best uniform split, 1168 keys, is modelled
// 11% above the mean slot load and measured 3.43 TB/s against decode-4k's 3.81. Segments give
// each block an equal share instead: the decode requests' keys, laid end to end, are cut into
// as many equal runs as there are slots per KV head, and a block streams its run as a short
// list of pieces (a request's keys between two cuts), each a partial state for the merge. Every
// block of the launch is resident at once and all end together; the price is a ramp per piece
// and a merge even where uniform splits need none, which the planner weighs (step_plan.cpp).
// The same cuts serve every KV head, so pieces stay per request like splits.
#include <algorithm>

#include "tripath/error.h"
#include "tripath/step_plan.h"

namespace tripath {

void partition_decode_segments(const std::vector<int32_t>& kv_lens, int num_segments, int align,
                               int snap, std::vector<int32_t>& cu_pieces,
                               std::vector<int32_t>& piece_start, std::vector<int32_t>& piece_len,
                               std::vector<int32_t>& segment_cu) {
  TRIPATH_CHECK_ARG(num_segments >= 1, "num_segments", num_segments, "at least 1");
  TRIPATH_CHECK_ARG(align >= 1, "align", align, "at least 1");
  TRIPATH_CHECK_ARG(snap >= 0, "snap", snap, "at least 0");
  const size_t n = kv_lens.size();
  std::vector<int64_t> base(n + 1, 0);  // stream offset of each request's first key
  for (size_t r = 0; r < n; ++r) base[r + 1] = base[r] + std::max<int32_t>(kv_lens[r], 0);
  const int64_t total = base[n];

  // Cut k (1..num_segments-1) near k / num_segments of the stream: aligned within its request,
  // and moved to the request's edge when that is within `snap` keys (a piece that short would
  // cost a whole pipeline ramp for a few keys).
  std::vector<int64_t> cuts;
  size_t r = 0;
  for (int k = 1; k < num_segments; ++k) {
    const int64_t ideal = (total * k + num_segments / 2) / num_segments;
    while (r < n && base[r + 1] <= ideal) ++r;  // request r holds key `ideal` (or r == n)
    int64_t cut = ideal;
    if (r < n) {
      const int64_t len = base[r + 1] - base[r];
      int64_t x = (ideal - base[r] + align / 2) / align * align;
      if (x < snap) x = 0;
      if (len - x < snap || x > len) x = len;
      cut = base[r] + x;
    }
    cuts.push_back(std::max(cut, cuts.empty() ? int64_t{0} : cuts.back()));
  }

  cu_pieces.assign(n + 1, 0);
  piece_start.clear();
  piece_len.clear();
  segment_cu.assign(static_cast<size_t>(num_segments) + 1, 0);
  std::vector<int32_t> piece_segment;
  size_t c = 0;  // cuts at or below the current position
  for (size_t q = 0; q < n; ++q) {
    int64_t pos = base[q];
    while (pos < base[q + 1]) {
      while (c < cuts.size() && cuts[c] <= pos) ++c;
      const int64_t end = c < cuts.size() ? std::min(cuts[c], base[q + 1]) : base[q + 1];
      piece_start.push_back(static_cast<int32_t>(pos - base[q]));
      piece_len.push_back(static_cast<int32_t>(end - pos));
      piece_segment.push_back(static_cast<int32_t>(c));
      pos = end;
    }
    cu_pieces[q + 1] = static_cast<int32_t>(piece_start.size());
  }
  for (int32_t s : piece_segment) ++segment_cu[static_cast<size_t>(s) + 1];
  for (int j = 0; j < num_segments; ++j) segment_cu[j + 1] += segment_cu[j];
}

}  // namespace tripath
