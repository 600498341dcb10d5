#include "serve_executor.h"

#include <chrono>

#include "bench_step.h"
#include "tripath/backend.h"
#include "tripath/error.h"

namespace tripath::cli {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// The first `rows` rows of a contiguous buffer view.
TensorView first_rows(TensorView t, int64_t rows) {
  t.shape[0] = rows;
  return t;
}

// Seeds of the synthetic buffers (any fixed distinct values).
enum : uint64_t {
  kSeedQ = 11,
  kSeedK,
  kSeedV,
  kSeedOut,
  kSeedSinks,
  kSeedLatent,
  kSeedQAbs,
  kSeedKvB
};

}  // namespace

void mha_setup(const ExecutorConfig& c, const AttentionBackend& backend, AttentionParams& params,
               KvCacheConfig& cache) {
  const ModelPreset& p = *c.model.preset;
  params = AttentionParams{};
  params.num_q_heads = p.num_q_heads;
  params.num_kv_heads = p.num_kv_heads;
  params.head_dim = p.head_dim;
  params.softcap = p.softcap;
  params.has_sinks = p.has_sinks;
  cache = KvCacheConfig{};
  cache.num_blocks = c.num_blocks;
  cache.block_size = c.block_size;
  cache.layout = c.layout;
  cache.num_kv_heads = p.num_kv_heads;
  cache.head_dim = p.head_dim;
  cache.dtype = DType::kBF16;
  cache.validate();
  backend.check_supported(params, cache);
}

void mla_setup(const ExecutorConfig& c, MlaParams& params, MlaCacheConfig& cache) {
  params = MlaParams{};
  params.num_heads = c.model.preset->num_q_heads;
  params.validate();
  cache = MlaCacheConfig{};
  cache.num_blocks = c.num_blocks;
  cache.block_size = c.block_size;
  cache.dtype = DType::kBF16;
  cache.validate();
}

namespace {

class HostMhaExecutor final : public ServeExecutor {
 public:
  explicit HostMhaExecutor(const ExecutorConfig& c)
      : c_(c), backend_(create_attention_backend(c.backend)) {
    const ModelPreset& p = *c.model.preset;
    KvCacheConfig cache;
    mha_setup(c, *backend_, params_, cache);
    const int64_t t = c.max_tokens, hq = p.num_q_heads, hkv = p.num_kv_heads, d = p.head_dim;
    q_ = Buffer(DType::kBF16, {t, hq, d});
    k_ = Buffer(DType::kBF16, {t, hkv, d});
    v_ = Buffer(DType::kBF16, {t, hkv, d});
    out_ = Buffer(DType::kBF16, {t, hq, d});
    fill_random(q_.view, c.seed + kSeedQ, 1.0f);
    fill_random(k_.view, c.seed + kSeedK, 1.0f);
    fill_random(v_.view, c.seed + kSeedV, 1.0f);
    cache_k_ = Buffer(DType::kBF16, cache.shape());
    cache_v_ = Buffer(DType::kBF16, cache.shape());
    in_.cache.config = cache;
    in_.cache.k = cache_k_.view;
    in_.cache.v = cache_v_.view;
    if (p.has_sinks) {
      sinks_ = Buffer(DType::kF32, {hq});
      fill_random(sinks_.view, c.seed + kSeedSinks, 2.0f);
      in_.sinks = sinks_.view;
    }
  }

  StepTiming run(const StepPlan& plan) override {
    const int64_t n = plan.num_tokens;
    in_.q = first_rows(q_.view, n);
    in_.k = first_rows(k_.view, n);
    in_.v = first_rows(v_.view, n);
    in_.out = first_rows(out_.view, n);
    StepTiming timing;
    const Clock::time_point t0 = Clock::now();
    backend_->prepare(plan, params_, nullptr);
    timing.prepare_ms = ms_since(t0);
    const Clock::time_point t1 = Clock::now();
    for (int layer = 0; layer < c_.layers; ++layer) {
      AttentionParams params = params_;
      // Models with sliding windows use them on alternate layers (BENCH.md model table).
      if (layer % 2 == 1) params.window_left = c_.model.preset->window_left;
      backend_->run(plan, params, in_);
    }
    timing.device_ms = ms_since(t1);
    return timing;
  }

  ExecutorInfo info() const override {
    ExecutorInfo i;
    i.timer = "std::chrono::steady_clock";
    i.cache_bytes = 2 * in_.cache.config.bytes_per_tensor();
    if (c_.linear) i.notes = "--linear unavailable on the CPU (the GEMMs run through cuBLAS)";
    return i;
  }

 private:
  ExecutorConfig c_;
  std::unique_ptr<AttentionBackend> backend_;
  AttentionParams params_;
  Buffer q_, k_, v_, out_, sinks_, cache_k_, cache_v_;
  AttentionInputs in_;
};

class HostMlaExecutor final : public ServeExecutor {
 public:
  explicit HostMlaExecutor(const ExecutorConfig& c)
      : c_(c), backend_(create_mla_backend(c.backend)) {
    const int64_t h = c.model.preset->num_q_heads;
    MlaCacheConfig cache;
    mla_setup(c, params_, cache);
    const int64_t t = c.max_tokens, r = c.max_requests;
    latent_ = Buffer(DType::kBF16, {t, kMlaEntryDim});
    q_absorbed_ = Buffer(DType::kBF16, {r, h, kMlaEntryDim});
    out_absorbed_ = Buffer(DType::kBF16, {r, h, kMlaLatentDim});
    q_ = Buffer(DType::kBF16, {t, h, kMlaQkDim});
    kv_b_proj_ = Buffer(DType::kBF16, {kMlaLatentDim, h * (kMlaNopeDim + kMlaVDim)});
    out_ = Buffer(DType::kBF16, {t, h, kMlaVDim});
    fill_random(latent_.view, c.seed + kSeedLatent, 1.0f);
    fill_random(q_absorbed_.view, c.seed + kSeedQAbs, 1.0f);
    fill_random(q_.view, c.seed + kSeedQ, 1.0f);
    // Keeps decompressed keys and values near unit size (512 latent terms per element).
    fill_random(kv_b_proj_.view, c.seed + kSeedKvB, 0.1f);
    cache_ = Buffer(DType::kBF16, cache.shape());
    in_.cache.config = cache;
    in_.cache.latent = cache_.view;
  }

  StepTiming run(const StepPlan& plan) override {
    const int64_t nd = plan.decode.num_tokens();
    const int64_t np = plan.num_tokens - nd;
    if (nd > c_.max_requests) {
      throw Error("serve: a step with " + std::to_string(nd) + " decode tokens exceeds the " +
                  std::to_string(c_.max_requests) + " the MLA executor was sized for");
    }
    in_.latent = first_rows(latent_.view, plan.num_tokens);
    in_.q_absorbed = nd > 0 ? first_rows(q_absorbed_.view, nd) : TensorView{};
    in_.out_absorbed = nd > 0 ? first_rows(out_absorbed_.view, nd) : TensorView{};
    in_.q = np > 0 ? first_rows(q_.view, np) : TensorView{};
    in_.kv_b_proj = np > 0 ? kv_b_proj_.view : TensorView{};
    in_.out = np > 0 ? first_rows(out_.view, np) : TensorView{};
    StepTiming timing;
    const Clock::time_point t0 = Clock::now();
    backend_->prepare(plan, params_, nullptr);
    timing.prepare_ms = ms_since(t0);
    const Clock::time_point t1 = Clock::now();
    for (int layer = 0; layer < c_.layers; ++layer) backend_->run(plan, params_, in_);
    timing.device_ms = ms_since(t1);
    return timing;
  }

  ExecutorInfo info() const override {
    ExecutorInfo i;
    i.timer = "std::chrono::steady_clock";
    i.cache_bytes = in_.cache.config.elements() * 2;
    if (c_.linear) i.notes = "--linear unavailable on the CPU (the GEMMs run through cuBLAS)";
    return i;
  }

 private:
  ExecutorConfig c_;
  std::unique_ptr<MlaBackend> backend_;
  MlaParams params_;
  Buffer latent_, q_absorbed_, out_absorbed_, q_, kv_b_proj_, out_, cache_;
  MlaInputs in_;
};

}  // namespace

bool is_host_backend(const std::string& backend) { return backend == "reference"; }

std::unique_ptr<ServeExecutor> make_executor(const ExecutorConfig& config) {
  if (config.model.preset == nullptr) throw Error("serve: executor without a model");
  if (!is_host_backend(config.backend)) return make_gpu_executor(config);
  if (config.model.preset->is_mla) return std::make_unique<HostMlaExecutor>(config);
  return std::make_unique<HostMhaExecutor>(config);
}

}  // namespace tripath::cli
