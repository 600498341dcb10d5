// The host-side planner: turns one continuous-batching step (per request: query_len,
// context_len, block-table row) into everything the backends need, once per step, shared by all
// layers: each request's class, the stable [decode | extend | prefill] order, per-path ranges,
// cu_seqlens, the slot mapping, the extend context chunk schedule and the decode split-KV
// partition. Pure host C++; no CUDA.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace tripath {

enum class RequestClass : uint8_t { kDecode = 0, kExtend = 1, kPrefill = 2 };
const char* class_name(RequestClass c);

struct StepInput {
  std::vector<int32_t> query_lens;    // [num_requests], >= 0
  std::vector<int32_t> context_lens;  // [num_requests], >= 0
  // Row-major [num_requests, block_table_stride] physical block ids; row r must hold at least
  // ceil((context_len + query_len) / block_size) valid ids; entries beyond are ignored.
  const int32_t* block_table = nullptr;
  int64_t block_table_stride = 0;
  int64_t num_cache_blocks = 0;  // ids must lie in [0, num_cache_blocks)
  int block_size = 16;

  int decode_threshold = 1;             // query_len <= threshold is decode
  int64_t extend_chunk_budget = 32768;  // context tokens per extend chunk, across requests
  int num_work_units = 1;               // GPU: SM count; CPU: threads
  int num_kv_heads = 1;                 // independent decode work per split (one per KV head)
  int min_split_tokens = 256;           // a split is never shorter than this (merge overhead)
  int split_waves = 2;                  // decode slots per work unit (resident blocks per SM)
  // Decode segments (StepPlan::segment_cu_pieces): 0 never, 1 where the planner's model
  // predicts them faster than the uniform splits, 2 always (tests).
  int decode_segments = 1;
};

// split_waves for the `mla` backend's steps: its decode kernels (mma.sync packed and wgmma) run
// one block per SM, so a second wave of splits only adds merge work (H200, mla-decode-4k: 259
// -> 240 us at 128 heads, 129 -> 120 us at 16; decode-mixed unchanged). mla_baseline (several
// blocks per SM) keeps StepInput's default: at 1 it measured 279 against 176 us at 16 heads.
// mla_split_waves(backend) says which; bench and serve plan with it.
inline constexpr int kMlaSplitWaves = 1;
inline int mla_split_waves(std::string_view mla_backend) {
  return mla_backend == "mla" ? kMlaSplitWaves : StepInput{}.split_waves;
}
// num_kv_heads (thread blocks per split) for the `mla` backend's steps: above 64 heads its wgmma
// kernel runs 64-row blocks, so each split is num_heads / 64 blocks (128 heads: 2). Planned as 1,
// mla-decode-4k at 128 heads took two splits per request, 256 blocks on 132 SMs: two waves
// (H200: 203 us for the kernel against 197 for one split per request, plus the merge). Other
// backends (and the mla backend up to 64 heads: one block per split) plan 1.
inline int mla_split_units(std::string_view mla_backend, int num_heads) {
  return mla_backend == "mla" && num_heads > 64 ? (num_heads + 63) / 64 : 1;
}

struct PathRange {
  int32_t begin = 0, end = 0;              // request positions in the ordered batch
  int64_t token_begin = 0, token_end = 0;  // query token positions in the ordered batch
  int32_t num_requests() const { return end - begin; }
  int64_t num_tokens() const { return token_end - token_begin; }
};

struct StepPlan {
  uint64_t serial =
      0;  // unique per plan_step call: CUDA backends check run() got the prepared plan
  int32_t num_requests = 0;
  int64_t num_tokens = 0;
  int block_size = 16;
  int decode_threshold = 1;
  int64_t num_cache_blocks = 0;

  // In the caller's (input) order.
  std::vector<RequestClass> classes;
  // order[i] = input index of the request at position i of [decode | extend | prefill] (stable);
  // inverse[input index] = position. is_ordered: the input already was in that order.
  std::vector<int32_t> order;
  std::vector<int32_t> inverse;
  bool is_ordered = true;

  // The batch layout, in the caller's order: what run() indexes q/k/v/out/lse rows and cache
  // slots by. For an ordered plan this is the [decode | extend | prefill] order; a backend that
  // accepts any order (unified, reference) runs an unordered plan in the order it was given.
  std::vector<int32_t> query_lens;
  std::vector<int32_t> context_lens;
  std::vector<int32_t> cu_seqlens_q;  // [num_requests + 1]
  std::vector<int32_t> cu_seqlens_k;  // [num_requests + 1], seq_len = context + query
  int32_t max_query_len = 0;
  // The longest decode request's query (0 without decode requests): what sizes decode tiles,
  // never max_query_len, which a step's prompts set.
  int32_t max_decode_query_len = 0;
  int32_t max_seq_len = 0;
  int32_t max_blocks_per_request = 0;
  std::vector<int32_t> block_table;   // [num_requests, max_blocks_per_request], rows reordered
  std::vector<int64_t> slot_mapping;  // [num_tokens] cache slot of each new token

  // Path ranges, extend chunks and decode splits describe the ordered batch (position i =
  // request order[i]); they equal the layout above when is_ordered, and backends that use them
  // refuse unordered plans.
  PathRange decode, extend, prefill;

  // Extend context chunks: chunk c covers context tokens
  // [chunk_kv_start[c][e], + chunk_kv_len[c][e]) of extend request e (e counts from
  // extend.begin). Each chunk holds at most extend_chunk_budget tokens; every context token of
  // every extend request is in exactly one chunk. chunk_cu_kv[c] is the prefix sum over e.
  int64_t extend_chunk_budget = 0;
  int32_t num_chunks = 0;
  std::vector<int32_t> chunk_kv_start;  // [num_chunks, extend.num_requests()]
  std::vector<int32_t> chunk_kv_len;    // [num_chunks, extend.num_requests()]
  std::vector<int32_t> chunk_cu_kv;     // [num_chunks, extend.num_requests() + 1]

  // Decode split-KV: decode request d (counted from decode.begin) owns splits
  // [decode_cu_splits[d], decode_cu_splits[d + 1]); split s covers keys
  // [split_kv_start[s], + split_kv_len[s]) of its request's seq_len keys.
  int32_t split_tokens = 0;               // the split length chosen (a multiple of block_size)
  std::vector<int32_t> decode_cu_splits;  // [decode.num_requests() + 1]
  std::vector<int32_t> split_request;     // [num_splits] ordered request position
  std::vector<int32_t> split_kv_start;    // [num_splits]
  std::vector<int32_t> split_kv_len;      // [num_splits]
  int32_t num_splits() const { return static_cast<int32_t>(split_request.size()); }

  // Decode segments: the balanced alternative to the splits above, for a kernel whose blocks
  // each run a list of items (three_path's split-KV decode; other backends use the splits).
  // The decode requests' keys, end to end, are cut into num_segments() runs of about equal
  // length, the same cuts for every KV head; a piece is a request's keys between two cuts.
  // Segment j owns pieces [segment_cu_pieces[j], segment_cu_pieces[j + 1]); piece q covers keys
  // [piece_kv_start[q], + piece_kv_len[q]) of ordered request piece_request[q]; decode request
  // d (counted from decode.begin) owns pieces [decode_cu_pieces[d], decode_cu_pieces[d + 1]),
  // in key order. Empty unless the planner's model predicts them faster than the splits
  // (src/plan/decode_segments.cpp).
  std::vector<int32_t> segment_cu_pieces;  // [num_segments + 1], or empty
  std::vector<int32_t> decode_cu_pieces;   // [decode.num_requests() + 1], or empty
  std::vector<int32_t> piece_request;      // [num_pieces]
  std::vector<int32_t> piece_kv_start;     // [num_pieces]
  std::vector<int32_t> piece_kv_len;       // [num_pieces]
  int32_t num_segments() const {
    return segment_cu_pieces.empty() ? 0 : static_cast<int32_t>(segment_cu_pieces.size()) - 1;
  }

  int32_t seq_len(int32_t i) const { return context_lens[i] + query_lens[i]; }
  const int32_t* block_row(int32_t i) const {
    return block_table.data() + static_cast<int64_t>(i) * max_blocks_per_request;
  }
};

// Validates `input` (clear errors naming the request and field) and builds the plan.
StepPlan plan_step(const StepInput& input);

// The same step with its requests permuted into plan.order: what an engine passes to plan_step
// after laying its batch out in the ordered form (the result has is_ordered == true).
StepInput ordered_input(const StepInput& input, const StepPlan& plan,
                        std::vector<int32_t>& block_table_storage);

// Permutes per-token rows of the plan's (caller-order) layout into the [decode | extend |
// prefill] layout of plan_step(ordered_input(...)): `dst` and `src` hold num_tokens rows of
// `row_bytes` each.
void reorder_token_rows(const StepPlan& plan, const void* src, void* dst, int64_t row_bytes);

// Pure partition functions, shared with future device-side planners and tested on their own.
// Extend chunks (see extend_chunks.cpp for the rule): returns the number of chunks and fills
// starts/lens as [num_chunks, contexts.size()].
int32_t partition_extend_chunks(const std::vector<int32_t>& contexts, int64_t budget,
                                std::vector<int32_t>& starts, std::vector<int32_t>& lens);
// Decode split length (multiple of align) for the given key counts; see decode_splits.cpp.
int32_t choose_split_tokens(const std::vector<int32_t>& kv_lens, int num_work_units,
                            int num_kv_heads, int min_split_tokens, int split_waves, int align);
// Decode segments (see decode_segments.cpp): kv_lens laid end to end and cut into num_segments
// runs of about equal length, each cut aligned to `align` keys within its request and moved to
// the request's edge when within `snap` keys of it. Fills cu_pieces [kv_lens.size() + 1] (request
// r owns pieces [cu_pieces[r], cu_pieces[r + 1]), in key order), piece_start / piece_len (keys of
// the request) and segment_cu [num_segments + 1] (segment j owns pieces [segment_cu[j],
// segment_cu[j + 1])). A request of length <= 0 has no pieces.
void partition_decode_segments(const std::vector<int32_t>& kv_lens, int num_segments, int align,
                               int snap, std::vector<int32_t>& cu_pieces,
                               std::vector<int32_t>& piece_start, std::vector<int32_t>& piece_len,
                               std::vector<int32_t>& segment_cu);

}  // namespace tripath
