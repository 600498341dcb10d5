// The MLA CUDA backends (mla, mla_baseline) against the CPU reference on fresh random steps:
// outputs and LSEs NaN-poisoned before the run, the latent cache NaN-poisoned outside written
// slots and compared bit for bit after the GPU write, block tables shuffled over a pool 2.5x the
// need. Covers 8..128 heads (and an odd 24), block sizes 16/64, contexts up to 8K and one 32K,
// decode_threshold 1, 2 and 4 (multi-token decode), decode-only, prefill-only and mixed steps,
// extend contexts cut into several chunks, fp8 latent caches, one-split (direct) and split
// decode. Also: the public cache write bit for bit with the CPU writer, absorbed == non-absorbed
// on the GPU through W_UK / W_UV, repeated runs bitwise identical, CUDA graph capture of a
// decode step, and the errors of unprepared plans and wrong dtypes.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>

#include "gpu_test_util.h"

#ifdef TRIPATH_WITH_CUDA
#include "common/wgmma_rate_probe.h"
#include "mla/decode_seesaw_probe.h"
#include "mla/mla.h"
#endif

namespace tripath::gputest {
namespace {

constexpr int kCols = kMlaNopeDim + kMlaVDim;  // kv_b_proj columns per head
constexpr float kFp8Scale = 0.0173f;           // not a power of two: the division must match

struct MlaGpuCase {
  std::string name;
  std::string backend;
  int heads = 16;
  int block_size = 16;
  int threshold = 1;
  DType cache = DType::kBF16;
  int64_t chunk_budget = 32768;
  int work_units = 0;  // 0: the GPU's SM count
  bool lse = true;
  int wgmma = 0;     // mla's TRIPATH_MLA_WGMMA: 1 (the default) the Hopper decode kernel for
                     // 64-row steps, 2 the same with TMA loads, 3 wgmma (TMA) on every step (rows
                     // padded to 64), 4 the seesaw kernel (TMA) for 64-row steps, 0 the mma.sync
                     // one
  bool pdl = false;  // TRIPATH_PDL=1: decode kernel and merge as programmatic dependents
  std::vector<ReqShape> reqs;
};

std::ostream& operator<<(std::ostream& os, const MlaGpuCase& c) { return os << c.name; }

uint16_t bf16_bits(float x) { return float_to_bf16(x); }

// One MLA step with host tensors in the ordered layout; the cache holds the contexts.
struct MlaHostStep {
  StepInput input;
  std::vector<int32_t> block_table;
  StepPlan plan;
  MlaCacheConfig cache;
  std::vector<uint8_t> cache_bytes;  // NaN-poisoned except the context rows
  int heads = 0;
  std::vector<uint16_t> latent;  // [num_tokens, 576] bf16 (new rows)
  std::vector<uint16_t> q_abs;   // [decode tokens, H, 576] bf16
  std::vector<uint16_t> q;       // [extend + prefill tokens, H, 192] bf16
  std::vector<uint16_t> w;       // [512, H * 256] bf16
  int64_t nd() const { return plan.decode.num_tokens(); }
  int64_t np() const { return plan.num_tokens - plan.decode.num_tokens(); }
};

MlaHostStep make_mla_step(const std::vector<ReqShape>& reqs, int heads, int block_size,
                          int threshold, DType cache_dtype, int64_t chunk_budget, int work_units,
                          uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  MlaHostStep s;
  s.heads = heads;
  // The latent is one KV head shared by all query heads.
  plan_shuffled_step(reqs, block_size, threshold, chunk_budget,
                     work_units > 0 ? work_units : std::max(1, build_info().gpu_sm_count), 1,
                     /*ordered=*/true, rng, s.input, s.block_table, s.plan);
  const int64_t pool = s.input.num_cache_blocks;

  s.cache.num_blocks = pool;
  s.cache.block_size = block_size;
  s.cache.dtype = cache_dtype;
  if (cache_dtype == DType::kFP8E4M3) s.cache.scale = kFp8Scale;
  s.cache_bytes.assign(static_cast<size_t>(s.cache.elements()) * dtype_size(cache_dtype),
                       cache_dtype == DType::kFP8E4M3 ? 0x7F : 0xFF);  // NaN patterns

  // Context rows through the reference writer (f32 source), as earlier steps would have.
  int64_t ctx_tokens = 0;
  for (int32_t i = 0; i < s.plan.num_requests; ++i) ctx_tokens += s.plan.context_lens[i];
  std::vector<float> ctx_rows(static_cast<size_t>(ctx_tokens) * kMlaEntryDim);
  for (float& x : ctx_rows) x = normal(rng);
  std::vector<int64_t> slots;
  for (int32_t i = 0; i < s.plan.num_requests; ++i)
    for (int32_t pos = 0; pos < s.plan.context_lens[i]; ++pos)
      slots.push_back(int64_t(s.plan.block_row(i)[pos / block_size]) * block_size +
                      pos % block_size);
  MlaCacheView view{
      s.cache, TensorView::contiguous(s.cache_bytes.data(), cache_dtype, {s.cache.elements()})};
  reference::write_mla_cache(
      view, TensorView::contiguous(ctx_rows.data(), DType::kF32, {ctx_tokens, kMlaEntryDim}),
      slots.data(), ctx_tokens);

  s.latent.resize(static_cast<size_t>(s.plan.num_tokens) * kMlaEntryDim);
  for (auto& x : s.latent) x = bf16_bits(normal(rng));
  // The weights before the queries: two plans of one step (another decode_threshold) draw the
  // same weights.
  s.w.resize(static_cast<size_t>(kMlaLatentDim) * heads * kCols);
  for (auto& x : s.w) x = bf16_bits(0.05f * normal(rng));
  s.q_abs.resize(static_cast<size_t>(s.nd()) * heads * kMlaEntryDim);
  for (auto& x : s.q_abs) x = bf16_bits(normal(rng));
  s.q.resize(static_cast<size_t>(s.np()) * heads * kMlaQkDim);
  for (auto& x : s.q) x = bf16_bits(normal(rng));
  return s;
}

// Pointers of one run's tensors; null ones are not given.
struct MlaBuffers {
  void* cache = nullptr;
  void* latent = nullptr;
  void* q_abs = nullptr;
  void* out_abs = nullptr;
  void* lse_abs = nullptr;
  void* q = nullptr;
  void* w = nullptr;
  void* out = nullptr;
  void* lse = nullptr;
};

MlaInputs make_inputs(const MlaHostStep& s, Device dev, const MlaBuffers& b, DType out_dtype) {
  const int64_t H = s.heads, nd = s.nd(), np = s.np();
  MlaInputs in;
  in.cache.config = s.cache;
  in.cache.latent = TensorView::contiguous(b.cache, s.cache.dtype, {s.cache.elements()}, dev);
  if (b.latent != nullptr)
    in.latent =
        TensorView::contiguous(b.latent, DType::kBF16, {s.plan.num_tokens, kMlaEntryDim}, dev);
  if (nd > 0) {
    in.q_absorbed = TensorView::contiguous(b.q_abs, DType::kBF16, {nd, H, kMlaEntryDim}, dev);
    in.out_absorbed = TensorView::contiguous(b.out_abs, out_dtype, {nd, H, kMlaLatentDim}, dev);
    if (b.lse_abs != nullptr)
      in.lse_absorbed = TensorView::contiguous(b.lse_abs, DType::kF32, {nd, H}, dev);
  }
  if (np > 0) {
    in.q = TensorView::contiguous(b.q, DType::kBF16, {np, H, kMlaQkDim}, dev);
    in.kv_b_proj = TensorView::contiguous(b.w, DType::kBF16, {kMlaLatentDim, H * kCols}, dev);
    in.out = TensorView::contiguous(b.out, out_dtype, {np, H, kMlaVDim}, dev);
    if (b.lse != nullptr) in.lse = TensorView::contiguous(b.lse, DType::kF32, {np, H}, dev);
  }
  return in;
}

MlaParams mla_params(int heads) {
  MlaParams p;
  p.num_heads = heads;
  return p;
}

// The CPU reference's results for a step (it writes its own copy of the cache first).
struct MlaReference {
  std::vector<uint8_t> cache;
  std::vector<float> out_abs, lse_abs, out, lse;
};

MlaReference run_reference(const MlaHostStep& s) {
  MlaReference r;
  r.cache = s.cache_bytes;
  const size_t H = s.heads;
  r.out_abs.assign(s.nd() * H * kMlaLatentDim, NAN);
  r.lse_abs.assign(s.nd() * H, NAN);
  r.out.assign(s.np() * H * kMlaVDim, NAN);
  r.lse.assign(s.np() * H, NAN);
  MlaBuffers b;
  b.cache = r.cache.data();
  b.latent = const_cast<uint16_t*>(s.latent.data());
  b.q_abs = const_cast<uint16_t*>(s.q_abs.data());
  b.out_abs = r.out_abs.data();
  b.lse_abs = r.lse_abs.data();
  b.q = const_cast<uint16_t*>(s.q.data());
  b.w = const_cast<uint16_t*>(s.w.data());
  b.out = r.out.data();
  b.lse = r.lse.data();
  create_mla_backend("reference")
      ->run(s.plan, mla_params(s.heads), make_inputs(s, Device::kCPU, b, DType::kF32));
  return r;
}

void expect_lse_close(const std::vector<float>& got, const std::vector<float>& want,
                      const char* what) {
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool same_inf = std::isinf(want[i]) && got[i] == want[i];
    if (!same_inf && !(std::fabs(got[i] - want[i]) <= 2e-2f)) {
      if (bad++ < 3) ADD_FAILURE() << what << "[" << i << "] " << got[i] << " vs " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

#ifdef TRIPATH_WITH_CUDA
// Device copies of a step's tensors, outputs poisoned.
struct MlaDevice {
  DeviceMem cache, latent, q_abs, out_abs, lse_abs, q, w, out, lse;
  MlaBuffers buffers(bool with_latent, bool with_lse) const {
    MlaBuffers b;
    b.cache = cache.get();
    b.latent = with_latent ? latent.get() : nullptr;
    b.q_abs = q_abs.get();
    b.out_abs = out_abs.get();
    b.lse_abs = with_lse ? lse_abs.get() : nullptr;
    b.q = q.get();
    b.w = w.get();
    b.out = out.get();
    b.lse = with_lse ? lse.get() : nullptr;
    return b;
  }
};

void upload(const MlaHostStep& s, MlaDevice& d) {
  const size_t H = s.heads;
  d.cache.upload(s.cache_bytes);
  d.latent.upload(s.latent);
  d.q_abs.upload(s.q_abs);
  d.q.upload(s.q);
  d.w.upload(s.w);
  d.out_abs.upload(std::vector<uint16_t>(s.nd() * H * kMlaLatentDim, 0xFFFF));
  d.lse_abs.upload(std::vector<float>(s.nd() * H, NAN));
  d.out.upload(std::vector<uint16_t>(s.np() * H * kMlaVDim, 0xFFFF));
  d.lse.upload(std::vector<float>(s.np() * H, NAN));
}
#endif

std::vector<MlaGpuCase> all_cases() {
  const std::vector<ReqShape> decode = {{1, 8000}, {1, 17}, {1, 1013}, {1, 4096},
                                        {1, 1},    {1, 0},  {0, 50},   {1, 2500}};
  const std::vector<ReqShape> mixed = {{1, 3000}, {1, 50}, {300, 2000}, {70, 500},
                                       {113, 0},  {2, 0},  {1, 0},      {1, 777}};
  const std::vector<ReqShape> mixed_small = {{1, 2000}, {40, 700}, {33, 0}, {1, 100}, {2, 5}};
  const std::vector<ReqShape> mtp = {{4, 3000}, {3, 100}, {2, 7000}, {1, 20}, {4, 0}, {4, 1}};
  std::vector<MlaGpuCase> out;
  for (const char* backend : {"mla", "mla_baseline"}) {
    const std::string b = backend;
    auto add = [&](MlaGpuCase c, const std::string& name) {
      c.backend = b;
      c.name = b + "_" + name;
      out.push_back(c);
    };
    for (int h : {16, 64, 128}) {
      MlaGpuCase c;
      c.heads = h;
      c.reqs = decode;
      add(c, "decode_h" + std::to_string(h));
      c.block_size = 64;
      add(c, "decode_bs64_h" + std::to_string(h));
      c.block_size = 16;
      c.cache = DType::kFP8E4M3;
      add(c, "fp8_decode_h" + std::to_string(h));
    }
    // 128 heads on blocks of 32 and 8 keys: 2 and 8 TMA boxes per panel and tile for the seesaw
    // kernel (its four-warp refill issue; the smallest box TMA loads here).
    for (int bs : {32, 8}) {
      MlaGpuCase c;
      c.heads = 128;
      c.reqs = decode;
      c.block_size = bs;
      add(c, "decode_bs" + std::to_string(bs) + "_h128");
    }
    {
      MlaGpuCase c;
      c.heads = 128;
      c.reqs = decode;
      c.work_units = 1;  // one split per request: mla writes the output directly
      add(c, "decode_one_split_h128");
      c = MlaGpuCase{};
      c.heads = 16;
      c.reqs = {{1, 32768}, {1, 5000}};
      add(c, "decode_32k_h16");
      c.lse = false;
      c.reqs = {{1, 3000}, {1, 40}};
      add(c, "decode_no_lse");
    }
    for (int h : {16, 128, 24, 8}) {
      MlaGpuCase c;
      c.heads = h;
      c.threshold = 4;
      c.reqs = mtp;
      add(c, "threshold4_h" + std::to_string(h));
      if (h == 16) {
        c.cache = DType::kFP8E4M3;
        add(c, "fp8_threshold4_h16");
        c.cache = DType::kBF16;
        c.threshold = 2;
        c.reqs = {{2, 3000}, {2, 100}, {1, 500}, {2, 0}};
        add(c, "threshold2_h16");
      }
    }
    {
      MlaGpuCase c;
      c.reqs = mixed;
      add(c, "mixed_h16");
      c.block_size = 64;
      c.heads = 64;
      add(c, "mixed_bs64_h64");
      c = MlaGpuCase{};
      c.heads = 128;
      c.reqs = mixed_small;
      add(c, "mixed_h128");
      c.cache = DType::kFP8E4M3;
      add(c, "fp8_mixed_h128");
      c = MlaGpuCase{};
      c.chunk_budget = 500;  // several context pieces, and a prefill cut into self pieces
      c.reqs = {{1, 4000}, {200, 1500}, {1200, 0}, {90, 3000}, {2, 1}};
      add(c, "mixed_chunked_h16");
      c.cache = DType::kFP8E4M3;
      add(c, "fp8_mixed_chunked_h16");
      c = MlaGpuCase{};
      c.threshold = 4;
      c.reqs = {{4, 1000}, {3, 50}, {20, 700}, {9, 0}, {1, 1}, {5, 3}};
      add(c, "mixed_threshold4_h16");
      c = MlaGpuCase{};
      c.reqs = {{500, 0}, {64, 0}, {3, 0}, {130, 70}};
      add(c, "prefill_extend_only_h16");
      c.lse = false;
      add(c, "prefill_extend_only_no_lse");
      c = MlaGpuCase{};
      c.reqs = {{0, 0}, {1, 0}, {0, 17}, {2, 3}, {1, 1}};
      add(c, "edge_tiny");
    }
  }
  // The wgmma decode kernel (mla's default, TRIPATH_MLA_WGMMA=1; the cases above pin 0, the
  // mma.sync kernel) on every step shape with 64+ packed rows per request: 64 and 128 heads,
  // blocks of 16 and 64 keys, one split (direct output), multi-token requests
  // (16 heads x 4 tokens: the causal mask inside a block; 24 x 4 = 96 rows: a half-padded second
  // block), mixed steps; an fp8 cache and 16-head steps, which keep the mma.sync kernel.
  std::vector<MlaGpuCase> base = out;
  for (MlaGpuCase c : out) {
    if (c.name == "mla_threshold4_h24") {  // direct output (one split) with the in-block mask
      c.work_units = 1;
      c.name = "mla_threshold4_h24_one_split";
      base.push_back(c);
    }
    if (c.name == "mla_decode_h128") {
      c.lse = false;
      c.name = "mla_decode_h128_no_lse";
      base.push_back(c);
    }
  }
  // The `mla_<name>` cases of `names` again, with TRIPATH_MLA_WGMMA=value, named prefix + name.
  auto add_wgmma = [&](const std::vector<const char*>& names, int value, const char* prefix) {
    for (const char* name : names) {
      for (MlaGpuCase c : base) {
        if (c.name != std::string("mla_") + name) continue;
        c.wgmma = value;
        c.name = std::string(prefix) + name;
        out.push_back(c);
      }
    }
  };
  // Every step shape of the 64-row kernels (=1 and =4 run them all).
  const std::vector<const char*> every_shape = {
      "decode_h64", "decode_h128", "decode_bs64_h128", "decode_one_split_h128", "threshold4_h16",
      "threshold4_h24", "threshold4_h128", "mixed_h128", "mixed_bs64_h64", "fp8_decode_h128",
      "decode_h16", "mixed_threshold4_h16", "threshold4_h24_one_split", "decode_h128_no_lse"};
  add_wgmma(every_shape, 1, "mla_wgmma_");
  // Its TMA loads (TRIPATH_MLA_WGMMA=2; blocks of 16 keys: 4 boxes per panel and tile, of 64:
  // one; the last tile of every item stays cp.async).
  add_wgmma({"decode_h128", "decode_bs64_h128", "threshold4_h24", "mixed_h128",
             "threshold4_h24_one_split", "decode_h128_no_lse"},
            2, "mla_wgmma_tma_");
  // wgmma on steps under 64 rows per request (TRIPATH_MLA_WGMMA=3: 16 heads x 1-4 tokens, 24 x
  // 1-4, mixed; one split), rows padded to 64; an fp8 cache keeps mma.sync.
  add_wgmma({"decode_h16", "threshold4_h16", "threshold4_h24", "mixed_h16", "mixed_threshold4_h16",
             "threshold4_h24_one_split", "edge_tiny", "mixed_chunked_h16", "fp8_mixed_chunked_h16",
             "decode_h128"},
            3, "mla_wgmma_all_");
  // The seesaw kernel (TRIPATH_MLA_WGMMA=4: each warpgroup computes S of every other tile, TMA
  // loads) on every 64+-row shape above: odd and even tile counts, an item's last tile cut at
  // key_hi (its value rows zeroed), blocks of 16 (4 boxes per panel) and 64, the in-block causal
  // mask, direct and partial outputs, no LSE.
  // (Blocks of 16 run its four-warp refill issue, blocks of 64 its warp-0 one.)
  add_wgmma(every_shape, 4, "mla_seesaw_");
  add_wgmma({"decode_bs32_h128", "decode_bs8_h128"}, 4, "mla_seesaw_");
  // TRIPATH_PDL=1 (decode kernel and merge as programmatic dependents): the packed kernel at
  // 16 heads (one and several tokens, fp8, a mixed step) and the wgmma kernel at 128.
  for (const MlaGpuCase& m : std::vector<MlaGpuCase>(out)) {
    for (const char* name : {"mla_decode_h16", "mla_threshold4_h16", "mla_fp8_decode_h16",
                             "mla_mixed_h16", "mla_wgmma_decode_h128", "mla_wgmma_mixed_h128",
                             "mla_seesaw_decode_h128"}) {
      if (m.name != name) continue;
      MlaGpuCase k = m;
      k.pdl = true;
      k.name = "mla_pdl_" + m.name.substr(4);
      out.push_back(k);
    }
  }
  return out;
}

class GpuMlaTest : public ::testing::TestWithParam<MlaGpuCase> {};

TEST_P(GpuMlaTest, MatchesReference) {
  TRIPATH_REQUIRE_GPU();
#ifdef TRIPATH_WITH_CUDA
  const MlaGpuCase& c = GetParam();
  // The wgmma cases must reach the wgmma kernel, not pass quietly on the mma.sync one.
  if (c.wgmma && (build_info().gpu_compute_capability != 90 ||
                  build_info().cuda_archs.find("90a") == std::string::npos)) {
    GTEST_SKIP() << "the wgmma MLA decode kernel needs an sm_90a build on compute capability 9.0";
  }
  const uint64_t seed = std::hash<std::string>{}(c.name);
  const MlaHostStep s = make_mla_step(c.reqs, c.heads, c.block_size, c.threshold, c.cache,
                                      c.chunk_budget, c.work_units, seed);
  const MlaReference ref = run_reference(s);

  std::unique_ptr<MlaBackend> backend;
  {
    const std::string wgmma_value = std::to_string(c.wgmma);
    ScopedEnv wgmma("TRIPATH_MLA_WGMMA", wgmma_value.c_str());
    ScopedEnv pdl("TRIPATH_PDL", c.pdl ? "1" : "0");
    backend = create_mla_backend(c.backend);
  }
  MlaDevice d;
  upload(s, d);
  const MlaInputs in = make_inputs(s, Device::kCUDA, d.buffers(true, c.lse), DType::kBF16);
  const MlaParams params = mla_params(c.heads);
  backend->prepare(s.plan, params, nullptr);
  backend->run(s.plan, params, in);
  TRIPATH_TEST_CUDA(cudaDeviceSynchronize());

  EXPECT_EQ(d.cache.download<uint8_t>(ref.cache.size()), ref.cache)
      << "latent cache differs after the write";
  const size_t H = c.heads;
  const size_t n_abs = s.nd() * H * kMlaLatentDim, n_out = s.np() * H * kMlaVDim;
  if (s.nd() > 0) {
    const auto got = widen(d.out_abs.download<uint16_t>(n_abs), DType::kBF16);
    EXPECT_LT(rel_l2(got, ref.out_abs), 1e-2) << "absorbed (decode) output";
    if (c.lse) expect_lse_close(d.lse_abs.download<float>(s.nd() * H), ref.lse_abs, "lse_absorbed");
  }
  if (s.np() > 0) {
    const auto got = widen(d.out.download<uint16_t>(n_out), DType::kBF16);
    EXPECT_LT(rel_l2(got, ref.out), 1e-2) << "non-absorbed (extend/prefill) output";
    if (c.lse) expect_lse_close(d.lse.download<float>(s.np() * H), ref.lse, "lse");
  }

  // Repeated runs are bitwise identical (no races, no order-dependent reductions).
  const auto first_abs = d.out_abs.download<uint16_t>(n_abs);
  const auto first_out = d.out.download<uint16_t>(n_out);
  backend->run(s.plan, params, in);
  TRIPATH_TEST_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(d.out_abs.download<uint16_t>(n_abs), first_abs) << "second run differs (absorbed)";
  EXPECT_EQ(d.out.download<uint16_t>(n_out), first_out) << "second run differs (non-absorbed)";
#endif
}

INSTANTIATE_TEST_SUITE_P(AllCases, GpuMlaTest, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return info.param.name; });

// The public write_mla_cache on the GPU, bit for bit with the CPU writer: every latent dtype
// into every GPU cache dtype, -1 slots skipped, values past the fp8 range (saturation) and on
// rounding ties.
TEST(GpuMlaCacheWrite, MatchesCpuWriterBitForBit) {
  TRIPATH_REQUIRE_GPU();
#ifdef TRIPATH_WITH_CUDA
  std::mt19937 rng(13);
  std::normal_distribution<float> normal;
  const int64_t n = 37, num_blocks = 11;
  for (DType in_dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (DType cache_dtype : {DType::kBF16, DType::kF16, DType::kFP8E4M3}) {
      SCOPED_TRACE(std::string(dtype_name(in_dtype)) + " -> " + dtype_name(cache_dtype));
      MlaCacheConfig c;
      c.num_blocks = num_blocks;
      c.block_size = 16;
      c.dtype = cache_dtype;
      if (cache_dtype == DType::kFP8E4M3) c.scale = kFp8Scale;
      std::vector<float> values(static_cast<size_t>(n) * kMlaEntryDim);
      for (size_t i = 0; i < values.size(); ++i) {
        values[i] = normal(rng) * (i % 97 == 0 ? 100.0f : 1.0f);  // some past 448 * scale
        if (i % 131 == 0) values[i] = 0.5f * kFp8Scale * 3.0f;    // near ties after division
      }
      std::vector<uint8_t> latent(values.size() * dtype_size(in_dtype));
      for (size_t i = 0; i < values.size(); ++i) store_float(latent.data(), in_dtype, i, values[i]);
      std::vector<int64_t> slots(static_cast<size_t>(n));
      std::vector<int64_t> perm(static_cast<size_t>(num_blocks * 16));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int64_t t = 0; t < n; ++t) slots[t] = t % 5 == 2 ? -1 : perm[t];
      std::vector<uint8_t> cpu(static_cast<size_t>(c.elements()) * dtype_size(cache_dtype),
                               cache_dtype == DType::kFP8E4M3 ? 0x7F : 0xFF);
      DeviceMem d_cache, d_latent, d_slots;
      d_cache.upload(cpu);
      d_latent.upload(latent);
      d_slots.upload(slots);
      write_mla_cache(
          MlaCacheView{c, TensorView::contiguous(cpu.data(), cache_dtype, {c.elements()})},
          TensorView::contiguous(latent.data(), in_dtype, {n, kMlaEntryDim}),
          TensorView::contiguous(slots.data(), DType::kI64, {n}));
      write_mla_cache(
          MlaCacheView{
              c, TensorView::contiguous(d_cache.get(), cache_dtype, {c.elements()}, Device::kCUDA)},
          TensorView::contiguous(d_latent.get(), in_dtype, {n, kMlaEntryDim}, Device::kCUDA),
          TensorView::contiguous(d_slots.get(), DType::kI64, {n}, Device::kCUDA));
      TRIPATH_TEST_CUDA(cudaDeviceSynchronize());
      EXPECT_EQ(d_cache.download<uint8_t>(cpu.size()), cpu);
    }
  }
#endif
}

// Absorbed == non-absorbed on the GPU: the same requests planned once as decode (threshold 4,
// q_absorbed = [W_UK_h q_nope | q_pe], outputs mapped through W_UV_h on the host) and once as
// extend/prefill (q = [q_nope | q_pe]) agree, for both backends and both cache dtypes.
TEST(GpuMlaForms, AbsorbedEqualsNonAbsorbed) {
  TRIPATH_REQUIRE_GPU();
#ifdef TRIPATH_WITH_CUDA
  const int H = 16;
  // The prefill last: both plans keep the caller's order, so tokens line up.
  const std::vector<ReqShape> reqs = {{4, 1000}, {3, 2000}, {4, 17}, {2, 333}, {2, 0}};
  for (const char* name : {"mla", "mla_baseline"}) {
    for (DType cache_dtype : {DType::kBF16, DType::kFP8E4M3}) {
      SCOPED_TRACE(std::string(name) + " " + dtype_name(cache_dtype));
      // Same seed: the same block table, cache contents, latent rows and weights both times.
      MlaHostStep nonabs = make_mla_step(reqs, H, 16, 1, cache_dtype, 700, 0, 99);
      MlaHostStep abs = make_mla_step(reqs, H, 16, 4, cache_dtype, 700, 0, 99);
      ASSERT_EQ(abs.nd(), nonabs.np());
      ASSERT_EQ(abs.plan.order, nonabs.plan.order);
      const int64_t n = abs.nd();
      std::mt19937 rng(5);
      std::normal_distribution<float> normal;
      // q_nope, q_pe per (token, head); both plans order tokens the same way.
      std::vector<float> q_nope(n * H * 128), q_pe(n * H * 64);
      for (float& x : q_nope) x = normal(rng);
      for (float& x : q_pe) x = normal(rng);
      auto wv = [&](int c, int h, int col) {
        return bf16_to_float(abs.w[(size_t(c) * H + h) * kCols + col]);
      };
      for (int64_t t = 0; t < n; ++t) {
        for (int h = 0; h < H; ++h) {
          const float* qn = q_nope.data() + (t * H + h) * 128;
          for (int c = 0; c < kMlaLatentDim; ++c) {
            double acc = 0;
            for (int k = 0; k < 128; ++k) acc += double(wv(c, h, k)) * qn[k];
            abs.q_abs[(t * H + h) * kMlaEntryDim + c] = bf16_bits(static_cast<float>(acc));
          }
          for (int k = 0; k < 64; ++k) {
            abs.q_abs[(t * H + h) * kMlaEntryDim + 512 + k] = bf16_bits(q_pe[(t * H + h) * 64 + k]);
            nonabs.q[(t * H + h) * kMlaQkDim + 128 + k] = bf16_bits(q_pe[(t * H + h) * 64 + k]);
          }
          for (int k = 0; k < 128; ++k) nonabs.q[(t * H + h) * kMlaQkDim + k] = bf16_bits(qn[k]);
        }
      }
      std::unique_ptr<MlaBackend> backend;
      {
        ScopedEnv defaults("TRIPATH_MLA_WGMMA", nullptr);  // the default kernels
        backend = create_mla_backend(name);
      }
      const MlaParams params = mla_params(H);
      std::vector<float> out_abs, lse_abs, out_non, lse_non;
      for (MlaHostStep* s : {&abs, &nonabs}) {
        MlaDevice d;
        upload(*s, d);
        const MlaInputs in = make_inputs(*s, Device::kCUDA, d.buffers(true, true), DType::kBF16);
        backend->prepare(s->plan, params, nullptr);
        backend->run(s->plan, params, in);
        TRIPATH_TEST_CUDA(cudaDeviceSynchronize());
        if (s == &abs) {
          out_abs = widen(d.out_abs.download<uint16_t>(n * H * kMlaLatentDim), DType::kBF16);
          lse_abs = d.lse_abs.download<float>(n * H);
        } else {
          out_non = widen(d.out.download<uint16_t>(n * H * kMlaVDim), DType::kBF16);
          lse_non = d.lse.download<float>(n * H);
        }
      }
      // out = W_UV_h^T out_abs per (token, head).
      std::vector<float> mapped(n * H * kMlaVDim);
      for (int64_t t = 0; t < n; ++t)
        for (int h = 0; h < H; ++h)
          for (int e = 0; e < 128; ++e) {
            double acc = 0;
            for (int c = 0; c < kMlaLatentDim; ++c)
              acc += double(wv(c, h, 128 + e)) * out_abs[(t * H + h) * kMlaLatentDim + c];
            mapped[(t * H + h) * kMlaVDim + e] = static_cast<float>(acc);
          }
      EXPECT_LT(rel_l2(out_non, mapped), 1e-2);
      expect_lse_close(lse_non, lse_abs, "lse non-absorbed vs absorbed");
    }
  }
#endif
}

// A decode step (cache write included) captured in a CUDA graph and replayed gives the bits of
// a plain run, for both backends, with and without split-KV.
TEST(GpuMlaGraph, DecodeCaptureAndReplay) {
  TRIPATH_REQUIRE_GPU();
#ifdef TRIPATH_WITH_CUDA
  for (const char* name : {"mla", "mla_baseline"}) {
    for (int work_units : {0, 1}) {
      SCOPED_TRACE(std::string(name) + (work_units == 1 ? " one split" : " split-KV"));
      const int H = 128;
      const MlaHostStep s = make_mla_step({{1, 3000}, {1, 100}, {1, 7000}, {1, 1}}, H, 16, 1,
                                          DType::kBF16, 32768, work_units, 21);
      std::unique_ptr<MlaBackend> backend;
      {
        ScopedEnv defaults("TRIPATH_MLA_WGMMA", nullptr);  // the default kernels
        backend = create_mla_backend(name);
      }
      MlaDevice d;
      upload(s, d);
      const MlaInputs base = make_inputs(s, Device::kCUDA, d.buffers(true, true), DType::kBF16);
      cudaStream_t stream;
      TRIPATH_TEST_CUDA(cudaStreamCreate(&stream));
      MlaInputs in = base;
      in.stream = stream;
      const MlaParams params = mla_params(H);
      backend->prepare(s.plan, params, stream);
      backend->run(s.plan, params, in);
      TRIPATH_TEST_CUDA(cudaStreamSynchronize(stream));
      const size_t n_abs = s.nd() * H * kMlaLatentDim;
      const auto plain = d.out_abs.download<uint16_t>(n_abs);
      const auto plain_lse = d.lse_abs.download<float>(s.nd() * H);
      TRIPATH_TEST_CUDA(cudaMemset(d.out_abs.get(), 0xFF, n_abs * 2));
      TRIPATH_TEST_CUDA(cudaMemset(d.lse_abs.get(), 0xFF, s.nd() * H * 4));
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      TRIPATH_TEST_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
      backend->run(s.plan, params, in);
      TRIPATH_TEST_CUDA(cudaStreamEndCapture(stream, &graph));
      TRIPATH_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
      for (int rep = 0; rep < 3; ++rep) TRIPATH_TEST_CUDA(cudaGraphLaunch(exec, stream));
      TRIPATH_TEST_CUDA(cudaStreamSynchronize(stream));
      EXPECT_EQ(d.out_abs.download<uint16_t>(n_abs), plain);
      const auto replay_lse = d.lse_abs.download<float>(s.nd() * H);
      EXPECT_EQ(std::memcmp(replay_lse.data(), plain_lse.data(), plain_lse.size() * 4), 0);
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      cudaStreamDestroy(stream);
    }
  }
#endif
}

// TRIPATH_MLA_WGMMA takes unset, empty (both the default, 4), 0, 1, 2, 3 or 4: anything else is
// an error naming it.
TEST(GpuMlaErrors, WgmmaVariable) {
  TRIPATH_REQUIRE_GPU();
#ifdef TRIPATH_WITH_CUDA
  for (const char* bad : {"5", "yes", "10"}) {
    ScopedEnv env("TRIPATH_MLA_WGMMA", bad);
    try {
      create_mla_backend("mla");
      ADD_FAILURE() << "TRIPATH_MLA_WGMMA=" << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("TRIPATH_MLA_WGMMA"), std::string::npos) << e.what();
    }
  }
  for (const char* ok : {"0", "1", "2", "3", "4", ""}) {
    ScopedEnv env("TRIPATH_MLA_WGMMA", ok);
    EXPECT_NO_THROW(create_mla_backend("mla")) << "TRIPATH_MLA_WGMMA=" << ok;
  }
#endif
}

// run() refuses an unprepared plan, another head count, and dtypes the GPU kernels lack.
TEST(GpuMlaErrors, UnpreparedPlanHeadsAndDtypes) {
  TRIPATH_REQUIRE_GPU();
#ifdef TRIPATH_WITH_CUDA
  const int H = 16;
  MlaHostStep s = make_mla_step({{1, 100}, {5, 40}}, H, 16, 1, DType::kBF16, 32768, 0, 3);
  MlaDevice d;
  upload(s, d);
  const MlaInputs in = make_inputs(s, Device::kCUDA, d.buffers(true, true), DType::kBF16);
  auto backend = create_mla_backend("mla");
  auto expect_error = [&](const MlaParams& params, const MlaInputs& args, const char* needle) {
    try {
      backend->run(s.plan, params, args);
      ADD_FAILURE() << "no error mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(mla_params(H), in, "prepare");
  backend->prepare(s.plan, mla_params(H), nullptr);
  MlaInputs f16 = in;
  f16.q_absorbed.dtype = DType::kF16;
  expect_error(mla_params(H), f16, "'q_absorbed'");
  MlaInputs f32_out = in;
  f32_out.out.dtype = DType::kF32;
  expect_error(mla_params(H), f32_out, "'out'");
  MlaInputs cpu = in;
  cpu.q.device = Device::kCPU;
  expect_error(mla_params(H), cpu, "'q'");
  MlaInputs f16_cache = in;
  f16_cache.cache.config.dtype = DType::kF16;
  f16_cache.cache.latent.dtype = DType::kF16;
  expect_error(mla_params(H), f16_cache, "cache.dtype");
  // A batch not laid out [decode | extend | prefill] is refused by prepare and run.
  StepInput unordered = s.input;
  std::swap(unordered.query_lens[0], unordered.query_lens[1]);
  std::swap(unordered.context_lens[0], unordered.context_lens[1]);
  std::vector<int32_t> swapped(s.block_table);
  const int64_t stride = unordered.block_table_stride;
  std::swap_ranges(swapped.begin(), swapped.begin() + stride, swapped.begin() + stride);
  unordered.block_table = swapped.data();
  const StepPlan plan = plan_step(unordered);
  ASSERT_FALSE(plan.is_ordered);
  try {
    backend->prepare(plan, mla_params(H), nullptr);
    ADD_FAILURE() << "an unordered plan was prepared";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ordered"), std::string::npos) << e.what();
  }
#endif
}

#ifdef TRIPATH_WITH_CUDA
// mla-decode-4k's decode step on the device for the opt-in timing tests: 64 requests x 4096 keys,
// cache blocks of `block_size` keys (64 unless said), block tables shuffled over the pool (as a serving cache is), random bf16 data in
// [-1, 1); each request cut in `splits` equal key ranges, each range in items of `rows_per_item`
// packed rows (the heads), as the mla backend lays them out.
struct MlaTimingStep {
  static constexpr int kReqs = 64, kKeys = 4096;
  const int block;  // keys per cache block (a power of two)
  DeviceMem q, cache, out, lse, part_out, part_lse, bt, cu, ctx, items;
  kernels::MlaDecodeParams p{};
  double bytes = 0.0, flops = 0.0;

  MlaTimingStep(int heads, int splits, int rows_per_item, int block_size = 64) : block(block_size) {
    const int kBlocksPerReq = kKeys / block;
    const int num_blocks = kReqs * kBlocksPerReq;
    std::mt19937 rng(7);
    std::vector<int32_t> table(static_cast<size_t>(num_blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    auto bf16_bits = [&](size_t n) {
      std::vector<uint16_t> v(n);
      for (uint16_t& x : v) {
        const float f = uni(rng);
        uint32_t u;
        std::memcpy(&u, &f, 4);
        x = static_cast<uint16_t>(u >> 16);
      }
      return v;
    };
    q.upload(bf16_bits(size_t(kReqs) * heads * kernels::kMlaEntry));
    cache.upload(bf16_bits(size_t(num_blocks) * block * kernels::kMlaEntry));
    out.resize(size_t(kReqs) * heads * kernels::kMlaLatent * 2);
    lse.resize(size_t(kReqs) * heads * 4);
    part_out.resize(size_t(splits) * kReqs * heads * kernels::kMlaLatent * 4);
    part_lse.resize(size_t(splits) * kReqs * heads * 4);
    bt.upload(table);
    std::vector<int32_t> cu_q(kReqs + 1), ctx_lens(kReqs, kKeys - 1);
    std::iota(cu_q.begin(), cu_q.end(), 0);
    cu.upload(cu_q);
    ctx.upload(ctx_lens);
    std::vector<kernels::MlaDecodeWorkItem> list;
    for (int r = 0; r < kReqs; ++r)
      for (int sp = 0; sp < splits; ++sp)
        for (int rb = 0; rb < heads; rb += rows_per_item)
          list.push_back({r, sp, sp * kKeys / splits, (sp + 1) * kKeys / splits, rb, {0, 0, 0}});
    items.upload(list);
    p.q = q.get();
    p.cache = cache.get();
    p.out = out.get();
    p.lse = static_cast<float*>(lse.get());
    p.partial_out = static_cast<float*>(part_out.get());
    p.partial_lse = static_cast<float*>(part_lse.get());
    p.block_table = static_cast<const int32_t*>(bt.get());
    p.cu_seqlens_q = static_cast<const int32_t*>(cu.get());
    p.context_lens = static_cast<const int32_t*>(ctx.get());
    p.items = static_cast<const kernels::MlaDecodeWorkItem*>(items.get());
    p.num_items = static_cast<int32_t>(list.size());
    p.num_tokens = kReqs;
    p.num_heads = heads;
    p.max_blocks_per_request = kBlocksPerReq;
    p.block_size = block;
    p.log2_block_size = 0;
    while ((1 << p.log2_block_size) < block) ++p.log2_block_size;
    p.scale_log2 = 1.4426950408889634f / std::sqrt(192.0f);
    p.out_scale = 1.0f;
    bytes = double(kReqs) * kKeys * kernels::kMlaEntry * 2;
    flops = 2.0 * kReqs * kKeys * heads * double(kernels::kMlaEntry + kernels::kMlaLatent);
  }
  int num_blocks() const { return kReqs * (kKeys / block); }
  // Every table entry -> block 0: the kernel's tiles then come out of L2 (no HBM traffic).
  void point_all_at_block0() {
    bt.upload(std::vector<int32_t>(static_cast<size_t>(num_blocks()), 0));
    p.block_table = static_cast<const int32_t*>(bt.get());
  }
};
#endif

// Opt-in timing (TRIPATH_MLA_BENCH=1): the 16-row packed decode kernel against its loads alone
// (launch_mla_decode_packed_loads_only) on mla-decode-4k's 16-head shape (two splits per request
// as the mla plan cuts them): says whether the kernel waits on its cp.async ring or on its math.
// Prints both times and the bytes' rates.
TEST(GpuMlaBench, PackedLoadsAlone) {
  TRIPATH_REQUIRE_GPU();
  if (!timing_enabled("TRIPATH_MLA_BENCH"))
    GTEST_SKIP() << "timing runs only with TRIPATH_MLA_BENCH=1";
#ifdef TRIPATH_WITH_CUDA
  MlaTimingStep step(16, 2, 16);
  // Medians of 20 launches after 3 warm-ups.
  const double full = median_launch_us([&] {
    EXPECT_EQ(kernels::launch_mla_decode_packed(step.p, 16, DType::kBF16, nullptr), cudaSuccess);
  });
  const double loads = median_launch_us([&] {
    EXPECT_EQ(kernels::launch_mla_decode_packed_loads_only(step.p, nullptr), cudaSuccess);
  });
  TRIPATH_TEST_CUDA(cudaDeviceSynchronize());
  std::printf(
      "mla packed 16 rows, 64 x 4096 keys, %d items: kernel %.1f us (%.2f TB/s), loads "
      "alone %.1f us (%.2f TB/s)\n",
      step.p.num_items, full, step.bytes / full * 1e-6, loads, step.bytes / loads * 1e-6);
  EXPECT_GT(full, 0.0);
  EXPECT_GT(loads, 0.0);
#endif
}

// Opt-in timing (TRIPATH_MLA_BENCH=1): the wgmma kernel at 128 heads (mla-decode-4k: 64-row
// items, 2 per split) split into its parts (launch_mla_decode_wgmma_probe): loads alone, math
// alone on stale stages, math without P V. With 1 split the 128 items are one wave of one block
// per SM; with 2 (the mla plan's cut) two waves. Prints each time and its microseconds per tile.
TEST(GpuMlaBench, WgmmaParts) {
  TRIPATH_REQUIRE_GPU();
  if (!timing_enabled("TRIPATH_MLA_BENCH"))
    GTEST_SKIP() << "timing runs only with TRIPATH_MLA_BENCH=1";
#ifdef TRIPATH_WITH_CUDA
  if (!kernels::mla_decode_wgmma_built()) GTEST_SKIP() << "built without sm_90a";
  for (int splits : {1, 2}) {
    MlaTimingStep step(128, splits, kernels::kMlaWgmmaRows);
    const char* names[] = {"kernel", "loads alone", "math alone", "math without P V"};
    double us[4];
    for (int probe = 0; probe < 4; ++probe) {
      us[probe] = median_launch_us([&] {
        EXPECT_EQ(kernels::launch_mla_decode_wgmma_probe(step.p, probe, nullptr), cudaSuccess);
      });
    }
    TRIPATH_TEST_CUDA(cudaDeviceSynchronize());
    const int tiles = MlaTimingStep::kKeys / splits / 64;  // per item
    const int waves = (step.p.num_items + 131) / 132;
    for (int probe = 0; probe < 4; ++probe) {
      std::printf(
          "mla wgmma 128 heads, 64 x 4096 keys, %d items (%d splits): %s %.1f us (%.0f "
          "TFLOP/s; %.2f us per tile)\n",
          step.p.num_items, splits, names[probe], us[probe], step.flops / us[probe] * 1e-6,
          us[probe] / (tiles * waves));
      EXPECT_GT(us[probe], 0.0);
    }
  }
#endif
}

// Opt-in timing (TRIPATH_MLA_BENCH=1): the seesaw kernel (mla's default at 128 heads) on the
// same step (one split: 128 items, one wave), on cache blocks of 64 keys (one TMA box per panel
// and tile) and 16 (four): the kernel with the warp-0 and the four-warp refill issue, its loads
// alone, each form's per-pair event clocks, and both forms on a cache whose table points every
// block at block 0 (tiles out of L2: what is left without HBM).
TEST(GpuMlaBench, SeesawParts) {
  TRIPATH_REQUIRE_GPU();
  if (!timing_enabled("TRIPATH_MLA_BENCH"))
    GTEST_SKIP() << "timing runs only with TRIPATH_MLA_BENCH=1";
#ifdef TRIPATH_WITH_CUDA
  if (!kernels::mla_decode_wgmma_built()) GTEST_SKIP() << "built without sm_90a";
  using namespace kernels;
  for (int block : {64, 16}) {
    MlaTimingStep step(128, 1, kMlaWgmmaRows, block);
    MlaLatentMap map{};
    ASSERT_TRUE(make_mla_latent_map(step.p.cache, step.num_blocks(), block, &map));
    auto time = [&](int probe) {
      return median_launch_us([&] {
        EXPECT_EQ(launch_mla_decode_seesaw_probe(step.p, map, probe, nullptr, nullptr),
                  cudaSuccess);
      });
    };
    const double kernel = time(kSeesawProbeNone), wide = time(kSeesawProbeWide),
                 loads = time(kSeesawProbeLoadsOnly);
    // The event clocks of blocks 0 and 1 (the two row blocks of request 0), steady pairs only.
    auto trace_of = [&](int probe, const char* label) {
      constexpr int kB = kSeesawTraceBlocks, kT = kSeesawTracePairs, kE = kSeesawTraceEvents;
      DeviceMem trace;
      trace.resize(size_t(kB) * 2 * kT * kE * 4);
      ASSERT_EQ(launch_mla_decode_seesaw_probe(step.p, map, probe,
                                               static_cast<uint32_t*>(trace.get()), nullptr),
                cudaSuccess);
      TRIPATH_TEST_CUDA(cudaDeviceSynchronize());
      std::vector<uint32_t> clocks(size_t(kB) * 2 * kT * kE);
      TRIPATH_TEST_CUDA(cudaMemcpy(clocks.data(), trace.get(), clocks.size() * 4,
                                   cudaMemcpyDeviceToHost));
      const char* events[2][kE] = {
          {"top", "softmax done", "P0 handed", "P0 V0_L issued", "P0 V0_L done", "P1 taken",
           "P1 V1_L issued", "S0' panels 0-3,8 issued", "P1 V1_L done", "S0' done"},
          {"top", "P0 taken", "P0 V0_R issued", "softmax done", "P0 V0_R done", "P1 handed",
           "P1 V1_R issued", "P1 V1_R done", "S1' issued", "S1' done"}};
      auto at = [&](int b, int w, int t, int e) { return clocks[((b * 2 + w) * kT + t) * kE + e]; };
      for (int b = 0; b < kB; ++b) {
        double period = 0.0;
        for (int t = 2; t < kT - 2; ++t) period += int32_t(at(b, 0, t + 1, 0) - at(b, 0, t, 0));
        std::printf("mla seesaw%s, blocks of %d, trace of block %d: %.0f clocks per pair (pairs "
                    "2..%d)\n", label, block, b, period / (kT - 4), kT - 3);
        for (int w = 0; w < 2; ++w) {
          std::printf("  wg%d:", w);
          for (int e = 0; e < kE; ++e) {
            double mean = 0.0;
            for (int t = 2; t < kT - 2; ++t) mean += int32_t(at(b, w, t, e) - at(b, 0, t, 0));
            std::printf(" %s %.0f%s", events[w][e], mean / (kT - 4), e + 1 < kE ? ";" : "\n");
          }
        }
      }
    };
    trace_of(kSeesawProbeTrace, "");
    trace_of(kSeesawProbeWideTrace, " (wide issue)");
    step.point_all_at_block0();
    const double l2 = time(kSeesawProbeNone), l2_wide = time(kSeesawProbeWide);
    TRIPATH_TEST_CUDA(cudaDeviceSynchronize());
    const int tiles = MlaTimingStep::kKeys / 64;
    const char* names[] = {"kernel", "wide-issue kernel", "loads alone", "kernel, tiles from L2",
                           "wide-issue kernel, tiles from L2"};
    const double us[] = {kernel, wide, loads, l2, l2_wide};
    for (int i = 0; i < 5; ++i) {
      std::printf(
          "mla seesaw 128 heads, 64 x 4096 keys, blocks of %d, %d items: %s %.1f us (%.0f "
          "TFLOP/s; %.2f us per tile)\n",
          block, step.p.num_items, names[i], us[i], step.flops / us[i] * 1e-6, us[i] / tiles);
      EXPECT_GT(us[i], 0.0);
    }
  }
#endif
}

}  // namespace
}  // namespace tripath::gputest

namespace tripath::gputest {
namespace {

// Opt-in timing (TRIPATH_MLA_BENCH=1): what the tensor cores deliver per wgmma form the MLA
// kernels use, alone and with the two warpgroups sharing them (launch_wgmma_rate_probe: no
// loads, no softmax; 132 blocks, one per SM). Prints clocks per instruction (median over the
// blocks) against the dense bf16 peak of an SM (1024 FLOP per clock per sub-core: N / 2 clocks
// for an m64nNk16).
TEST(GpuMlaBench, WgmmaRates) {
  TRIPATH_REQUIRE_GPU();
  if (!timing_enabled("TRIPATH_MLA_BENCH"))
    GTEST_SKIP() << "timing runs only with TRIPATH_MLA_BENCH=1";
#ifdef TRIPATH_WITH_CUDA
  if (!kernels::mla_decode_wgmma_built()) GTEST_SKIP() << "built without sm_90a";
  using namespace kernels;
  const char* names[] = {"SS n64 (S)", "RS n64 (S, Q in registers)", "RS n256 (P V)",
                         "SS n256 (P V, P from smem)", "SS n128 (S of 128 keys)",
                         "SS n64 fenced per panel"};
  const int ns[] = {64, 64, 256, 256, 128, 64};
  const std::pair<int, int> pairs[] = {
      {kRateSsN64, kRateIdle},   {kRateRsN64, kRateIdle},   {kRateRsN256, kRateIdle},
      {kRateSsN256, kRateIdle},  {kRateSsN128, kRateIdle},  {kRateSsN64, kRateSsN64},
      {kRateRsN64, kRateRsN64},  {kRateRsN256, kRateRsN256}, {kRateSsN256, kRateSsN256},
      {kRateSsN64, kRateRsN256}, {kRateRsN64, kRateRsN256},  {kRateSsN64Fenced, kRateIdle},
      {kRateSsN64Fenced, kRateSsN64Fenced}, {kRateSsN64Fenced, kRateRsN256}};
  constexpr int kBlocks = 132, kReps = 200;
  DeviceMem cycles;
  cycles.resize(size_t(kBlocks) * 2 * 8);
  for (const auto& [f0, f1] : pairs) {
    ASSERT_EQ(launch_wgmma_rate_probe(f0, f1, kReps, kBlocks,
                                      static_cast<unsigned long long*>(cycles.get()), nullptr),
              cudaSuccess);
    TRIPATH_TEST_CUDA(cudaDeviceSynchronize());
    std::vector<unsigned long long> c(size_t(kBlocks) * 2);
    TRIPATH_TEST_CUDA(cudaMemcpy(c.data(), cycles.get(), c.size() * 8, cudaMemcpyDeviceToHost));
    std::printf("wgmma rates:");
    const int forms[2] = {f0, f1};
    for (int w = 0; w < 2; ++w) {
      if (forms[w] < 0) continue;
      std::vector<double> per;
      for (int b = 0; b < kBlocks; ++b)
        per.push_back(double(c[2 * b + w]) / (double(kReps) * wgmma_rate_group_size(forms[w])));
      std::sort(per.begin(), per.end());
      const double med = per[per.size() / 2];
      std::printf(" wg%d %s %.1f clocks per wgmma (%.0f%% of peak)%s", w, names[forms[w]], med,
                  100.0 * (ns[forms[w]] / 2) / med, w == 0 && f1 >= 0 ? ";" : "");
      EXPECT_GT(med, 0.0);
    }
    std::printf("\n");
  }
#endif
}

}  // namespace
}  // namespace tripath::gputest

namespace tripath::gputest {
namespace {

// The timing probes refuse bad arguments before launching anything (so this runs without a GPU):
// a trace probe without its buffer, a wgmma-rate form pair the probe does not build.
TEST(GpuMlaKernels, ProbesRefuseBadArguments) {
#ifdef TRIPATH_WITH_CUDA
  using namespace kernels;
  MlaDecodeParams p{};
  p.num_items = 1;
  MlaLatentMap map{};
  map.rows = 16;
  for (int probe : {kSeesawProbeTrace, kSeesawProbeWideTrace})
    EXPECT_EQ(launch_mla_decode_seesaw_probe(p, map, probe, nullptr, nullptr),
              cudaErrorInvalidValue)
        << "probe " << probe;
  for (const auto& [f0, f1] : {std::pair<int, int>{kRateIdle, kRateIdle}, {kRateRsN256, kRateSsN64},
                               {6, kRateIdle}, {kRateSsN64, -2}})
    EXPECT_EQ(launch_wgmma_rate_probe(f0, f1, 1, 1, nullptr, nullptr), cudaErrorInvalidValue)
        << f0 << ", " << f1;
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

}  // namespace
}  // namespace tripath::gputest
