// reorder_token_rows: the rows of input request r, taken from the plan's (caller-order) layout,
// land on the token range of its position in the ordered batch, for random steps (classes in
// random order, zero-length requests).
#include <random>
#include <vector>

#include "test_util.h"

namespace {

using namespace tptest;

TEST(ReorderTokenRows, PermutesRowsAsOrderSays) {
  std::mt19937_64 rng(41);
  for (int step = 0; step < 300; ++step) {
    tripath::StepInput in;
    const int n = rand_int(rng, 0, 10);
    in.decode_threshold = rand_int(rng, 1, 3);
    for (int r = 0; r < n; ++r) {
      in.query_lens.push_back(rand_int(rng, 0, 2) == 0 ? rand_int(rng, 0, 3)
                                                       : rand_int(rng, 0, 30));
      in.context_lens.push_back(rand_int(rng, 0, 1) * rand_int(rng, 0, 50));
    }
    std::vector<int32_t> seqs(n);
    for (int r = 0; r < n; ++r) seqs[r] = in.query_lens[r] + in.context_lens[r];
    const PagedTable table = make_block_table(seqs, in.block_size, rng);
    in.block_table = table.table.data();
    in.block_table_stride = table.stride;
    in.num_cache_blocks = table.num_blocks;
    const tripath::StepPlan p = tripath::plan_step(in);

    // The source rows are in the plan's layout, the caller's order: request r's token j at
    // row cu_seqlens_q[r] + j.
    const int64_t n_tok = p.num_tokens, row_bytes = 3 * sizeof(int32_t);
    std::vector<int32_t> src(static_cast<size_t>(n_tok * 3) + 3), dst(src.size(), -1);
    int64_t t = 0;
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(p.query_lens[r], in.query_lens[r]) << "step " << step << " request " << r;
      ASSERT_EQ(p.cu_seqlens_q[r], t) << "step " << step << " request " << r;
      for (int32_t j = 0; j < in.query_lens[r]; ++j, ++t) {
        src[t * 3] = r;
        src[t * 3 + 1] = j;
        src[t * 3 + 2] = static_cast<int32_t>(t);
      }
    }
    ASSERT_EQ(t, n_tok);
    tripath::reorder_token_rows(p, src.data(), dst.data(), row_bytes);
    // The destination is the layout of plan_step(ordered_input(...)): position i holds request
    // order[i], its rows in order.
    std::vector<int32_t> storage;
    const tripath::StepPlan q = tripath::plan_step(tripath::ordered_input(in, p, storage));
    ASSERT_TRUE(q.is_ordered);
    ASSERT_EQ(q.num_tokens, n_tok);
    for (int32_t i = 0; i < q.num_requests; ++i) {
      const int32_t r = p.order[i];
      ASSERT_EQ(q.query_lens[i], in.query_lens[r]);
      for (int32_t j = 0; j < q.query_lens[i]; ++j) {
        const int64_t row = q.cu_seqlens_q[i] + j;
        ASSERT_EQ(dst[row * 3], r) << "step " << step << " row " << row;
        ASSERT_EQ(dst[row * 3 + 1], j) << "step " << step << " row " << row;
        ASSERT_EQ(dst[row * 3 + 2], p.cu_seqlens_q[r] + j) << "step " << step << " row " << row;
      }
    }
    ASSERT_EQ(dst[n_tok * 3], -1) << "wrote past the last row";
  }
}

}  // namespace
