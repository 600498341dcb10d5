// The MLA CUDA backends, "mla" and "mla_baseline" (shared/DESIGN.md section 6). One class: they
// share the latent cache write and the non-absorbed extend/prefill path and differ only in the
// absorbed decode kernel.
//
// Decode (the first plan.decode.num_tokens() tokens): work items (request, split, row block)
// from the plan's split-KV partition (planned with num_kv_heads = 1: the latent is one KV head).
//   mla_baseline: 16-row blocks, always partial states, then the merge kernel.
//   mla: 16/32/64-row blocks (heads packed in M); a step whose requests all have one split
//        writes the output directly, otherwise partial states and the merge kernel. 64-row
//        steps on a bf16 cache run the seesaw wgmma kernel (decode_seesaw.cuh, the default
//        TRIPATH_MLA_WGMMA=4: 169 against 207 us for =1 on mla-decode-4k at 128 heads, H200 run
//        j3; 154 us since its refills at blocks under 64 keys are issued by four warps, run k6),
//        TMA tile loads. =1 runs the first wgmma kernel (decode_wgmma.cuh; 1.66x the
//        mma.sync one at 128 heads on the H200), cp.async tile loads; TRIPATH_MLA_WGMMA=0
//        keeps mma.sync there, =2 loads wgmma's tiles by TMA (measured 3% slower: the
//        kernel waits on its barriers, not its loads), =3 runs wgmma (TMA) on
//        every bf16 step, a request's rows under 64 padded (its items are the same: with at
//        most 64 rows a request has one row block whatever the block height), =4 runs the
//        seesaw form on the 64-row steps (decode_seesaw.cuh: each warpgroup computes S of every
//        other tile; TMA loads; the plain kernel where no latent map can be made). TRIPATH_PDL=1
//        launches the decode kernel and its merge as programmatic dependents.
// Extend and prefill (non-absorbed, q/k 192, v 128), in passes over a bounded workspace: every
// request's keys are cut into pieces (context pieces of at most `chunk` tokens, then its own new
// tokens in pieces of at most `chunk`), a pass takes at most one piece of each request up to
// `chunk` workspace rows, and runs
//   gather (latent rows -> workspace, k_pe broadcast into K) -> two strided-batched cuBLAS
//   GEMMs with kv_b_proj (k_nope into K, v into V) -> 192/128 attention (mla on compute
//   capability 9.0: the Hopper flash kernel, 128-row items; otherwise, and for the portable
//   mla_baseline, the unified kernel's 64-row tiles) ->
//   merge_parts (running LSE merge; a token's last part writes the bf16 output and LSE).
// A request with a single piece (a prefill that fits) skips the merge: the attention writes its
// output directly. Pieces of a context part see all their keys; self pieces are causal.
// Tests: tests/gpu/test_gpu_mla.cpp.
#include <cublas_v2.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_util.h"
#include "device_info.h"
#include "device_plan.h"
#include "merge/merge_states.h"
#include "mla/mla.h"
#include "mla_backends.h"
#include "prefill/launch.h"
#include "tensor_map_cache.h"
#include "tripath/error.h"
#include "tripath/kv_cache.h"
#include "unified/launch.h"

namespace tripath {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kWsBlock = 64;                // workspace "block size" of the decompressed K/V
constexpr int64_t kMaxChunkTokens = 65536;  // keys decompressed per pass, at most
constexpr int64_t kMaxWorkspaceBytes = int64_t(4) << 30;  // K/V/latent workspace cap
constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;

#define TRIPATH_CUBLAS_CHECK(expr)                                                      \
  do {                                                                                  \
    const cublasStatus_t tripath_st_ = (expr);                                          \
    if (tripath_st_ != CUBLAS_STATUS_SUCCESS) {                                         \
      throw Error(std::string("tripath: cuBLAS error ") + std::to_string(tripath_st_) + \
                  " from " #expr);                                                      \
    }                                                                                   \
  } while (0)

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

void check_gpu_dtype(const TensorView& t, const char* name, std::initializer_list<DType> ok,
                     const char* expected) {
  if (!t.defined()) return;
  bool good = false;
  for (DType d : ok) good = good || t.dtype == d;
  TRIPATH_CHECK_ARG(good, name, dtype_name(t.dtype), expected);
}

// GPU rules on top of validate_mla_call.
void validate_cuda_mla_call(const StepPlan& plan, const MlaParams& params, const MlaInputs& in) {
  validate_mla_call(plan, params, in, Device::kCUDA);
  const DType c = in.cache.config.dtype;
  TRIPATH_CHECK_ARG(c == DType::kBF16 || c == DType::kFP8E4M3, "cache.dtype", dtype_name(c),
                    "bf16 or fp8_e4m3 (the GPU MLA kernels' latent cache types)");
  const char* bf16_only = "bf16 (the GPU MLA kernels)";
  check_gpu_dtype(in.latent, "latent", {DType::kBF16, DType::kF16, DType::kF32},
                  "bf16, f16 or f32");
  check_gpu_dtype(in.q_absorbed, "q_absorbed", {DType::kBF16}, bf16_only);
  check_gpu_dtype(in.out_absorbed, "out_absorbed", {DType::kBF16}, bf16_only);
  check_gpu_dtype(in.q, "q", {DType::kBF16}, bf16_only);
  check_gpu_dtype(in.out, "out", {DType::kBF16}, bf16_only);
  check_gpu_dtype(in.kv_b_proj, "kv_b_proj", {DType::kBF16}, bf16_only);
}

void launch_mla_cache_write(const MlaCacheView& cache, const TensorView& latent,
                            const int64_t* slot_mapping, int64_t num_tokens, cudaStream_t stream) {
  kernels::MlaCacheWriteParams w{};
  w.latent = latent.data;
  w.cache = cache.latent.data;
  w.slot_mapping = slot_mapping;
  w.num_tokens = num_tokens;
  w.scale = cache.config.dtype == DType::kFP8E4M3 ? cache.config.scale : 1.0f;
  TRIPATH_CUDA_CHECK(kernels::launch_mla_cache_write(w, latent.dtype, cache.config.dtype, stream));
}

enum class MlaKind { kPacked, kBaseline };

// One launch of the unified 192/128 kernel in a pass: virtual requests v (rows 2v of the
// arrays) whose query tokens are [cu[2v], cu[2v + 1]) relative to `base_token`, whose keys are
// workspace rows from block table row 2v, and whose causal offset is ctx[2v].
struct AttentionGroup {
  size_t cu = 0, ctx = 0, table = 0, items = 0;
  int32_t num_items = 0, max_blocks = 1, base_token = 0, num_tokens = 0;
};

struct Pass {
  size_t segments = 0;
  int32_t num_segments = 0, max_segment_rows = 0;
  int32_t rows = 0;  // workspace rows used (pieces rounded up to kWsBlock)
  AttentionGroup direct, partial;
  size_t ranges = 0;
  int32_t num_ranges = 0, max_range_tokens = 0;
};

// A key range of one request decompressed in one pass.
struct Piece {
  int32_t request;
  int32_t key_begin, len;
  int32_t q_from;  // first query token (within the request) that the piece serves
  bool context;    // context piece: every query sees every key; else causal (self piece)
};

class CudaMlaBackend final : public MlaBackend {
 public:
  explicit CudaMlaBackend(MlaKind kind) : kind_(kind) {
    // Read once, at creation (read_variant: unset takes 4; anything but 0-4 is an error).
    const int wgmma = read_variant("TRIPATH_MLA_WGMMA");
    wgmma_decode_ = wgmma >= 1 && kind_ == MlaKind::kPacked;
    wgmma_tma_ = wgmma >= 2;
    wgmma_all_rows_ = wgmma == 3;
    wgmma_seesaw_ = wgmma == 4;
    pdl_ = read_variant("TRIPATH_PDL") == 1 && kind_ == MlaKind::kPacked;
  }
  ~CudaMlaBackend() override {
    if (cublas_ != nullptr) cublasDestroy(cublas_);
  }
  CudaMlaBackend(const CudaMlaBackend&) = delete;
  CudaMlaBackend& operator=(const CudaMlaBackend&) = delete;

  const char* name() const override { return kind_ == MlaKind::kPacked ? "mla" : "mla_baseline"; }

  void prepare(const StepPlan& plan, const MlaParams& params, void* stream) override {
    params.validate();
    check_ordered(plan, name());
    arena_.clear();
    offsets_ = add_common_plan_arrays(plan, arena_);
    prepare_decode(plan, params);
    prepare_extend(plan, params);
    arena_.upload(static_cast<cudaStream_t>(stream));
    prepared_serial_ = plan.serial;
    prepared_heads_ = params.num_heads;
  }

  void run(const StepPlan& plan, const MlaParams& params, const MlaInputs& in) override {
    check_ordered(plan, name());
    validate_cuda_mla_call(plan, params, in);
    TRIPATH_CHECK_ARG(prepared_serial_ == plan.serial, "plan",
                      "a plan this backend has not prepared",
                      std::string("prepare(plan, params, stream) called for this plan before run "
                                  "(backend ") +
                          name() + ")");
    TRIPATH_CHECK_ARG(
        prepared_heads_ == params.num_heads, "params.num_heads", params.num_heads,
        "the head count prepare() was given (" + std::to_string(prepared_heads_) + ")");
    const cudaStream_t stream = static_cast<cudaStream_t>(in.stream);
    if (in.latent.defined()) {
      launch_mla_cache_write(in.cache, in.latent, arena_.at<int64_t>(offsets_.slot_mapping),
                             plan.num_tokens, stream);
    }
    if (plan.decode.num_tokens() > 0) run_decode(plan, params, in, stream);
    if (!passes_.empty()) run_extend(plan, params, in, stream);
  }

 private:
  // ---- decode (absorbed) ----
  void prepare_decode(const StepPlan& plan, const MlaParams& params) {
    const int H = params.num_heads;
    const int64_t nd = plan.decode.num_tokens();
    int max_rows = 0;
    max_splits_ = 0;
    for (int32_t d = 0; d < plan.decode.num_requests(); ++d) {
      const int32_t i = plan.decode.begin + d;
      max_rows = std::max(max_rows, plan.query_lens[i] * H);
      max_splits_ = std::max(max_splits_, plan.decode_cu_splits[d + 1] - plan.decode_cu_splits[d]);
    }
    rows_per_block_ = kind_ == MlaKind::kBaseline ? kernels::kMlaBaselineRows
                                                  : kernels::mla_decode_packed_rows(max_rows);
    direct_ = kind_ == MlaKind::kPacked && max_splits_ <= 1;
    std::vector<kernels::MlaDecodeWorkItem> items;
    std::vector<int32_t> token_parts(static_cast<size_t>(nd), 0);
    for (int32_t d = 0; d < plan.decode.num_requests(); ++d) {
      const int32_t i = plan.decode.begin + d;
      const int32_t first = plan.decode_cu_splits[d];
      const int32_t count = plan.decode_cu_splits[d + 1] - first;
      for (int32_t t = 0; t < plan.query_lens[i]; ++t)
        token_parts[static_cast<size_t>(plan.cu_seqlens_q[i] + t)] = count;
      const int rows = plan.query_lens[i] * H;
      for (int32_t s = 0; s < count; ++s) {
        const int32_t start = plan.split_kv_start[first + s];
        for (int rb = 0; rb < rows; rb += rows_per_block_) {
          items.push_back(
              {i, direct_ ? -1 : s, start, start + plan.split_kv_len[first + s], rb, {0, 0, 0}});
        }
      }
    }
    // Longest key ranges first, as the planner's makespan model assumes: with more items than
    // resident blocks, the blocks that start last are then the short remainders, not a full split.
    std::stable_sort(items.begin(), items.end(), [](const auto& x, const auto& y) {
      return x.kv_end - x.kv_begin > y.kv_end - y.kv_begin;
    });
    num_decode_items_ = static_cast<int32_t>(items.size());
    decode_items_ = arena_.add(items);
    token_parts_ = arena_.add(token_parts);
    decode_lse_offset_ = 0;
    if (!direct_ && nd > 0) {
      const size_t rows = static_cast<size_t>(max_splits_) * nd * H;
      decode_lse_offset_ = aligned(rows * kernels::kMlaLatent * sizeof(float));
      decode_ws_.ensure(decode_lse_offset_ + aligned(rows * sizeof(float)));
    }
  }

  void run_decode(const StepPlan& plan, const MlaParams& params, const MlaInputs& in,
                  cudaStream_t stream) {
    const MlaCacheConfig& c = in.cache.config;
    const float cache_scale = c.dtype == DType::kFP8E4M3 ? c.scale : 1.0f;
    const int H = params.num_heads;
    const int64_t nd = plan.decode.num_tokens();
    kernels::MlaDecodeParams p{};
    p.q = in.q_absorbed.data;
    p.cache = in.cache.latent.data;
    p.out = in.out_absorbed.data;
    p.lse = in.lse_absorbed.defined() ? in.lse_absorbed.ptr<float>() : nullptr;
    p.partial_out = direct_ ? nullptr : decode_ws_.as<float>();
    p.partial_lse = direct_ ? nullptr : decode_ws_.as<float>(decode_lse_offset_);
    p.block_table = arena_.at<int32_t>(offsets_.block_table);
    p.cu_seqlens_q = arena_.at<int32_t>(offsets_.cu_seqlens_q);
    p.context_lens = arena_.at<int32_t>(offsets_.context_lens);
    p.items = arena_.at<kernels::MlaDecodeWorkItem>(decode_items_);
    p.num_items = num_decode_items_;
    p.num_tokens = static_cast<int32_t>(nd);
    p.num_heads = H;
    p.max_blocks_per_request = plan.max_blocks_per_request;
    p.block_size = c.block_size;
    p.log2_block_size = log2_of(c.block_size);
    p.scale_log2 = params.effective_scale() * cache_scale * kLog2e;
    p.out_scale = cache_scale;
    p.pdl = pdl_ ? 1 : 0;  // read by the packed and wgmma launches (the baseline's is plain)
    if (kind_ == MlaKind::kBaseline) {
      TRIPATH_CUDA_CHECK(kernels::launch_mla_decode_baseline(p, c.dtype, stream));
    } else if (wgmma_decode_ &&
               (rows_per_block_ == kernels::kMlaWgmmaRows || wgmma_all_rows_) &&
               c.dtype == DType::kBF16 && cuda_device_info().compute_capability == 90 &&
               kernels::mla_decode_wgmma_built()) {
      // The latent map, encoded once per cache (TMA tile loads; nullptr: cp.async).
      const kernels::MlaLatentMap* map = nullptr;
      const LatentMapKey key{p.cache, c.num_blocks, c.block_size};
      if (wgmma_tma_ && latent_maps_.get(key, &latent_map_, [&](kernels::MlaLatentMap* m) {
            return kernels::make_mla_latent_map(p.cache, c.num_blocks, c.block_size, m);
          })) {
        map = &latent_map_;
      }
      if (wgmma_seesaw_ && map != nullptr) {
        TRIPATH_CUDA_CHECK(kernels::launch_mla_decode_seesaw(p, *map, stream));
      } else {
        TRIPATH_CUDA_CHECK(kernels::launch_mla_decode_wgmma(p, map, stream));
      }
    } else {
      TRIPATH_CUDA_CHECK(kernels::launch_mla_decode_packed(p, rows_per_block_, c.dtype, stream));
    }
    if (direct_) return;
    kernels::MergeParams m{};
    m.part_out = p.partial_out;
    m.part_lse = p.partial_lse;
    m.out = in.out_absorbed.data;
    m.lse = p.lse;
    m.token_parts = arena_.at<int32_t>(token_parts_);
    m.num_parts = max_splits_;
    m.heads = H;
    m.dim = kernels::kMlaLatent;
    m.part_stride = nd * H;
    m.row_begin = 0;
    m.row_end = nd * H;
    m.pdl = p.pdl;
    TRIPATH_CUDA_CHECK(kernels::launch_merge_states(m, DType::kBF16, stream));
  }

  // ---- extend and prefill (non-absorbed) ----
  void prepare_extend(const StepPlan& plan, const MlaParams& params) {
    passes_.clear();
    const int H = params.num_heads;
    const int64_t nd = plan.decode.num_tokens();
    if (plan.num_tokens == nd) return;
    const int32_t rb = plan.extend.begin, re = plan.prefill.end;

    // Piece length: the plan's extend chunk budget, at most 65536 keys and the workspace cap.
    const int64_t bytes_per_row =
        int64_t(kernels::kMlaLatent) * 2 + int64_t(H) * (kernels::kMlaQk + kernels::kMlaV) * 2;
    int64_t chunk = std::min<int64_t>(
        round_up(std::max<int64_t>(plan.extend_chunk_budget, 1), kWsBlock), kMaxChunkTokens);
    chunk = std::min(chunk, std::max<int64_t>(kWsBlock, kMaxWorkspaceBytes / bytes_per_row /
                                                            kWsBlock * kWsBlock));

    std::vector<std::vector<Piece>> pieces(static_cast<size_t>(re - rb));
    int32_t mp_begin = -1, mp_end = -1;  // token range of the multi-piece requests
    for (int32_t i = rb; i < re; ++i) {
      std::vector<Piece>& ps = pieces[static_cast<size_t>(i - rb)];
      const int32_t ctx = plan.context_lens[i], q = plan.query_lens[i];
      for (int64_t k = 0; k < ctx; k += chunk)
        ps.push_back({i, int32_t(k), int32_t(std::min<int64_t>(chunk, ctx - k)), 0, true});
      for (int64_t a = 0; a < q; a += chunk)
        ps.push_back(
            {i, int32_t(ctx + a), int32_t(std::min<int64_t>(chunk, q - a)), int32_t(a), false});
      if (ps.size() > 1) {
        const int32_t t0 = plan.cu_seqlens_q[i] - int32_t(nd);
        if (mp_begin < 0) mp_begin = t0;
        mp_end = t0 + q;
      }
    }
    mp_begin_ = std::max(mp_begin, 0);
    mp_tokens_ = mp_begin < 0 ? 0 : mp_end - mp_begin;

    // Passes: at most one piece of each request, in order, up to `chunk` workspace rows.
    std::vector<size_t> next(pieces.size(), 0);
    int32_t max_rows = 0;
    for (;;) {
      std::vector<const Piece*> taken;
      std::vector<bool> first_piece, multi;
      int64_t used = 0;
      for (size_t r = 0; r < pieces.size(); ++r) {
        if (next[r] == pieces[r].size()) continue;
        const Piece& pc = pieces[r][next[r]];
        if (used + round_up(pc.len, kWsBlock) > chunk) continue;
        used += round_up(pc.len, kWsBlock);
        taken.push_back(&pc);
        first_piece.push_back(next[r] == 0);
        multi.push_back(pieces[r].size() > 1);
        ++next[r];
      }
      if (taken.empty()) break;
      passes_.push_back(build_pass(plan, H, taken, first_piece, multi));
      max_rows = std::max(max_rows, passes_.back().rows);
    }

    // Workspace: latent [rows, 512] bf16, K [rows, H, 192], V [rows, H, 128] bf16, partial
    // and running states [mp_tokens, H, 128] f32 with their LSEs.
    const size_t rows = static_cast<size_t>(max_rows);
    const size_t state_rows = static_cast<size_t>(mp_tokens_) * H;
    size_t at = 0;
    ws_latent_ = at;
    at += aligned(rows * kernels::kMlaLatent * 2);
    ws_k_ = at;
    at += aligned(rows * H * kernels::kMlaQk * 2);
    ws_v_ = at;
    at += aligned(rows * H * kernels::kMlaV * 2);
    ws_part_out_ = at;
    at += aligned(state_rows * kernels::kMlaV * sizeof(float));
    ws_part_lse_ = at;
    at += aligned(state_rows * sizeof(float));
    ws_acc_out_ = at;
    at += aligned(state_rows * kernels::kMlaV * sizeof(float));
    ws_acc_lse_ = at;
    at += aligned(state_rows * sizeof(float));
    extend_ws_.ensure(at);
    if (cublas_ == nullptr) {
      TRIPATH_CUBLAS_CHECK(cublasCreate(&cublas_));
      cublas_ws_.ensure(kCublasWorkspaceBytes);
      TRIPATH_CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_ws_.as<void>(), cublas_ws_.size()));
    }
  }

  Pass build_pass(const StepPlan& plan, int H, const std::vector<const Piece*>& taken,
                  const std::vector<bool>& first_piece, const std::vector<bool>& multi) {
    const int32_t nd = static_cast<int32_t>(plan.decode.num_tokens());
    Pass pass;
    std::vector<kernels::MlaGatherSegment> segments;
    std::vector<kernels::MlaMergeRange> ranges;
    struct Group {
      std::vector<int32_t> cu, ctx, table_rows;  // table_rows: first workspace block, keys
      std::vector<int32_t> keys;
      std::vector<kernels::UnifiedWorkItem> items;
    } groups[2];  // 0: direct output, 1: partial states
    int32_t ws_row = 0;
    for (size_t n = 0; n < taken.size(); ++n) {
      const Piece& pc = *taken[n];
      segments.push_back({pc.request, pc.key_begin, pc.len, ws_row});
      pass.max_segment_rows = std::max(pass.max_segment_rows, int32_t(round_up(pc.len, kWsBlock)));
      const int32_t t0 = plan.cu_seqlens_q[pc.request] - nd;  // request's first token
      const int32_t q = plan.query_lens[pc.request];
      const int g = multi[n] ? 1 : 0;
      const int32_t base = g == 1 ? mp_begin_ : 0;
      Group& G = groups[g];
      const int32_t v = static_cast<int32_t>(G.keys.size());
      G.cu.push_back(t0 + pc.q_from - base);
      G.cu.push_back(t0 + q - base);
      G.ctx.push_back(pc.context ? pc.len : 0);
      G.ctx.push_back(0);
      G.table_rows.push_back(ws_row / kWsBlock);
      G.keys.push_back(pc.len);
      const int32_t nq = q - pc.q_from;
      for (int h = 0; h < H; ++h)
        for (int32_t r = 0; r < nq; r += extend_rows())
          G.items.push_back({2 * v, h, h, r, 0, pc.len, g == 1 ? 0 : -1, 0});
      if (g == 1) {
        // A self piece is the last part of the tokens it holds keys for; later tokens (and
        // every token of a context piece) still get more parts.
        const int32_t first = first_piece[n] ? kernels::kMlaFirstPart : 0;
        const int32_t a = t0 + pc.q_from - base, e = t0 + q - base;
        const int32_t last_end = pc.context ? a : std::min(e, a + pc.len);
        if (last_end > a) ranges.push_back({a, last_end, first | kernels::kMlaLastPart, 0});
        if (e > last_end) ranges.push_back({last_end, e, first, 0});
      }
      ws_row += static_cast<int32_t>(round_up(pc.len, kWsBlock));
    }
    pass.rows = ws_row;
    pass.num_segments = static_cast<int32_t>(segments.size());
    pass.segments = arena_.add(segments);
    pass.num_ranges = static_cast<int32_t>(ranges.size());
    for (const auto& r : ranges)
      pass.max_range_tokens = std::max(pass.max_range_tokens, r.token_end - r.token_begin);
    pass.ranges = arena_.add(ranges);
    for (int g = 0; g < 2; ++g) {
      Group& G = groups[g];
      AttentionGroup& A = g == 0 ? pass.direct : pass.partial;
      const int32_t nv = static_cast<int32_t>(G.keys.size());
      for (int32_t k : G.keys) A.max_blocks = std::max(A.max_blocks, (k + kWsBlock - 1) / kWsBlock);
      std::vector<int32_t> table(static_cast<size_t>(2 * nv) * A.max_blocks, 0);
      for (int32_t v = 0; v < nv; ++v)
        for (int32_t b = 0; b < (G.keys[v] + kWsBlock - 1) / kWsBlock; ++b)
          table[static_cast<size_t>(2 * v) * A.max_blocks + b] = G.table_rows[v] + b;
      // Longest key ranges first: the launch's tail is short blocks, not one long one.
      auto keys_of = [&](const kernels::UnifiedWorkItem& it) {
        const int32_t v = it.request / 2;
        return G.ctx[2 * v] > 0 ? G.keys[v] : std::min(G.keys[v], it.row_begin + extend_rows());
      };
      std::stable_sort(G.items.begin(), G.items.end(),
                       [&](const auto& x, const auto& y) { return keys_of(x) > keys_of(y); });
      A.cu = arena_.add(G.cu);
      A.ctx = arena_.add(G.ctx);
      A.table = arena_.add(table);
      A.items = arena_.add(G.items);
      A.num_items = static_cast<int32_t>(G.items.size());
      A.base_token = g == 1 ? mp_begin_ : 0;
      A.num_tokens = g == 1 ? mp_tokens_ : static_cast<int32_t>(plan.num_tokens - nd);
    }
    return pass;
  }

  void run_extend(const StepPlan& plan, const MlaParams& params, const MlaInputs& in,
                  cudaStream_t stream) {
    const MlaCacheConfig& c = in.cache.config;
    const float cache_scale = c.dtype == DType::kFP8E4M3 ? c.scale : 1.0f;
    const int H = params.num_heads;
    bf16_t* latent_ws = extend_ws_.as<bf16_t>(ws_latent_);
    bf16_t* k_ws = extend_ws_.as<bf16_t>(ws_k_);
    bf16_t* v_ws = extend_ws_.as<bf16_t>(ws_v_);
    const bf16_t* w = static_cast<const bf16_t*>(in.kv_b_proj.data);
    const bf16_t* q = static_cast<const bf16_t*>(in.q.data);
    bf16_t* out = static_cast<bf16_t*>(in.out.data);
    float* lse = in.lse.defined() ? in.lse.ptr<float>() : nullptr;
    TRIPATH_CUBLAS_CHECK(cublasSetStream(cublas_, stream));
    for (const Pass& pass : passes_) {
      kernels::MlaGatherParams g{};
      g.cache = in.cache.latent.data;
      g.block_table = arena_.at<int32_t>(offsets_.block_table);
      g.segments = arena_.at<kernels::MlaGatherSegment>(pass.segments);
      g.latent_ws = latent_ws;
      g.k_ws = k_ws;
      g.num_segments = pass.num_segments;
      g.max_rows = pass.max_segment_rows;
      g.num_heads = H;
      g.max_blocks_per_request = plan.max_blocks_per_request;
      g.block_size = c.block_size;
      g.scale = cache_scale;
      TRIPATH_CUDA_CHECK(kernels::launch_mla_gather(g, c.dtype, stream));

      // Row-major [rows, 512] x [512, H * 256] per head, as column-major batched GEMMs:
      // C_h [128, rows] (ldc H*192 into K, H*128 into V) = W_h^T [128, 512] x latent^T.
      const float alpha = cache_scale, beta = 0.0f;
      const int ldw = H * (kernels::kMlaNope + kernels::kMlaV);
      TRIPATH_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
          cublas_, CUBLAS_OP_N, CUBLAS_OP_N, kernels::kMlaNope, pass.rows, kernels::kMlaLatent,
          &alpha, w, CUDA_R_16BF, ldw, kernels::kMlaNope + kernels::kMlaV, latent_ws, CUDA_R_16BF,
          kernels::kMlaLatent, 0, &beta, k_ws, CUDA_R_16BF, H * kernels::kMlaQk, kernels::kMlaQk, H,
          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      TRIPATH_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
          cublas_, CUBLAS_OP_N, CUBLAS_OP_N, kernels::kMlaV, pass.rows, kernels::kMlaLatent, &alpha,
          w + kernels::kMlaNope, CUDA_R_16BF, ldw, kernels::kMlaNope + kernels::kMlaV, latent_ws,
          CUDA_R_16BF, kernels::kMlaLatent, 0, &beta, v_ws, CUDA_R_16BF, H * kernels::kMlaV,
          kernels::kMlaV, H, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));

      for (int grp = 0; grp < 2; ++grp) {
        const AttentionGroup& A = grp == 0 ? pass.direct : pass.partial;
        if (A.num_items == 0) continue;
        kernels::UnifiedParams p{};
        p.q = q + int64_t(A.base_token) * H * kernels::kMlaQk;
        p.out = out;
        p.lse = lse;
        p.k_cache = k_ws;
        p.v_cache = v_ws;
        p.partial_out = extend_ws_.as<float>(ws_part_out_);
        p.partial_lse = extend_ws_.as<float>(ws_part_lse_);
        p.block_table = arena_.at<int32_t>(A.table);
        p.cu_seqlens_q = arena_.at<int32_t>(A.cu);
        p.context_lens = arena_.at<int32_t>(A.ctx);
        p.items = arena_.at<kernels::UnifiedWorkItem>(A.items);
        p.num_items = A.num_items;
        p.num_tokens = A.num_tokens;
        p.num_q_heads = H;
        p.num_kv_heads = H;
        p.rows_per_token = 1;
        p.max_blocks_per_request = A.max_blocks;
        p.block_size = kWsBlock;
        p.log2_block_size = log2_of(kWsBlock);
        p.layout = 0;  // NHD: [rows, H, dim] is an NHD cache with the identity block table
        p.window_left = -1;
        p.score_scale = params.effective_scale();
        p.scale_log2 = p.score_scale * kLog2e;
        p.softcap = 0.0f;
        p.v_scale = 1.0f;
        TRIPATH_CUDA_CHECK(flash_extend() ? kernels::launch_flash_prefill_mla(p, stream)
                                          : kernels::launch_unified_mla(p, stream));
      }

      if (pass.num_ranges > 0) {
        kernels::MlaMergePartsParams m{};
        m.part_out = extend_ws_.as<float>(ws_part_out_);
        m.part_lse = extend_ws_.as<float>(ws_part_lse_);
        m.acc_out = extend_ws_.as<float>(ws_acc_out_);
        m.acc_lse = extend_ws_.as<float>(ws_acc_lse_);
        m.out = out + int64_t(mp_begin_) * H * kernels::kMlaV;
        m.lse = lse != nullptr ? lse + int64_t(mp_begin_) * H : nullptr;
        m.ranges = arena_.at<kernels::MlaMergeRange>(pass.ranges);
        m.num_ranges = pass.num_ranges;
        m.max_range_tokens = pass.max_range_tokens;
        m.num_heads = H;
        TRIPATH_CUDA_CHECK(kernels::launch_mla_merge_parts(m, stream));
      }
    }
  }

  using bf16_t = uint16_t;  // bf16 storage; the kernels see the element type

  bool flash_extend() const {
    return kind_ == MlaKind::kPacked && cuda_device_info().compute_capability == 90 &&
           kernels::flash_prefill_mla_built();
  }
  int extend_rows() const { return flash_extend() ? kernels::kFlashPrefillRows : 64; }

  MlaKind kind_;
  bool wgmma_decode_ = false;  // TRIPATH_MLA_WGMMA 1, 2, 3 or 4 (the default)
  bool wgmma_tma_ = false;     // TRIPATH_MLA_WGMMA 2, 3 or 4: its tiles by TMA (1: by cp.async)
  bool wgmma_all_rows_ = false;  // TRIPATH_MLA_WGMMA 3: also steps under 64 rows (padded)
  bool wgmma_seesaw_ = false;    // TRIPATH_MLA_WGMMA 4: the seesaw kernel on 64-row steps
  bool pdl_ = false;             // TRIPATH_PDL=1 (mla only): decode and merge as dependents
  using LatentMapKey = std::tuple<const void*, int64_t, int>;  // cache, num_blocks, block_size
  TensorMapCache<LatentMapKey, kernels::MlaLatentMap> latent_maps_;
  kernels::MlaLatentMap latent_map_{};
  DeviceArena arena_;
  DevicePlanOffsets offsets_;
  uint64_t prepared_serial_ = 0;
  int prepared_heads_ = 0;

  // decode
  int rows_per_block_ = 16;
  int32_t max_splits_ = 0, num_decode_items_ = 0;
  bool direct_ = false;
  size_t decode_items_ = 0, token_parts_ = 0, decode_lse_offset_ = 0;
  DeviceBuffer decode_ws_;

  // extend / prefill
  std::vector<Pass> passes_;
  int32_t mp_begin_ = 0, mp_tokens_ = 0;
  size_t ws_latent_ = 0, ws_k_ = 0, ws_v_ = 0, ws_part_out_ = 0, ws_part_lse_ = 0, ws_acc_out_ = 0,
         ws_acc_lse_ = 0;
  DeviceBuffer extend_ws_, cublas_ws_;
  cublasHandle_t cublas_ = nullptr;
};

}  // namespace

std::unique_ptr<MlaBackend> make_mla_backend() {
  return std::make_unique<CudaMlaBackend>(MlaKind::kPacked);
}

std::unique_ptr<MlaBackend> make_mla_baseline_backend() {
  return std::make_unique<CudaMlaBackend>(MlaKind::kBaseline);
}

void cuda_write_mla_cache(const MlaCacheView& cache, const TensorView& latent,
                          const TensorView& slot_mapping, void* stream) {
  cache.validate(Device::kCUDA);
  const int64_t n = slot_mapping.numel();
  check_tensor(latent, "latent", {n, kMlaEntryDim}, Device::kCUDA);
  check_gpu_dtype(latent, "latent", {DType::kBF16, DType::kF16, DType::kF32}, "bf16, f16 or f32");
  const DType c = cache.config.dtype;
  TRIPATH_CHECK_ARG(c == DType::kBF16 || c == DType::kF16 || c == DType::kFP8E4M3, "cache.dtype",
                    dtype_name(c), "bf16, f16 or fp8_e4m3 (GPU latent caches)");
  launch_mla_cache_write(cache, latent, static_cast<const int64_t*>(slot_mapping.data), n,
                         static_cast<cudaStream_t>(stream));
}

}  // namespace tripath
