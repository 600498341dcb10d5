#include "tripath/step_plan.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "decode_cost.h"
#include "tripath/error.h"
#include "tripath/kv_cache.h"

namespace tripath {

const char* class_name(RequestClass c) {
  switch (c) {
    case RequestClass::kDecode: return "decode";
    case RequestClass::kExtend: return "extend";
    case RequestClass::kPrefill: return "prefill";
  }
  return "unknown";
}

namespace {

std::string at(const char* field, size_t r) {
  return std::string(field) + "[" + std::to_string(r) + "]";
}

void validate(const StepInput& in) {
  TRIPATH_CHECK_ARG(in.query_lens.size() == in.context_lens.size(), "context_lens",
                    std::to_string(in.context_lens.size()) + " entries",
                    std::to_string(in.query_lens.size()) + " entries (one per request, as "
                    "query_lens)");
  const int bs = in.block_size;
  TRIPATH_CHECK_ARG(is_valid_block_size(bs), "block_size", bs, "a power of two in [1, 256]");
  TRIPATH_CHECK_ARG(in.decode_threshold >= 1, "decode_threshold", in.decode_threshold,
                    "at least 1");
  TRIPATH_CHECK_ARG(in.decode_segments >= 0 && in.decode_segments <= 2, "decode_segments",
                    in.decode_segments, "0 (never), 1 (where predicted faster) or 2 (always)");
  TRIPATH_CHECK_ARG(in.extend_chunk_budget >= 1, "extend_chunk_budget", in.extend_chunk_budget,
                    "at least 1 token");
  int64_t tokens = 0;
  for (size_t r = 0; r < in.query_lens.size(); ++r) {
    TRIPATH_CHECK_ARG(in.query_lens[r] >= 0, at("query_lens", r), in.query_lens[r],
                      "a non-negative length");
    TRIPATH_CHECK_ARG(in.context_lens[r] >= 0, at("context_lens", r), in.context_lens[r],
                      "a non-negative length");
    const int64_t seq = static_cast<int64_t>(in.context_lens[r]) + in.query_lens[r];
    TRIPATH_CHECK_ARG(seq <= INT32_MAX, at("context_lens", r), seq,
                      "context_len + query_len below 2^31");
    tokens += in.query_lens[r];
    if (seq == 0) continue;
    TRIPATH_CHECK_ARG(in.block_table != nullptr, "block_table", "null",
                      "a block table (request " + std::to_string(r) + " has " +
                          std::to_string(seq) + " tokens)");
    TRIPATH_CHECK_ARG(in.num_cache_blocks > 0, "num_cache_blocks", in.num_cache_blocks,
                      "the number of blocks in the cache (> 0)");
    const int64_t needed = (seq + bs - 1) / bs;
    TRIPATH_CHECK_ARG(needed <= in.block_table_stride, "block_table row " + std::to_string(r),
                      std::to_string(in.block_table_stride) + " blocks",
                      "at least " + std::to_string(needed) + " blocks for context_len " +
                          std::to_string(in.context_lens[r]) + " + query_len " +
                          std::to_string(in.query_lens[r]) + " at block_size " +
                          std::to_string(bs));
    const int32_t* row = in.block_table + static_cast<int64_t>(r) * in.block_table_stride;
    for (int64_t j = 0; j < needed; ++j) {
      TRIPATH_CHECK_ARG(row[j] >= 0 && row[j] < in.num_cache_blocks,
                        "block_table[" + std::to_string(r) + "][" + std::to_string(j) + "]",
                        row[j],
                        "a block id in [0, " + std::to_string(in.num_cache_blocks) + ")");
    }
  }
  TRIPATH_CHECK_ARG(tokens <= INT32_MAX, "query_lens", tokens, "fewer than 2^31 tokens in total");
}

RequestClass classify(int32_t query_len, int32_t context_len, int threshold) {
  if (query_len <= threshold) return RequestClass::kDecode;
  return context_len == 0 ? RequestClass::kPrefill : RequestClass::kExtend;
}

// Replaces the layout arrays of `p` (built for the ordered batch) by the caller's order.
void use_input_layout(const StepInput& in, StepPlan& p) {
  const int32_t n = p.num_requests;
  const int bs = in.block_size;
  p.query_lens = in.query_lens;
  p.context_lens = in.context_lens;
  for (int32_t r = 0; r < n; ++r) {
    p.cu_seqlens_q[r + 1] = p.cu_seqlens_q[r] + p.query_lens[r];
    p.cu_seqlens_k[r + 1] = p.cu_seqlens_k[r] + p.seq_len(r);
    const int32_t needed = (p.seq_len(r) + bs - 1) / bs;
    const int32_t* src = in.block_table + static_cast<int64_t>(r) * in.block_table_stride;
    int32_t* dst = p.block_table.data() + static_cast<int64_t>(r) * p.max_blocks_per_request;
    std::fill(dst, dst + p.max_blocks_per_request, -1);
    std::copy(src, src + needed, dst);
    for (int32_t t = 0; t < p.query_lens[r]; ++t) {
      const int32_t pos = p.context_lens[r] + t;
      p.slot_mapping[p.cu_seqlens_q[r] + t] = static_cast<int64_t>(dst[pos / bs]) * bs + pos % bs;
    }
  }
}

// Decode segments (decode_segments.cpp) where the cost model of decode_cost.h predicts them
// faster than the splits by more than its 2% margin: the longest segment, each piece charged
// one item overhead, against the splits' greedy makespan; each side pays the merge launch when
// a request has several parts. One segment per slot per KV head, so the launch is one wave.
// `lens`: the keys each decode request attends this step (0 without query tokens).
void plan_decode_segments(const StepInput& in, const std::vector<int32_t>& lens, StepPlan& p) {
  using plan_detail::kItemOverheadKeys;
  using plan_detail::kMergeKeys;
  const int32_t nd = p.decode.num_requests();
  const int64_t slots = static_cast<int64_t>(in.num_work_units) * in.split_waves;
  const int64_t segments = std::min<int64_t>(slots / in.num_kv_heads, 1 << 20);
  if (in.decode_segments == 0 || p.num_splits() == 0 || segments < 2) return;
  std::vector<int32_t> cu, starts, piece_lens, segment_cu;
  partition_decode_segments(lens, static_cast<int>(segments), p.block_size,
                            static_cast<int>(kItemOverheadKeys), cu, starts, piece_lens,
                            segment_cu);
  if (in.decode_segments == 1) {
    int64_t seg_time = 0;
    for (int64_t j = 0; j < segments; ++j) {
      int64_t t = 0;
      for (int32_t q = segment_cu[j]; q < segment_cu[j + 1]; ++q)
        t += piece_lens[q] + kItemOverheadKeys;
      seg_time = std::max(seg_time, t);
    }
    bool seg_merge = false, split_merge = false;
    for (int32_t d = 0; d < nd; ++d) {
      seg_merge = seg_merge || cu[d + 1] - cu[d] > 1;
      split_merge = split_merge || p.decode_cu_splits[d + 1] - p.decode_cu_splits[d] > 1;
    }
    seg_time += seg_merge ? kMergeKeys : 0;
    const int64_t split_time =
        plan_detail::split_makespan(lens, p.split_tokens, in.num_kv_heads, slots) +
        (split_merge ? kMergeKeys : 0);
    if (seg_time * 50 >= split_time * 49) return;
  }
  p.segment_cu_pieces = std::move(segment_cu);
  p.decode_cu_pieces = std::move(cu);
  p.piece_kv_start = std::move(starts);
  p.piece_kv_len = std::move(piece_lens);
  p.piece_request.resize(p.piece_kv_start.size());
  for (int32_t d = 0; d < nd; ++d)
    for (int32_t q = p.decode_cu_pieces[d]; q < p.decode_cu_pieces[d + 1]; ++q)
      p.piece_request[q] = p.decode.begin + d;
}

}  // namespace

StepPlan plan_step(const StepInput& in) {
  validate(in);
  static std::atomic<uint64_t> next_serial{1};
  StepPlan p;
  p.serial = next_serial.fetch_add(1);
  const int32_t n = static_cast<int32_t>(in.query_lens.size());
  p.num_requests = n;
  p.block_size = in.block_size;
  p.decode_threshold = in.decode_threshold;
  p.num_cache_blocks = in.num_cache_blocks;
  p.extend_chunk_budget = in.extend_chunk_budget;

  p.classes.resize(n);
  for (int32_t r = 0; r < n; ++r)
    p.classes[r] = classify(in.query_lens[r], in.context_lens[r], in.decode_threshold);

  // Stable partition by class: a counting sort keeps the input order within each class.
  int32_t count[3] = {0, 0, 0};
  for (RequestClass c : p.classes) ++count[static_cast<int>(c)];
  int32_t next[3] = {0, count[0], count[0] + count[1]};
  p.order.resize(n);
  p.inverse.resize(n);
  for (int32_t r = 0; r < n; ++r) {
    const int32_t pos = next[static_cast<int>(p.classes[r])]++;
    p.order[pos] = r;
    p.inverse[r] = pos;
  }
  p.is_ordered = true;
  for (int32_t i = 0; i < n; ++i) p.is_ordered = p.is_ordered && p.order[i] == i;

  p.query_lens.resize(n);
  p.context_lens.resize(n);
  p.cu_seqlens_q.assign(n + 1, 0);
  p.cu_seqlens_k.assign(n + 1, 0);
  for (int32_t i = 0; i < n; ++i) {
    const int32_t r = p.order[i];
    p.query_lens[i] = in.query_lens[r];
    p.context_lens[i] = in.context_lens[r];
    p.cu_seqlens_q[i + 1] = p.cu_seqlens_q[i] + p.query_lens[i];
    p.cu_seqlens_k[i + 1] = p.cu_seqlens_k[i] + p.seq_len(i);
    p.max_query_len = std::max(p.max_query_len, p.query_lens[i]);
    p.max_seq_len = std::max(p.max_seq_len, p.seq_len(i));
  }
  p.num_tokens = p.cu_seqlens_q[n];

  // Block table rows in the ordered batch, trimmed to what the longest request needs; -1 pads.
  const int bs = in.block_size;
  p.max_blocks_per_request = (p.max_seq_len + bs - 1) / bs;
  p.block_table.assign(static_cast<size_t>(n) * p.max_blocks_per_request, -1);
  p.slot_mapping.resize(static_cast<size_t>(p.num_tokens));
  for (int32_t i = 0; i < n; ++i) {
    const int32_t needed = (p.seq_len(i) + bs - 1) / bs;
    const int32_t* src = in.block_table + static_cast<int64_t>(p.order[i]) * in.block_table_stride;
    int32_t* dst = p.block_table.data() + static_cast<int64_t>(i) * p.max_blocks_per_request;
    std::copy(src, src + needed, dst);
    for (int32_t t = 0; t < p.query_lens[i]; ++t) {
      const int32_t pos = p.context_lens[i] + t;
      p.slot_mapping[p.cu_seqlens_q[i] + t] = static_cast<int64_t>(dst[pos / bs]) * bs + pos % bs;
    }
  }

  auto range = [&](int32_t begin, int32_t end) {
    PathRange r;
    r.begin = begin;
    r.end = end;
    r.token_begin = p.cu_seqlens_q[begin];
    r.token_end = p.cu_seqlens_q[end];
    return r;
  };
  p.decode = range(0, count[0]);
  for (int32_t r = 0; r < n; ++r)
    if (p.classes[r] == RequestClass::kDecode)
      p.max_decode_query_len = std::max(p.max_decode_query_len, in.query_lens[r]);
  p.extend = range(count[0], count[0] + count[1]);
  p.prefill = range(count[0] + count[1], n);

  std::vector<int32_t> extend_contexts(p.context_lens.begin() + p.extend.begin,
                                       p.context_lens.begin() + p.extend.end);
  p.num_chunks = partition_extend_chunks(extend_contexts, in.extend_chunk_budget,
                                         p.chunk_kv_start, p.chunk_kv_len);
  const int32_t ne = p.extend.num_requests();
  p.chunk_cu_kv.assign(static_cast<size_t>(p.num_chunks) * (ne + 1), 0);
  for (int32_t c = 0; c < p.num_chunks; ++c) {
    for (int32_t e = 0; e < ne; ++e) {
      p.chunk_cu_kv[c * (ne + 1) + e + 1] =
          p.chunk_cu_kv[c * (ne + 1) + e] + p.chunk_kv_len[c * ne + e];
    }
  }

  std::vector<int32_t> decode_kv;
  for (int32_t i = p.decode.begin; i < p.decode.end; ++i) decode_kv.push_back(p.seq_len(i));
  p.split_tokens = choose_split_tokens(decode_kv, in.num_work_units, in.num_kv_heads,
                                       in.min_split_tokens, in.split_waves, bs);
  p.decode_cu_splits.assign(p.decode.num_requests() + 1, 0);
  // The keys each decode request attends: none without query tokens this step (no splits).
  std::vector<int32_t> attended(static_cast<size_t>(p.decode.num_requests()));
  for (int32_t d = 0; d < p.decode.num_requests(); ++d) {
    const int32_t i = p.decode.begin + d;
    const int32_t len = attended[d] = p.query_lens[i] > 0 ? p.seq_len(i) : 0;
    for (int32_t start = 0; start < len; start += p.split_tokens) {
      p.split_request.push_back(i);
      p.split_kv_start.push_back(start);
      p.split_kv_len.push_back(std::min(p.split_tokens, len - start));
    }
    p.decode_cu_splits[d + 1] = p.num_splits();
  }
  plan_decode_segments(in, attended, p);
  if (!p.is_ordered) use_input_layout(in, p);
  return p;
}

StepInput ordered_input(const StepInput& in, const StepPlan& plan,
                        std::vector<int32_t>& block_table_storage) {
  TRIPATH_CHECK_ARG(plan.num_requests == static_cast<int32_t>(in.query_lens.size()), "plan",
                    std::to_string(plan.num_requests) + " requests",
                    "a plan of this input (" + std::to_string(in.query_lens.size()) +
                        " requests)");
  StepInput out = in;
  const int64_t stride = in.block_table_stride;
  block_table_storage.assign(static_cast<size_t>(plan.num_requests) * std::max<int64_t>(stride, 0),
                             -1);
  for (int32_t i = 0; i < plan.num_requests; ++i) {
    const int32_t r = plan.order[i];
    out.query_lens[i] = in.query_lens[r];
    out.context_lens[i] = in.context_lens[r];
    if (in.block_table != nullptr && stride > 0) {
      std::copy(in.block_table + r * stride, in.block_table + (r + 1) * stride,
                block_table_storage.begin() + i * stride);
    }
  }
  out.block_table = in.block_table ? block_table_storage.data() : nullptr;
  return out;
}

void reorder_token_rows(const StepPlan& plan, const void* src, void* dst, int64_t row_bytes) {
  // Request order[i] moves from its caller-order offset to the i-th place of the ordered layout.
  int64_t ordered_offset = 0;
  for (int32_t i = 0; i < plan.num_requests; ++i) {
    const int32_t r = plan.order[i];
    const int64_t rows = plan.query_lens[r];
    std::memcpy(static_cast<char*>(dst) + ordered_offset * row_bytes,
                static_cast<const char*>(src) + plan.cu_seqlens_q[r] * row_bytes,
                static_cast<size_t>(rows * row_bytes));
    ordered_offset += rows;
  }
}

}  // namespace tripath
