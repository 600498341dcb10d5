// The planner's properties over thousands of random steps (seeded): classification, the stable
// [decode | extend | prefill] order, the layout arrays in the caller's order (cu_seqlens, block
// table rows, slot mapping), path ranges, the extend chunk schedule and the decode split-KV
// partition over the ordered batch; the ordered_input round trip (same ranges, chunks and
// splits; layout permuted by order).
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using namespace tptest;
using tripath::RequestClass;
using tripath::StepInput;
using tripath::StepPlan;

struct RandomStep {
  StepInput in;
  PagedTable table;
  int64_t budget = 0;
};

RandomStep random_step(std::mt19937_64& rng) {
  RandomStep s;
  const int n = rand_int(rng, 0, 12);
  const int threshold = rand_int(rng, 1, 4);
  s.in.block_size = rand_int(rng, 0, 9) == 0 ? 256 : 1 << rand_int(rng, 0, 6);
  s.in.decode_threshold = threshold;
  for (int r = 0; r < n; ++r) {
    int32_t q = 0, c = 0;
    switch (rand_int(rng, 0, 4)) {
      case 0:
        q = rand_int(rng, 0, threshold), c = rand_int(rng, 0, 600);
        break;  // decode
      case 1:
        q = rand_int(rng, threshold + 1, 150), c = 0;
        break;  // prefill
      case 2:
        q = rand_int(rng, threshold + 1, 80), c = rand_int(rng, 1, 2500);
        break;  // extend
      case 3:
        q = rand_int(rng, 0, 3), c = rand_int(rng, 0, 3);
        break;  // tiny
      default:
        q = rand_int(rng, 0, 40), c = rand_int(rng, 0, 40);
        break;
    }
    s.in.query_lens.push_back(q);
    s.in.context_lens.push_back(c);
  }
  std::vector<int32_t> seqs(n);
  for (int r = 0; r < n; ++r) seqs[r] = s.in.query_lens[r] + s.in.context_lens[r];
  s.table = make_block_table(seqs, s.in.block_size, rng);
  s.in.block_table = s.table.table.data();
  s.in.block_table_stride = s.table.stride;
  s.in.num_cache_blocks = s.table.num_blocks;
  const int pick = rand_int(rng, 0, 9);
  s.budget = pick < 2 ? rand_int(rng, 1, 8) : pick < 8 ? rand_int(rng, 9, 700) : 32768;
  s.in.extend_chunk_budget = s.budget;
  s.in.num_work_units = rand_int(rng, 1, 64);
  s.in.num_kv_heads = rand_int(rng, 1, 8);
  s.in.min_split_tokens = rand_int(rng, 1, 300);
  s.in.split_waves = rand_int(rng, 1, 3);
  s.in.decode_segments = rand_int(rng, 0, 2);
  return s;
}

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

void check_plan(const StepInput& in, const StepPlan& p) {
  const int32_t n = static_cast<int32_t>(in.query_lens.size());
  const int bs = in.block_size;
  ASSERT_EQ(p.num_requests, n);
  ASSERT_EQ(p.block_size, bs);
  ASSERT_EQ(p.decode_threshold, in.decode_threshold);
  ASSERT_EQ(p.num_cache_blocks, in.num_cache_blocks);

  // Classes follow the threshold rule.
  ASSERT_EQ(p.classes.size(), static_cast<size_t>(n));
  for (int32_t r = 0; r < n; ++r) {
    const RequestClass want = in.query_lens[r] <= in.decode_threshold ? RequestClass::kDecode
                              : in.context_lens[r] == 0               ? RequestClass::kPrefill
                                                                      : RequestClass::kExtend;
    ASSERT_EQ(p.classes[r], want) << "request " << r;
  }
  // order: a permutation, a stable partition [decode | extend | prefill]; inverse inverts it.
  ASSERT_EQ(p.order.size(), static_cast<size_t>(n));
  ASSERT_EQ(p.inverse.size(), static_cast<size_t>(n));
  std::vector<int> seen(n, 0);
  bool identity = true;
  for (int32_t i = 0; i < n; ++i) {
    ASSERT_GE(p.order[i], 0);
    ASSERT_LT(p.order[i], n);
    ASSERT_EQ(seen[p.order[i]]++, 0) << "order repeats " << p.order[i];
    ASSERT_EQ(p.inverse[p.order[i]], i);
    identity = identity && p.order[i] == i;
    if (i > 0) {
      const int a = static_cast<int>(p.classes[p.order[i - 1]]);
      const int b = static_cast<int>(p.classes[p.order[i]]);
      ASSERT_LE(a, b) << "order is not [decode | extend | prefill] at " << i;
      if (a == b) {
        ASSERT_LT(p.order[i - 1], p.order[i]) << "partition is not stable at " << i;
      }
    }
  }
  ASSERT_EQ(p.is_ordered, identity);

  // The ordered view (position i = input request order[i]): what path ranges, extend chunks
  // and decode splits describe.
  auto oq = [&](int32_t i) { return in.query_lens[p.order[i]]; };
  auto oc = [&](int32_t i) { return in.context_lens[p.order[i]]; };
  auto oseq = [&](int32_t i) { return oq(i) + oc(i); };
  std::vector<int64_t> ocu(n + 1, 0);
  for (int32_t i = 0; i < n; ++i) ocu[i + 1] = ocu[i] + oq(i);

  // The layout arrays: position j holds input request lay(j), the ordered one when is_ordered
  // and the caller's (input) order otherwise; prefix sums; maxima.
  auto lay = [&](int32_t j) { return p.is_ordered ? p.order[j] : j; };
  for (int32_t j = 0; j < n; ++j) ASSERT_EQ(lay(j), j) << "layout is not the input order";
  ASSERT_EQ(p.query_lens.size(), static_cast<size_t>(n));
  ASSERT_EQ(p.context_lens.size(), static_cast<size_t>(n));
  ASSERT_EQ(p.cu_seqlens_q.size(), static_cast<size_t>(n + 1));
  ASSERT_EQ(p.cu_seqlens_k.size(), static_cast<size_t>(n + 1));
  ASSERT_EQ(p.cu_seqlens_q[0], 0);
  ASSERT_EQ(p.cu_seqlens_k[0], 0);
  int32_t max_q = 0, max_s = 0;
  for (int32_t j = 0; j < n; ++j) {
    const int32_t r = lay(j);
    ASSERT_EQ(p.query_lens[j], in.query_lens[r]);
    ASSERT_EQ(p.context_lens[j], in.context_lens[r]);
    const int32_t seq = in.query_lens[r] + in.context_lens[r];
    ASSERT_EQ(p.seq_len(j), seq);
    ASSERT_EQ(p.cu_seqlens_q[j + 1], p.cu_seqlens_q[j] + in.query_lens[r]);
    ASSERT_EQ(p.cu_seqlens_k[j + 1], p.cu_seqlens_k[j] + seq);
    max_q = std::max(max_q, in.query_lens[r]);
    max_s = std::max(max_s, seq);
  }
  ASSERT_EQ(p.num_tokens, p.cu_seqlens_q[n]);
  ASSERT_EQ(p.num_tokens, ocu[n]);
  ASSERT_EQ(p.max_query_len, max_q);
  int32_t max_decode_q = 0;  // over decode requests only (the decode tiles' size)
  for (int32_t r = 0; r < n; ++r)
    if (p.classes[r] == RequestClass::kDecode)
      max_decode_q = std::max(max_decode_q, in.query_lens[r]);
  ASSERT_EQ(p.max_decode_query_len, max_decode_q);
  ASSERT_EQ(p.max_seq_len, max_s);
  ASSERT_GE(static_cast<int64_t>(p.max_blocks_per_request) * bs, max_s);
  ASSERT_EQ(p.block_table.size(), static_cast<size_t>(n) * p.max_blocks_per_request);

  // Path ranges, over the ordered view.
  int32_t counts[3] = {0, 0, 0};
  for (RequestClass c : p.classes) ++counts[static_cast<int>(c)];
  ASSERT_EQ(p.decode.begin, 0);
  ASSERT_EQ(p.decode.end, counts[0]);
  ASSERT_EQ(p.extend.begin, counts[0]);
  ASSERT_EQ(p.extend.end, counts[0] + counts[1]);
  ASSERT_EQ(p.prefill.begin, counts[0] + counts[1]);
  ASSERT_EQ(p.prefill.end, n);
  for (const tripath::PathRange* r : {&p.decode, &p.extend, &p.prefill}) {
    ASSERT_EQ(r->token_begin, ocu[r->begin]);
    ASSERT_EQ(r->token_end, ocu[r->end]);
  }
  for (int32_t i = 0; i < n; ++i) {
    const RequestClass c = p.classes[p.order[i]];
    const tripath::PathRange& r = c == RequestClass::kDecode   ? p.decode
                                  : c == RequestClass::kExtend ? p.extend
                                                               : p.prefill;
    ASSERT_GE(i, r.begin);
    ASSERT_LT(i, r.end);
  }

  // Block rows and the slot mapping of positions context .. context + query - 1, in the layout.
  ASSERT_EQ(p.slot_mapping.size(), static_cast<size_t>(p.num_tokens));
  for (int32_t j = 0; j < n; ++j) {
    const int32_t r = lay(j);
    const int32_t* want_row = in.block_table + r * in.block_table_stride;
    const int64_t needed = (p.seq_len(j) + bs - 1) / bs;
    for (int64_t b = 0; b < needed; ++b) ASSERT_EQ(p.block_row(j)[b], want_row[b]);
    for (int32_t t = 0; t < p.query_lens[j]; ++t) {
      const int64_t pos = p.context_lens[j] + t;
      ASSERT_EQ(p.slot_mapping[p.cu_seqlens_q[j] + t], int64_t(want_row[pos / bs]) * bs + pos % bs)
          << "request " << r << " token " << t;
    }
  }

  // Extend chunks.
  const int32_t ne = p.extend.num_requests();
  int64_t total = 0;
  for (int32_t e = 0; e < ne; ++e) total += oc(p.extend.begin + e);
  const int64_t budget = in.extend_chunk_budget;
  ASSERT_EQ(p.extend_chunk_budget, budget);
  ASSERT_EQ(p.num_chunks, (total + budget - 1) / budget) << "total " << total;
  ASSERT_EQ(p.chunk_kv_start.size(), static_cast<size_t>(p.num_chunks) * ne);
  ASSERT_EQ(p.chunk_kv_len.size(), static_cast<size_t>(p.num_chunks) * ne);
  ASSERT_EQ(p.chunk_cu_kv.size(), static_cast<size_t>(p.num_chunks) * (ne + 1));
  std::vector<int64_t> covered(ne, 0);
  for (int32_t c = 0; c < p.num_chunks; ++c) {
    int64_t chunk_total = 0;
    ASSERT_EQ(p.chunk_cu_kv[c * (ne + 1)], 0);
    for (int32_t e = 0; e < ne; ++e) {
      const int32_t len = p.chunk_kv_len[c * ne + e];
      ASSERT_GE(len, 0);
      if (len > 0) {
        ASSERT_EQ(p.chunk_kv_start[c * ne + e], covered[e]) << "chunk " << c;
      }
      covered[e] += len;
      chunk_total += len;
      ASSERT_EQ(p.chunk_cu_kv[c * (ne + 1) + e + 1], chunk_total);
    }
    ASSERT_LE(chunk_total, budget);
    if (c + 1 < p.num_chunks) {
      ASSERT_EQ(chunk_total, budget) << "chunk " << c << " not full";
    }
    ASSERT_GT(chunk_total, 0);
  }
  for (int32_t e = 0; e < ne; ++e) ASSERT_EQ(covered[e], oc(p.extend.begin + e));
  if (total > budget) {  // first-chunk shares proportional to context length
    for (int32_t e = 0; e < ne; ++e) {
      const double want = double(budget) * oc(p.extend.begin + e) / double(total);
      ASSERT_LE(std::fabs(p.chunk_kv_len[e] - want), 1.0) << "extend request " << e;
    }
  }

  // Decode splits.
  const int32_t nd = p.decode.num_requests();
  ASSERT_EQ(p.decode_cu_splits.size(), static_cast<size_t>(nd + 1));
  ASSERT_EQ(p.decode_cu_splits[0], 0);
  ASSERT_EQ(p.decode_cu_splits[nd], p.num_splits());
  ASSERT_EQ(p.split_kv_start.size(), p.split_request.size());
  ASSERT_EQ(p.split_kv_len.size(), p.split_request.size());
  int32_t longest = 0;
  for (int32_t d = 0; d < nd; ++d) longest = std::max(longest, oseq(p.decode.begin + d));
  if (nd > 0) {
    ASSERT_GT(p.split_tokens, 0);
    ASSERT_EQ(p.split_tokens % bs, 0) << "split_tokens " << p.split_tokens;
    ASSERT_GE(p.split_tokens,
              std::min(round_up(in.min_split_tokens, bs), round_up(std::max(longest, 1), bs)));
  }
  for (int32_t d = 0; d < nd; ++d) {
    const int32_t i = p.decode.begin + d, sb = p.decode_cu_splits[d],
                  se = p.decode_cu_splits[d + 1];
    ASSERT_LE(sb, se);
    const int32_t seq = oseq(i);
    if (oq(i) == 0 && sb == se) continue;  // nothing to attend this step
    if (seq == 0) {
      ASSERT_EQ(sb, se);
      continue;
    }
    ASSERT_LT(sb, se) << "decode request " << d << " has no splits";
    int32_t next = 0;
    for (int32_t s = sb; s < se; ++s) {
      ASSERT_EQ(p.split_request[s], i);
      ASSERT_EQ(p.split_kv_start[s], next) << "splits not contiguous";
      ASSERT_GT(p.split_kv_len[s], 0);
      if (s + 1 < se) {
        ASSERT_EQ(p.split_kv_len[s] % bs, 0);
        ASSERT_EQ(p.split_kv_len[s], p.split_tokens);
      } else {
        ASSERT_LE(p.split_kv_len[s], p.split_tokens);
      }
      next += p.split_kv_len[s];
    }
    ASSERT_EQ(next, seq) << "splits do not cover the request's keys";
  }

  // Decode segments: none when off or without decode splits; when forced, one per slot per
  // KV head; the pieces of each request tile its keys in order (block-aligned cuts inside it),
  // each segment owns a run of consecutive pieces, and a segment's keys stay within a snap and
  // an alignment of the even share where no request is shorter than that.
  const int32_t segs = p.num_segments();
  if (in.decode_segments == 0 || p.num_splits() == 0) {
    ASSERT_EQ(segs, 0);
    ASSERT_TRUE(p.decode_cu_pieces.empty() && p.piece_request.empty());
    return;
  }
  const int64_t slots = int64_t(in.num_work_units) * in.split_waves;
  if (in.decode_segments == 2 && slots / in.num_kv_heads >= 2) {
    ASSERT_EQ(segs, slots / in.num_kv_heads);
  }
  if (segs == 0) return;
  ASSERT_EQ(p.decode_cu_pieces.size(), static_cast<size_t>(nd + 1));
  ASSERT_EQ(p.decode_cu_pieces[0], 0);
  const size_t pieces = p.piece_request.size();
  ASSERT_EQ(p.piece_kv_start.size(), pieces);
  ASSERT_EQ(p.piece_kv_len.size(), pieces);
  ASSERT_EQ(static_cast<size_t>(p.decode_cu_pieces[nd]), pieces);
  ASSERT_EQ(p.segment_cu_pieces.front(), 0);
  ASSERT_EQ(static_cast<size_t>(p.segment_cu_pieces.back()), pieces);
  for (int32_t j = 0; j < segs; ++j) ASSERT_LE(p.segment_cu_pieces[j], p.segment_cu_pieces[j + 1]);
  int64_t dec_total = 0;
  for (int32_t d = 0; d < nd; ++d) {
    const int32_t i = p.decode.begin + d;
    const int32_t len = oq(i) > 0 ? oseq(i) : 0;
    dec_total += len;
    int32_t next = 0;
    for (int32_t q = p.decode_cu_pieces[d]; q < p.decode_cu_pieces[d + 1]; ++q) {
      ASSERT_EQ(p.piece_request[q], i);
      ASSERT_EQ(p.piece_kv_start[q], next) << "pieces not contiguous";
      ASSERT_GT(p.piece_kv_len[q], 0);
      ASSERT_EQ(next % bs, 0) << "a cut off the block grid";
      next += p.piece_kv_len[q];
    }
    ASSERT_EQ(next, len) << "pieces do not cover decode request " << d;
  }
  int32_t shortest = INT32_MAX;
  for (int32_t d = 0; d < nd; ++d) {
    const int32_t i = p.decode.begin + d;
    if (oq(i) > 0) shortest = std::min(shortest, oseq(i));
  }
  const int64_t slack = 64 + bs;  // the snap and the alignment, at each end
  if (shortest >= 4 * slack && dec_total / segs >= 4 * slack) {
    for (int32_t j = 0; j < segs; ++j) {
      int64_t keys = 0;
      for (int32_t q = p.segment_cu_pieces[j]; q < p.segment_cu_pieces[j + 1]; ++q)
        keys += p.piece_kv_len[q];
      ASSERT_LE(std::llabs(keys - dec_total / segs), 2 * slack + 1) << "segment " << j;
    }
  }
}

// `a` is any plan of a step and `b` the plan of the same step laid out by ordered_input:
// identical path ranges, extend chunks and decode splits (both describe the ordered batch), and
// b's layout is a's layout permuted by a.order (request a.order[i] at position i), rows and
// padding included; a's token rows go to b's by reorder_token_rows.
void check_same_paths(const StepPlan& a, const StepPlan& b) {
  ASSERT_EQ(a.num_requests, b.num_requests);
  const int32_t n = a.num_requests;
  EXPECT_EQ(a.num_tokens, b.num_tokens);
  EXPECT_EQ(a.max_query_len, b.max_query_len);
  EXPECT_EQ(a.max_seq_len, b.max_seq_len);
  ASSERT_EQ(a.max_blocks_per_request, b.max_blocks_per_request);
  ASSERT_EQ(a.block_table.size(), b.block_table.size());
  ASSERT_EQ(a.slot_mapping.size(), b.slot_mapping.size());
  std::vector<RequestClass> classes(n);
  std::vector<int32_t> query_lens(n), context_lens(n), cu_q(n + 1, 0), cu_k(n + 1, 0);
  std::vector<int32_t> table(a.block_table.size());
  for (int32_t i = 0; i < n; ++i) {
    const int32_t r = a.order[i];
    classes[i] = a.classes[r];
    query_lens[i] = a.query_lens[r];
    context_lens[i] = a.context_lens[r];
    cu_q[i + 1] = cu_q[i] + a.query_lens[r];
    cu_k[i + 1] = cu_k[i] + a.seq_len(r);
    std::copy(a.block_row(r), a.block_row(r) + a.max_blocks_per_request,
              table.begin() + int64_t(i) * a.max_blocks_per_request);
  }
  std::vector<int64_t> slots(a.slot_mapping.size());
  tripath::reorder_token_rows(a, a.slot_mapping.data(), slots.data(), sizeof(int64_t));
  EXPECT_EQ(classes, b.classes);
  EXPECT_EQ(query_lens, b.query_lens);
  EXPECT_EQ(context_lens, b.context_lens);
  EXPECT_EQ(cu_q, b.cu_seqlens_q);
  EXPECT_EQ(cu_k, b.cu_seqlens_k);
  EXPECT_EQ(table, b.block_table);
  EXPECT_EQ(slots, b.slot_mapping);
  if (a.is_ordered) {  // the identity permutation: the very same layout
    EXPECT_EQ(a.cu_seqlens_q, b.cu_seqlens_q);
    EXPECT_EQ(a.block_table, b.block_table);
    EXPECT_EQ(a.slot_mapping, b.slot_mapping);
  }
  for (auto [x, y] :
       {std::pair{&a.decode, &b.decode}, {&a.extend, &b.extend}, {&a.prefill, &b.prefill}}) {
    EXPECT_EQ(x->begin, y->begin);
    EXPECT_EQ(x->end, y->end);
    EXPECT_EQ(x->token_begin, y->token_begin);
    EXPECT_EQ(x->token_end, y->token_end);
  }
  EXPECT_EQ(a.extend_chunk_budget, b.extend_chunk_budget);
  EXPECT_EQ(a.num_chunks, b.num_chunks);
  EXPECT_EQ(a.chunk_kv_start, b.chunk_kv_start);
  EXPECT_EQ(a.chunk_kv_len, b.chunk_kv_len);
  EXPECT_EQ(a.chunk_cu_kv, b.chunk_cu_kv);
  EXPECT_EQ(a.split_tokens, b.split_tokens);
  EXPECT_EQ(a.decode_cu_splits, b.decode_cu_splits);
  EXPECT_EQ(a.split_request, b.split_request);
  EXPECT_EQ(a.split_kv_start, b.split_kv_start);
  EXPECT_EQ(a.split_kv_len, b.split_kv_len);
  EXPECT_EQ(a.segment_cu_pieces, b.segment_cu_pieces);
  EXPECT_EQ(a.decode_cu_pieces, b.decode_cu_pieces);
  EXPECT_EQ(a.piece_request, b.piece_request);
  EXPECT_EQ(a.piece_kv_start, b.piece_kv_start);
  EXPECT_EQ(a.piece_kv_len, b.piece_kv_len);
}

class PlanProperties : public ::testing::TestWithParam<uint64_t> {};

TEST_P(PlanProperties, HoldOnRandomSteps) {
  std::mt19937_64 rng(GetParam());
  for (int step = 0; step < 500; ++step) {
    const RandomStep s = random_step(rng);
    const StepPlan p = tripath::plan_step(s.in);
    check_plan(s.in, p);
    ASSERT_FALSE(HasFailure()) << "seed " << GetParam() << " step " << step;

    // The ordered layout plans to the same path ranges, chunks and splits, its layout being
    // this plan's permuted by order; planning it again changes nothing.
    std::vector<int32_t> storage;
    const StepInput ordered = tripath::ordered_input(s.in, p, storage);
    const StepPlan q = tripath::plan_step(ordered);
    check_plan(ordered, q);
    ASSERT_TRUE(q.is_ordered) << "step " << step;
    for (int32_t i = 0; i < q.num_requests; ++i) ASSERT_EQ(q.order[i], i);
    check_same_paths(p, q);
    ASSERT_FALSE(HasFailure()) << "seed " << GetParam() << " step " << step;
    std::vector<int32_t> storage2;
    const StepInput again = tripath::ordered_input(ordered, q, storage2);
    check_same_paths(q, tripath::plan_step(again));
    ASSERT_FALSE(HasFailure()) << "seed " << GetParam() << " step " << step << " (re-ordered)";
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, PlanProperties, ::testing::Values(1, 2, 3, 4, 5, 6),
                         [](const ::testing::TestParamInfo<uint64_t>& i) {
                           return "Seed" + std::to_string(i.param);
                         });

}  // namespace
