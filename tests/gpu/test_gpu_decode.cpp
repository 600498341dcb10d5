// The split-KV paged decode kernel (src/kernels/decode), driven directly through
// launch_paged_decode on decode-only steps, against the CPU reference: random (never zero)
// inputs, outputs / LSEs / partial buffers NaN-poisoned, caches NaN-poisoned outside written
// slots, block tables shuffled over a pool 2.5x the need. Covers GQA groups 1, 3, 4, 8, 16, every
// built head dim, block sizes 1/16/32/64, NHD/HND/tiled, contexts 0..70000, one split (final
// output written directly) and several (uneven, some empty: partials + the merge kernel, the
// planner's partition, or two merged inside 2-CTA clusters of the wide one-block-per-SM form,
// 16-bit caches of head dim <= 128; or items run in per-block lists, as decode segments run),
// window, soft-cap, sinks, LSE on/off, a non-default scale, fp8 KV with distinct k/v scales, f16,
// decode_threshold 2 and 4 (MTP rows), the tiled layout's bulk-copy stages and its cp.async
// form, shared memory NaN-poisoned before each launch. Repeated runs are bitwise identical.
// GpuDecodeBench times the kernel against the unified kRows16 tile on the published decode
// shapes when TRIPATH_DECODE_BENCH=1 (skipped otherwise).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>
#include <sstream>

#include "gpu_test_util.h"
#include "tripath/kv_cache.h"

#ifdef TRIPATH_WITH_CUDA
#include "decode/launch.h"
#include "merge/merge_states.h"
#include "shared_memory_poison.h"
#include "unified/launch.h"
#endif

namespace tripath::gputest {
namespace {

struct DecodeCase {
  std::string name;
  int hq = 8, hkv = 2, dim = 128, block_size = 16;
  KvLayout layout = KvLayout::kNHD;
  DType dtype = DType::kBF16, cache = DType::kBF16;
  int window = -1;
  float softcap = 0.0f, scale = 0.0f;
  bool sinks = false, lse = true;
  int threshold = 1;
  // 1: one split per request, final output written by the kernel; n > 1: n uneven splits per
  // request (some empty for short contexts) merged by the merge kernel; 0: the planner's split
  // partition (always merged, as three_path does).
  int splits = 1;
  // With splits 2: each (request, KV head)'s two splits as a 2-CTA cluster of wide blocks merging
  // in distributed shared memory (UnifiedParams::cluster_splits), no partial buffers, no merge
  // kernel.
  bool cluster = false;
  // Block lists (UnifiedParams::block_items, as decode segments launch): consecutive items in
  // lists of 1, 2, 3, 4, 1, ... per block, so each block's later items run on metadata it
  // prefetched while the item before streamed.
  bool lists = false;
  // The fused cache write (UnifiedParams::new_k): the kernel gets the cache without this step's
  // rows (NaN-poisoned slots) and the new K / V rows, stores them itself before it reads them,
  // and the caches must then equal the reference's bit for bit.
  bool write = false;
  // UnifiedParams::decode_copies: 0 the default (bulk copies for 16-bit tiled caches), 1
  // cp.async always, 2 bulk copies on fp8 tiled caches too.
  int copies = 0;
  std::vector<ReqShape> reqs;
};

std::ostream& operator<<(std::ostream& os, const DecodeCase& c) { return os << c.name; }

std::vector<ReqShape> decode_mix() {
  return {{1, 4096}, {1, 17}, {1, 1}, {1, 1013}, {1, 0}, {1, 2500}, {1, 64}, {1, 777}};
}

std::vector<DecodeCase> all_cases() {
  std::vector<DecodeCase> out;
  auto add = [&](DecodeCase c, const std::string& name) {
    c.name = name;
    out.push_back(c);
  };
  DecodeCase base;
  base.reqs = decode_mix();
  for (int g : {1, 4, 8, 16, 3}) {
    DecodeCase c = base;
    c.hq = 2 * g;
    for (int splits : {1, 3}) {
      c.splits = splits;
      add(c, "gqa" + std::to_string(g) + "_splits" + std::to_string(splits));
    }
  }
  for (int d : {64, 80, 96, 128, 192, 256}) {
    DecodeCase c = base;
    c.dim = d;
    add(c, "d" + std::to_string(d));
    c.cache = DType::kFP8E4M3;
    c.splits = 2;
    add(c, "fp8_d" + std::to_string(d) + "_splits2");
  }
  for (int bs : {16, 32, 64}) {
    for (KvLayout l : {KvLayout::kNHD, KvLayout::kHND, KvLayout::kTiled}) {
      DecodeCase c = base;
      c.hq = 16;
      c.block_size = bs;
      c.layout = l;
      c.splits = bs == 32 ? 2 : 1;
      add(c, "bs" + std::to_string(bs) + "_" + layout_name(l));
      c.cache = DType::kFP8E4M3;
      add(c, "fp8_bs" + std::to_string(bs) + "_" + layout_name(l));
    }
  }
  {
    DecodeCase c = base;
    c.block_size = 1;
    c.reqs = {{1, 300}, {1, 3}, {1, 0}};
    add(c, "bs1");
    c = base;
    c.hq = 8;
    c.hkv = 1;
    c.reqs = {{1, 70000}, {1, 4096}, {1, 1}};
    add(c, "long_70000");
    c.splits = 0;
    add(c, "long_70000_planner_splits");
    c.splits = 5;
    c.cache = DType::kFP8E4M3;
    add(c, "fp8_long_70000_splits5");
    c = base;
    c.splits = 0;
    add(c, "planner_splits");
    c = base;
    c.window = 64;
    add(c, "window64");
    c.splits = 3;
    add(c, "window64_splits3");
    c.window = 1000;
    c.cache = DType::kFP8E4M3;
    add(c, "fp8_window1000_splits3");
    c = base;
    c.softcap = 30.0f;
    add(c, "softcap");
    c.cache = DType::kFP8E4M3;
    c.splits = 2;
    add(c, "fp8_softcap_splits2");
    c = base;
    c.sinks = true;
    add(c, "sinks");
    c.splits = 4;
    add(c, "sinks_splits4");
    c = base;
    c.dim = 64;
    c.hq = 16;
    c.window = 128;
    c.sinks = true;
    add(c, "gptoss_like_d64_window_sinks");
    c = base;
    c.lse = false;
    add(c, "no_lse");
    c.splits = 2;
    add(c, "no_lse_splits2");
    c = base;
    c.scale = 0.05f;
    add(c, "scale");
    c = base;
    c.cache = DType::kFP8E4M3;
    add(c, "fp8");
    c.sinks = true;
    c.splits = 3;
    add(c, "fp8_sinks_splits3");
    c = base;
    c.dtype = c.cache = DType::kF16;
    add(c, "f16");
    c.cache = DType::kFP8E4M3;
    c.splits = 2;
    add(c, "f16_fp8_splits2");
    // Multi-token decode (MTP / speculative): qlen x group rows, up to the 16-row tile.
    c = base;
    c.threshold = 2;
    c.hq = 16;
    c.reqs = {{2, 900}, {1, 50}, {2, 17}, {2, 0}, {1, 4096}};
    add(c, "mtp_qlen2_gqa8");
    c.splits = 3;
    add(c, "mtp_qlen2_gqa8_splits3");
    c.cache = DType::kFP8E4M3;
    c.window = 100;
    add(c, "fp8_mtp_qlen2_gqa8_window_splits3");
    c = base;
    c.threshold = 4;
    c.reqs = {{4, 300}, {3, 10}, {1, 1}, {4, 0}};
    add(c, "mtp_qlen4_gqa4");
    c.sinks = true;
    c.splits = 2;
    add(c, "mtp_qlen4_gqa4_sinks_splits2");
    // Eight splits, short contexts leaving some empty, sinks.
    c = base;
    c.hq = 8;
    c.hkv = 1;
    c.splits = 8;
    c.sinks = true;
    c.reqs = {{1, 4096}, {1, 5}, {1, 0}, {1, 1500}, {1, 77}};
    add(c, "tp8_like_sinks_splits8");
    // Second splits of 257 / 264 / 265 / 2732 keys: their pair twins give rank 1 a tail of 1 and
    // 8 keys, none at 9, none past a 44-key remainder (launch.h: decode_pair_tail).
    c.splits = 2;
    c.reqs = {{1, 384}, {1, 395}, {1, 396}, {1, 4096}};
    add(c, "tails_sinks_splits2");
    c.window = 300;
    c.softcap = 30.0f;
    add(c, "tails_window_softcap_splits2");
  }
  // The tiled layout's bulk-copy form (decode_bulk_eligible: sm_90, 16-bit caches, head dims 64,
  // 128 and 256, blocks of >= 8 keys) on the features the layout cases above leave out: GQA 1 and
  // 16, head dims 64 and 256, windows, soft-cap, sinks, no LSE, f16, MTP rows, pair tails, eight
  // splits and 70000-key contexts; the cp.async form on the tiled layout, and fp8 caches there
  // (cp.async by default; the opt-in bulk form as bulk_*).
  {
    const std::vector<std::string> tiled = {
        "gqa1_splits3", "gqa16_splits3", "d64", "d256", "window64_splits3", "softcap",
        "sinks_splits4", "gptoss_like_d64_window_sinks", "no_lse_splits2", "f16",
        "mtp_qlen2_gqa8_splits3", "mtp_qlen4_gqa4_sinks_splits2", "tp8_like_sinks_splits8",
        "tails_sinks_splits2", "tails_window_softcap_splits2", "long_70000_planner_splits",
        "fp8_d128_splits2", "fp8_d256_splits2", "fp8_sinks_splits3", "fp8_window1000_splits3",
        "fp8_softcap_splits2", "f16_fp8_splits2", "fp8_mtp_qlen2_gqa8_window_splits3",
        "fp8_long_70000_splits5"};
    for (const DecodeCase& m : std::vector<DecodeCase>(out)) {
      if (std::find(tiled.begin(), tiled.end(), m.name) == tiled.end()) continue;
      DecodeCase c = m;
      c.layout = KvLayout::kTiled;
      add(c, "tiled_" + m.name);
    }
    DecodeCase c = base;
    c.layout = KvLayout::kTiled;
    c.copies = 1;
    c.splits = 2;
    add(c, "tiled_cp_async_splits2");
    // The opt-in fp8 bulk form (decode_copies 2) on every fp8 tiled case so far.
    for (const DecodeCase& m : std::vector<DecodeCase>(out)) {
      if (m.layout != KvLayout::kTiled || m.cache != DType::kFP8E4M3 || m.copies != 0) continue;
      DecodeCase f = m;
      f.copies = 2;
      add(f, "bulk_" + m.name);
    }
  }
  // Pair launches (the wide form) on every case with several splits that they are built for, cut in
  // two: 16-bit caches, head dims <= 128 (GQA 1-16, windows, soft-cap, sinks, no LSE, f16, MTP
  // rows, empty halves of short contexts).
  for (const DecodeCase& m : std::vector<DecodeCase>(out)) {
    if (m.splits < 2 || m.cache != m.dtype || m.dim > 128) continue;
    DecodeCase c = m;
    c.splits = 2;
    c.cluster = true;
    add(c, "cluster_" + m.name);
  }
  // Block lists on every one-item-per-block case without a context over 5000 (the reference's
  // cost): windows, sinks, fp8, every head dim, layout and block size, MTP rows, empty contexts.
  for (const DecodeCase& m : std::vector<DecodeCase>(out)) {
    if (m.cluster || std::any_of(m.reqs.begin(), m.reqs.end(),
                                 [](const ReqShape& r) { return r.context_len > 5000; }))
      continue;
    DecodeCase c = m;
    c.lists = true;
    add(c, "lists_" + m.name);
  }
  // The fused cache write on every case so far without a context over 5000: the keys of a
  // prologue stage written before the prologue's barrier and later ones after its copies, every
  // layout, block size, head dim and fp8, pair halves (rank 1 holds the new key), block lists,
  // MTP rows whose new keys straddle a split boundary ({2, 0} in three splits, {4, 0} in two).
  for (const DecodeCase& m : std::vector<DecodeCase>(out)) {
    if (std::any_of(m.reqs.begin(), m.reqs.end(),
                    [](const ReqShape& r) { return r.context_len > 5000; }))
      continue;
    DecodeCase c = m;
    c.write = true;
    add(c, "write_" + m.name);
  }
  return out;
}

#ifdef TRIPATH_WITH_CUDA

// The key ranges of request i: `splits` uneven pieces of [0, seq) (empty ones when seq is
// short), or the planner's partition when splits == 0.
std::vector<std::pair<int32_t, int32_t>> split_ranges(const StepPlan& plan, int32_t i, int splits) {
  std::vector<std::pair<int32_t, int32_t>> r;
  const int32_t seq = plan.seq_len(i);
  if (splits == 0) {
    const int32_t d = i - plan.decode.begin;
    for (int32_t s = plan.decode_cu_splits[d]; s < plan.decode_cu_splits[d + 1]; ++s)
      r.push_back({plan.split_kv_start[s], plan.split_kv_start[s] + plan.split_kv_len[s]});
    return r;
  }
  // Weights 1, 2, 3, ...: boundaries that are neither even nor multiples of the block size.
  const int64_t total = int64_t(splits) * (splits + 1) / 2;
  int64_t acc = 0;
  for (int s = 0; s < splits; ++s) {
    const int32_t b = static_cast<int32_t>(seq * acc / total);
    acc += s + 1;
    r.push_back({b, static_cast<int32_t>(seq * acc / total)});
  }
  return r;
}

void check_case(const DecodeCase& c) {
  const int group = c.hq / c.hkv;
  if (!kernels::decode_built(c.dim, c.dtype, c.cache)) {
    GTEST_SKIP() << "decode kernel " << c.dim << "/" << dtype_name(c.dtype) << "/"
                 << dtype_name(c.cache) << " not built";
  }
  int max_q = 0;
  for (const ReqShape& r : c.reqs) max_q = std::max(max_q, r.query_len);
  std::string why;
  ASSERT_TRUE(kernels::decode_kernel_supports(c.dim, c.dtype, c.cache, group, max_q, &why)) << why;

  const uint64_t seed = std::hash<std::string>{}(c.name);
  HostStep s = make_step(c.reqs, c.hq, c.hkv, c.dim, c.block_size, c.layout, c.dtype, c.cache,
                         /*ordered=*/true, c.threshold, build_info().gpu_sm_count, seed);
  ASSERT_EQ(s.plan.decode.num_requests(), s.plan.num_requests) << "a decode-only step";
  if (c.cache == DType::kFP8E4M3) {
    // Distinct, non-power-of-two scales (the stored bytes just stand for other values).
    s.cache.k_scale = 0.031f;
    s.cache.v_scale = 0.047f;
  }
  const StepPlan& plan = s.plan;
  const int64_t n = plan.num_tokens, D = c.dim;
  const int64_t rows = n * c.hq;

  // CPU reference; it writes the new tokens into its copy of the cache, which the GPU then reads.
  AttentionParams params;
  params.num_q_heads = c.hq;
  params.num_kv_heads = c.hkv;
  params.head_dim = c.dim;
  params.scale = c.scale;
  params.window_left = c.window;
  params.softcap = c.softcap;
  params.has_sinks = c.sinks;
  std::vector<uint8_t> kc = s.k_cache, vc = s.v_cache;
  std::vector<float> ref_out(static_cast<size_t>(rows * D)), ref_lse(static_cast<size_t>(rows));
  {
    const int64_t elems = s.cache.elements_per_tensor();
    AttentionInputs in;
    in.cache.config = s.cache;
    in.cache.k = TensorView::contiguous(kc.data(), s.cache.dtype, {elems});
    in.cache.v = TensorView::contiguous(vc.data(), s.cache.dtype, {elems});
    in.q = TensorView::contiguous(s.q.data(), s.dtype, {n, c.hq, D});
    in.k = TensorView::contiguous(s.k.data(), s.dtype, {n, c.hkv, D});
    in.v = TensorView::contiguous(s.v.data(), s.dtype, {n, c.hkv, D});
    in.out = TensorView::contiguous(ref_out.data(), DType::kF32, {n, c.hq, D});
    in.lse = TensorView::contiguous(ref_lse.data(), DType::kF32, {n, c.hq});
    if (c.sinks) in.sinks = TensorView::contiguous(s.sinks.data(), DType::kF32, {c.hq});
    create_attention_backend("reference")->run(plan, params, in);
  }

  // Work items: one per (request, KV head, split), every row of the request in it.
  std::vector<kernels::UnifiedWorkItem> items;
  std::vector<int32_t> token_parts(static_cast<size_t>(n), 0);
  int32_t max_parts = 1;
  bool direct = c.splits == 1;
  for (int32_t i = 0; i < plan.num_requests; ++i) {
    const auto ranges = split_ranges(plan, i, c.splits);
    max_parts = std::max<int32_t>(max_parts, static_cast<int32_t>(ranges.size()));
    for (int32_t t = 0; t < plan.query_lens[i]; ++t)
      token_parts[plan.cu_seqlens_q[i] + t] = static_cast<int32_t>(ranges.size());
    for (int g = 0; g < c.hkv; ++g) {
      for (size_t r = 0; r < ranges.size(); ++r) {
        items.push_back({i, g, g * group, 0, ranges[r].first, ranges[r].second,
                         direct ? -1 : static_cast<int32_t>(r), 0});
      }
    }
  }

  DeviceMem d_k, d_v, d_q, d_out, d_lse, d_sinks, d_table, d_cu, d_ctx, d_items, d_part_out,
      d_part_lse, d_parts, d_new_k, d_new_v;
  // Without the fused write the GPU reads the reference's written cache; with it, the cache as
  // it was before the step.
  d_k.upload(c.write ? s.k_cache : kc);
  d_v.upload(c.write ? s.v_cache : vc);
  if (c.write) {
    ASSERT_NE(s.k_cache, kc) << "the step writes no new rows";
    d_new_k.upload(s.k);
    d_new_v.upload(s.v);
  }
  d_q.upload(s.q);
  d_sinks.upload(s.sinks);
  d_table.upload(plan.block_table);
  d_cu.upload(plan.cu_seqlens_q);
  d_ctx.upload(plan.context_lens);
  d_items.upload(items);
  d_parts.upload(token_parts);
  std::vector<int32_t> block_items;
  DeviceMem d_block_items;
  if (c.lists) {
    const int32_t count = static_cast<int32_t>(items.size());
    for (int32_t i = 0, b = 0; i < count; i += 1 + b % 4, ++b) block_items.push_back(i);
    block_items.push_back(count);
    d_block_items.upload(block_items);
  }
  d_out.upload(std::vector<uint16_t>(static_cast<size_t>(rows * D), 0xFFFF));  // NaN
  d_lse.upload(std::vector<float>(static_cast<size_t>(rows), NAN));
  d_part_out.upload(std::vector<float>(static_cast<size_t>(max_parts * rows * D), NAN));
  d_part_lse.upload(std::vector<float>(static_cast<size_t>(max_parts * rows), NAN));

  const bool fp8 = c.cache == DType::kFP8E4M3;
  kernels::UnifiedParams p{};
  p.q = d_q.get();
  p.out = d_out.get();
  p.lse = c.lse ? static_cast<float*>(d_lse.get()) : nullptr;
  p.k_cache = d_k.get();
  p.v_cache = d_v.get();
  p.partial_out = static_cast<float*>(d_part_out.get());
  p.partial_lse = static_cast<float*>(d_part_lse.get());
  p.sinks = c.sinks ? static_cast<const float*>(d_sinks.get()) : nullptr;
  p.block_table = static_cast<const int32_t*>(d_table.get());
  p.cu_seqlens_q = static_cast<const int32_t*>(d_cu.get());
  p.context_lens = static_cast<const int32_t*>(d_ctx.get());
  p.items = static_cast<const kernels::UnifiedWorkItem*>(d_items.get());
  p.num_items = static_cast<int32_t>(items.size());
  p.num_tokens = static_cast<int32_t>(n);
  p.num_q_heads = c.hq;
  p.num_kv_heads = c.hkv;
  p.rows_per_token = group;
  p.max_blocks_per_request = plan.max_blocks_per_request;
  p.block_size = c.block_size;
  p.log2_block_size = log2_of(c.block_size);
  p.layout = static_cast<int32_t>(c.layout);
  p.decode_copies = c.copies;
  p.window_left = c.window;
  p.score_scale = params.effective_scale() * (fp8 ? s.cache.k_scale : 1.0f);
  p.scale_log2 = p.score_scale * 1.4426950408889634f;
  p.softcap = c.softcap;
  p.v_scale = fp8 ? s.cache.v_scale : 1.0f;
  if (c.write) {
    p.new_k = d_new_k.get();
    p.new_v = d_new_v.get();
    p.k_scale = fp8 ? s.cache.k_scale : 1.0f;
  }
  if (c.lists) {
    p.block_items = static_cast<const int32_t*>(d_block_items.get());
    p.num_blocks = static_cast<int32_t>(block_items.size()) - 1;
  }
  if (c.cluster) {
    // Items are (request, KV head)-major, split-minor: each pair of splits is one cluster.
    p.cluster_splits = 2;
    direct = true;  // the kernel writes the final output
  }

  kernels::MergeParams m{};
  m.part_out = p.partial_out;
  m.part_lse = p.partial_lse;
  m.out = d_out.get();
  m.lse = p.lse;
  m.sinks = p.sinks;
  m.token_parts = static_cast<const int32_t*>(d_parts.get());
  m.num_parts = max_parts;
  m.heads = c.hq;
  m.dim = c.dim;
  m.part_stride = rows;
  m.row_begin = 0;
  m.row_end = rows;

  auto run = [&]() {
    // Shared memory full of NaN first: rows a launch's copies leave out must never be read as
    // values (the bulk-copy form zeroes the V rows it does not copy).
    TRIPATH_TEST_CUDA(poison_shared_memory(nullptr));
    ASSERT_EQ(kernels::launch_paged_decode(c.dim, c.dtype, c.cache, p, nullptr), cudaSuccess);
    if (!direct) {
      ASSERT_EQ(kernels::launch_merge_states(m, c.dtype, nullptr), cudaSuccess);
    }
    TRIPATH_TEST_CUDA(cudaDeviceSynchronize());
  };
  run();
  if (::testing::Test::HasFatalFailure()) return;

  if (c.write) {
    EXPECT_EQ(d_k.download<uint8_t>(kc.size()), kc) << "K cache differs after the fused write";
    EXPECT_EQ(d_v.download<uint8_t>(vc.size()), vc) << "V cache differs after the fused write";
  }
  const std::vector<uint16_t> first = d_out.download<uint16_t>(static_cast<size_t>(rows * D));
  const std::vector<float> got = widen(first, c.dtype);
  const double tol = c.dtype == DType::kBF16 ? 1e-2 : 4e-3;
  EXPECT_LT(rel_l2(got, ref_out), tol) << "relative L2 error of the output (inf: NaN in it)";
  if (c.lse) {
    const std::vector<float> got_lse = d_lse.download<float>(static_cast<size_t>(rows));
    int bad = 0;
    for (size_t i = 0; i < got_lse.size(); ++i) {
      const bool same_inf = std::isinf(got_lse[i]) && got_lse[i] == ref_lse[i];
      if (!same_inf && !(std::fabs(got_lse[i] - ref_lse[i]) <= 2e-2f)) {
        if (bad++ < 3) ADD_FAILURE() << "lse[" << i << "] " << got_lse[i] << " vs " << ref_lse[i];
      }
    }
    EXPECT_EQ(bad, 0);
  }
  if (c.cluster) {  // the partial buffers were not touched
    const std::vector<float> part_lse =
        d_part_lse.download<float>(static_cast<size_t>(max_parts * rows));
    EXPECT_TRUE(std::all_of(part_lse.begin(), part_lse.end(), [](float x) {
      return std::isnan(x);
    })) << "a cluster-merged launch wrote partial LSEs";
  }
  if (!direct) {  // every partial slot a token owns was written (an empty split: LSE -inf)
    const std::vector<float> part_lse =
        d_part_lse.download<float>(static_cast<size_t>(max_parts * rows));
    int unwritten = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int32_t k = 0; k < token_parts[r / c.hq]; ++k)
        unwritten += std::isnan(part_lse[k * rows + r]) ? 1 : 0;
    EXPECT_EQ(unwritten, 0) << "partial LSE slots left NaN";
  }

  // Repeated runs are bitwise identical (no races, no order-dependent reductions).
  d_out.upload(std::vector<uint16_t>(static_cast<size_t>(rows * D), 0xFFFF));
  run();
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_EQ(d_out.download<uint16_t>(static_cast<size_t>(rows * D)), first) << "second run differs";
}

void check_supports() {
  std::string why;
  EXPECT_FALSE(kernels::decode_kernel_supports(128, DType::kBF16, DType::kBF16, 16, 2, &why));
  EXPECT_NE(why.find("16-row"), std::string::npos) << why;
  EXPECT_FALSE(kernels::decode_kernel_supports(100, DType::kBF16, DType::kBF16, 4, 1, &why));
  EXPECT_NE(why.find("built for head dim 100"), std::string::npos) << why;
  if (kernels::decode_built(128, DType::kBF16, DType::kBF16)) {
    EXPECT_TRUE(kernels::decode_kernel_supports(128, DType::kBF16, DType::kBF16, 16, 1, &why));
    EXPECT_TRUE(kernels::decode_kernel_supports(128, DType::kBF16, DType::kBF16, 8, 2, &why));
    // Pair launches: exactly 2 splits, whole pairs of items, refused before any launch.
    kernels::UnifiedParams p{};
    p.num_items = 8;
    for (int bad : {1, 3, 4, 8, -2}) {
      p.cluster_splits = bad;
      EXPECT_EQ(kernels::launch_paged_decode(128, DType::kBF16, DType::kBF16, p, nullptr),
                cudaErrorInvalidValue)
          << "cluster_splits " << bad;
    }
    p.cluster_splits = 2;
    p.num_items = 9;  // not whole pairs
    EXPECT_EQ(kernels::launch_paged_decode(128, DType::kBF16, DType::kBF16, p, nullptr),
              cudaErrorInvalidValue);
    EXPECT_TRUE(kernels::decode_cluster_built(128, DType::kBF16, DType::kBF16));
  }
  // The wide configuration is not built for fp8 caches: a cluster launch there is refused.
  if (kernels::decode_built(128, DType::kBF16, DType::kFP8E4M3)) {
    EXPECT_FALSE(kernels::decode_cluster_built(128, DType::kBF16, DType::kFP8E4M3));
    kernels::UnifiedParams p{};
    p.num_items = 2;
    p.cluster_splits = 2;
    EXPECT_EQ(kernels::launch_paged_decode(128, DType::kBF16, DType::kFP8E4M3, p, nullptr),
              cudaErrorInvalidValue);
  }
}

// One published decode shape (shared/BENCH.md) on the device: a random cache (finite, never
// zero) on a shuffled pool of exactly the blocks needed, q, lengths; `params()` fills every
// UnifiedParams field but the items and the partial buffers.
struct BenchShape {
  const char* name;
  int requests, context, hq, hkv;
  DType cache;
};
struct BenchInputs {
  static constexpr int D = 128, bs = 16;
  int group, seq, blocks_per;
  double kv_bytes;
  DeviceMem k, v, q, out, lse, table, cu, ctx;

  BenchInputs(const BenchShape& sh, std::mt19937_64& rng)
      : group(sh.hq / sh.hkv), seq(sh.context + 1), blocks_per((seq + bs - 1) / bs) {
    const int64_t pool = int64_t(blocks_per) * sh.requests;
    std::vector<int32_t> ids(static_cast<size_t>(pool));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    const size_t esz = sh.cache == DType::kFP8E4M3 ? 1 : 2;
    const size_t cache_bytes = size_t(pool) * bs * sh.hkv * D * esz;
    // Random finite values: bf16 bits in [0.25, 1) x sign, or fp8 bytes with exponent < 15.
    std::vector<uint8_t> bytes(cache_bytes);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < cache_bytes; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      bytes[i] = esz == 2 && (i % 2 == 1) ? static_cast<uint8_t>(0x3E | (x & 0x80))
                                          : static_cast<uint8_t>(x & (esz == 1 ? 0xB7 : 0xFF));
    }
    std::vector<uint16_t> qh(size_t(sh.requests) * sh.hq * D);
    for (auto& e : qh) e = float_to_bf16(std::normal_distribution<float>()(rng));
    std::vector<int32_t> cuh(sh.requests + 1), ctxh(sh.requests, sh.context);
    for (int r = 0; r <= sh.requests; ++r) cuh[r] = r;
    k.upload(bytes);
    v.upload(bytes);
    bytes = {};
    q.upload(qh);
    table.upload(ids);
    cu.upload(cuh);
    ctx.upload(ctxh);
    const int64_t rows = int64_t(sh.requests) * sh.hq;
    out.resize(rows * D * 2);
    lse.resize(rows * 4);
    kv_bytes = double(sh.requests) * seq * sh.hkv * D * esz * 2;
  }
  kernels::UnifiedParams params(const BenchShape& sh) const {
    kernels::UnifiedParams p{};
    p.q = q.get();
    p.out = out.get();
    p.lse = static_cast<float*>(lse.get());
    p.k_cache = k.get();
    p.v_cache = v.get();
    p.block_table = static_cast<const int32_t*>(table.get());
    p.cu_seqlens_q = static_cast<const int32_t*>(cu.get());
    p.context_lens = static_cast<const int32_t*>(ctx.get());
    p.num_tokens = sh.requests;
    p.num_q_heads = sh.hq;
    p.num_kv_heads = sh.hkv;
    p.rows_per_token = group;
    p.max_blocks_per_request = blocks_per;
    p.block_size = bs;
    p.log2_block_size = log2_of(bs);
    p.layout = static_cast<int32_t>(KvLayout::kNHD);
    p.window_left = -1;
    p.score_scale = 1.0f / std::sqrt(float(D));
    p.scale_log2 = p.score_scale * 1.4426950408889634f;
    p.v_scale = 1.0f;
    return p;
  }
};

// The published decode shapes (shared/BENCH.md, docs/perf-notes.md): the decode kernel against
// the unified kRows16 tile on the same items, for split targets of 1..8 waves of SMs. Medians of
// 20 launches after 3 warm-ups; TB/s counts the K/V bytes read.
void bench_published_shapes() {
  const BenchShape shapes[] = {{"decode-4k", 64, 4096, 64, 4, DType::kBF16},
                               {"decode-4k fp8", 64, 4096, 64, 4, DType::kFP8E4M3},
                               {"decode-4k tp8", 64, 4096, 8, 1, DType::kBF16},
                               {"decode-long", 8, 131072, 64, 4, DType::kBF16},
                               {"decode-long fp8", 8, 131072, 64, 4, DType::kFP8E4M3}};
  constexpr int D = BenchInputs::D, bs = BenchInputs::bs;
  const int sms = build_info().gpu_sm_count;
  if (!kernels::decode_built(D, DType::kBF16, DType::kBF16)) GTEST_SKIP() << "128/bf16 not built";
  std::mt19937_64 rng(1);
  for (const BenchShape& sh : shapes) {
    if (!kernels::decode_built(D, DType::kBF16, sh.cache)) continue;
    BenchInputs in(sh, rng);
    const int group = in.group, seq = in.seq;
    const int64_t rows = int64_t(sh.requests) * sh.hq;
    const double kv_bytes = in.kv_bytes;
    DeviceMem d_items, d_part_out, d_part_lse, d_parts;
    for (int waves : {1, 2, 4, 8}) {
      const int32_t split =
          choose_split_tokens(std::vector<int32_t>(sh.requests, seq), sms, sh.hkv, 256, waves, bs);
      const int parts = (seq + split - 1) / split;
      std::vector<kernels::UnifiedWorkItem> items;
      for (int r = 0; r < sh.requests; ++r)
        for (int g = 0; g < sh.hkv; ++g)
          for (int k = 0; k < parts; ++k)
            items.push_back({r, g, g * group, 0, k * split, std::min(seq, (k + 1) * split),
                             parts == 1 ? -1 : k, 0});
      // Longest ranges first, as a backend would order them.
      std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
        return a.kv_end - a.kv_begin > b.kv_end - b.kv_begin;
      });
      d_items.upload(items);
      d_part_out.resize(size_t(parts) * rows * D * 4);
      d_part_lse.resize(size_t(parts) * rows * 4);
      d_parts.upload(std::vector<int32_t>(sh.requests, parts));
      kernels::UnifiedParams p = in.params(sh);
      p.partial_out = static_cast<float*>(d_part_out.get());
      p.partial_lse = static_cast<float*>(d_part_lse.get());
      p.items = static_cast<const kernels::UnifiedWorkItem*>(d_items.get());
      p.num_items = static_cast<int32_t>(items.size());
      kernels::MergeParams m{};
      m.part_out = p.partial_out;
      m.part_lse = p.partial_lse;
      m.out = p.out;
      m.lse = p.lse;
      m.token_parts = static_cast<const int32_t*>(d_parts.get());
      m.num_parts = parts;
      m.heads = sh.hq;
      m.dim = D;
      m.part_stride = rows;
      m.row_end = rows;
      auto time_us = [&](bool decode, bool with_merge) {
        return median_launch_us([&] {
          if (decode) {
            EXPECT_EQ(kernels::launch_paged_decode(D, DType::kBF16, sh.cache, p, nullptr),
                      cudaSuccess);
          } else {
            EXPECT_EQ(
                kernels::launch_unified(D, DType::kBF16, sh.cache, p, kernels::kRows16, nullptr),
                cudaSuccess);
          }
          if (with_merge && parts > 1) kernels::launch_merge_states(m, DType::kBF16, nullptr);
        });
      };
      const double dec = time_us(true, false), dec_m = time_us(true, true);
      const double uni = time_us(false, false), uni_m = time_us(false, true);
      std::ostringstream os;
      os.precision(4);
      os << sh.name << " waves=" << waves << " split=" << split << " parts=" << parts
         << " items=" << items.size() << ": decode " << dec << " us (" << kv_bytes / dec / 1e6
         << " TB/s), +merge " << dec_m << " us | unified kRows16 " << uni << " us ("
         << kv_bytes / uni / 1e6 << " TB/s), +merge " << uni_m << " us";
      std::printf("%s\n", os.str().c_str());
      TRIPATH_TEST_CUDA(cudaGetLastError());
    }
  }
}

// Where the tp8 shard's pair launch spends its time: each row set cut as three_path's
// add_decode_pairs cuts it (decode_pair_cut), the halves a 2-CTA cluster, p.trace set
// (launch.h's events). Launches run hot (back to back) and cold (each after a 256 MB memset, so
// the L2 holds none of the items, tables or cache). Printed per cold launch: each event's time
// after the launch's first block entry, over the blocks (min / median / max, us), and the
// blocks' stream rates.
void trace_tp8_pairs() {
  const BenchShape sh{"decode-4k tp8", 64, 4096, 8, 1, DType::kBF16};
  constexpr int D = BenchInputs::D;
  if (!kernels::decode_cluster_built(D, DType::kBF16, DType::kBF16) ||
      build_info().gpu_compute_capability < 90)
    GTEST_SKIP() << "the pair form needs sm_90 and 128/bf16";
  std::mt19937_64 rng(1);
  BenchInputs in(sh, rng);
  const int mid = kernels::decode_pair_cut(in.seq);
  std::vector<kernels::UnifiedWorkItem> items;
  for (int r = 0; r < sh.requests; ++r) {
    items.push_back({r, 0, 0, 0, 0, mid, 0, 0});
    items.push_back({r, 0, 0, 0, mid, in.seq, 1, 0});
  }
  const int blocks = static_cast<int>(items.size());
  DeviceMem d_items, d_trace, flush(size_t(256) << 20);
  d_items.upload(items);
  d_trace.resize(size_t(blocks) * kernels::kDecodeTraceSlots * 8);
  kernels::UnifiedParams p = in.params(sh);
  p.items = static_cast<const kernels::UnifiedWorkItem*>(d_items.get());
  p.num_items = blocks;
  p.cluster_splits = 2;
  auto launch = [&] {
    EXPECT_EQ(kernels::launch_paged_decode(D, DType::kBF16, DType::kBF16, p, nullptr), cudaSuccess);
  };
  const double hot = median_launch_us(launch);
  int flushes = 0;
  const double cold = median_launch_us(launch, 0, 20, [&] {
    cudaMemsetAsync(flush.get(), flushes++, size_t(256) << 20);
  });
  std::printf("tp8 pairs: %d blocks, hot %.2f us (%.3f TB/s), cold %.2f us (%.3f TB/s)\n", blocks,
              hot, in.kv_bytes / hot / 1e6, cold, in.kv_bytes / cold / 1e6);
  const char* names[] = {"entry", "issued", "landed", "loop end", "pushed", "synced", "end"};
  p.trace = static_cast<unsigned long long*>(d_trace.get());
  for (int rep = 0; rep < 6; ++rep) {
    // Launches 0..2 cold, 3..5 hot (right after the previous one).
    if (rep < 3) cudaMemsetAsync(flush.get(), rep, size_t(256) << 20);
    launch();
    TRIPATH_TEST_CUDA(cudaDeviceSynchronize());
    const auto t =
        d_trace.download<unsigned long long>(size_t(blocks) * kernels::kDecodeTraceSlots);
    auto at = [&](int blk, int e) { return t[size_t(blk) * kernels::kDecodeTraceSlots + e]; };
    unsigned long long t0 = ~0ull;
    for (int blk = 0; blk < blocks; ++blk) t0 = std::min(t0, at(blk, 0));
    std::ostringstream os;
    os.precision(3);
    os << std::fixed << "trace " << rep << ":";
    auto spread = [&](const char* what, const std::function<double(int)>& f) {
      std::vector<double> v;
      for (int blk = 0; blk < blocks; ++blk) v.push_back(f(blk));
      std::sort(v.begin(), v.end());
      os << " " << what << " " << v.front() << "/" << v[v.size() / 2] << "/" << v.back() << ";";
    };
    for (int e = 0; e < 7; ++e)
      spread(names[e], [&](int blk) { return (at(blk, e) - t0) / 1000.0; });
    spread("item", [&](int blk) { return (at(blk, 9) - t0) / 1000.0; });
    spread("lengths", [&](int blk) { return (at(blk, 10) - t0) / 1000.0; });
    spread("prologue", [&](int blk) { return (at(blk, 11) - t0) / 1000.0; });
    spread("ramp", [&](int blk) { return (at(blk, 2) - at(blk, 0)) / 1000.0; });
    spread("stream", [&](int blk) { return (at(blk, 3) - at(blk, 2)) / 1000.0; });
    spread("GB/s", [&](int blk) {
      const auto& it = items[blk];
      const double bytes = double(it.kv_end - it.kv_begin) * D * 2 * 2;
      return bytes / double(std::max<unsigned long long>(1, at(blk, 3) - at(blk, 2)));
    });
    spread("tail", [&](int blk) { return (at(blk, 6) - at(blk, 3)) / 1000.0; });
    std::vector<unsigned long long> sms;
    for (int blk = 0; blk < blocks; ++blk) sms.push_back(at(blk, 7));
    std::sort(sms.begin(), sms.end());
    os << " SMs " << (std::unique(sms.begin(), sms.end()) - sms.begin()) << ", stages "
       << at(0, 8) << "/" << at(1, 8);
    std::printf("%s\n", os.str().c_str());
    // Per block: SM, rank, entry, landed, loop end, end (us after the first entry).
    for (int blk = 0; blk < blocks; ++blk)
      std::printf("block %d %d sm %llu rank %d: %.3f %.3f %.3f %.3f\n", rep, blk, at(blk, 7),
                  blk % 2, (at(blk, 0) - t0) / 1000.0, (at(blk, 2) - t0) / 1000.0,
                  (at(blk, 3) - t0) / 1000.0, (at(blk, 6) - t0) / 1000.0);
  }
  TRIPATH_TEST_CUDA(cudaGetLastError());
}

#endif  // TRIPATH_WITH_CUDA

class GpuDecodeKernelTest : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(GpuDecodeKernelTest, MatchesReference) {
  TRIPATH_REQUIRE_GPU();
#ifdef TRIPATH_WITH_CUDA
  check_case(GetParam());
#endif
}

INSTANTIATE_TEST_SUITE_P(AllCases, GpuDecodeKernelTest, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return info.param.name; });

// launch_paged_decode's contract: the 16-row limit, and a clear reason for what is not built.
TEST(GpuDecodeKernel, SupportsCheck) {
  TRIPATH_REQUIRE_GPU();
#ifdef TRIPATH_WITH_CUDA
  check_supports();
#endif
}

// Where pair launches cut a row set, and which remainder rank 1 keeps as its tail (host math,
// no GPU needed): stage counts differ by at most one, rank 1 holding the larger.
TEST(GpuDecodeKernel, PairCutAndTail) {
#ifdef TRIPATH_WITH_CUDA
  struct Case {
    int len, cut, tail;
  };
  const Case cases[] = {{4097, 2048, 1}, {4096, 2048, 0}, {4104, 2048, 8}, {4105, 2048, 0},
                        {4200, 2048, 0}, {4300, 2176, 0}, {4230, 2048, 6}, {258, 128, 2},
                        {130, 128, 0},   {200, 128, 0},   {100, 0, 0},     {0, 0, 0}};
  for (const Case& c : cases) {
    const int cut = kernels::decode_pair_cut(c.len);
    EXPECT_EQ(cut, c.cut) << "len " << c.len;
    EXPECT_EQ(kernels::decode_pair_tail(cut, c.len), c.tail) << "len " << c.len;
    constexpr int kStage = kernels::kDecodePairStageKeys;
    const int stages0 = (cut + kStage - 1) / kStage;
    const int rest = c.len - cut - kernels::decode_pair_tail(cut, c.len);
    const int stages1 = (rest + kStage - 1) / kStage;
    EXPECT_TRUE(stages1 == stages0 || stages1 == stages0 + 1) << "len " << c.len;
  }
#endif
}

// Opt-in timing (prints one line per shape and split target).
TEST(GpuDecodeBench, PublishedShapes) {
  TRIPATH_REQUIRE_GPU();
  if (!timing_enabled("TRIPATH_DECODE_BENCH"))
    GTEST_SKIP() << "timing runs only with TRIPATH_DECODE_BENCH=1";
#ifdef TRIPATH_WITH_CUDA
  bench_published_shapes();
#endif
}

// Opt-in phase trace of the tp8 pair launch (prints the phases' spread over the blocks).
TEST(GpuDecodeBench, PairTrace) {
  TRIPATH_REQUIRE_GPU();
  if (!timing_enabled("TRIPATH_DECODE_BENCH"))
    GTEST_SKIP() << "timing runs only with TRIPATH_DECODE_BENCH=1";
#ifdef TRIPATH_WITH_CUDA
  trace_tp8_pairs();
#endif
}

}  // namespace
}  // namespace tripath::gputest
