#include "serve_model.h"

#include "flags.h"
#include "tripath/error.h"
#include "tripath/kv_cache.h"

namespace tripath::cli {

namespace {

// Hidden sizes from the models' published configurations (hidden_size); MLA q_lora_rank.
struct HiddenSize {
  const char* name;
  int hidden;
  int q_lora_rank;
};
constexpr HiddenSize kHiddenSizes[] = {
    {"qwen3-235b", 4096, 0},     {"qwen3-235b-tp8", 4096, 0},     {"llama3-70b", 8192, 0},
    {"llama3-8b", 4096, 0},      {"gemma2-9b", 3584, 0},          {"gpt-oss-120b", 2880, 0},
    {"deepseek-r1", 7168, 1536}, {"deepseek-r1-tp8", 7168, 1536}, {"kimi-k2", 7168, 1536},
};

}  // namespace

ServeModel serve_model(const std::string& name) {
  ServeModel m;
  m.preset = find_model(name);
  if (m.preset == nullptr) {
    throw Error("unknown model preset '" + name + "'; valid: " + join(model_names(), ", "));
  }
  for (const HiddenSize& h : kHiddenSizes) {
    if (name == h.name) {
      m.hidden = h.hidden;
      m.q_lora_rank = h.q_lora_rank;
    }
  }
  if (m.hidden == 0) throw Error("model preset '" + name + "' has no hidden size for --linear");
  const ModelPreset& p = *m.preset;
  if (!p.is_mla) {
    // Fused QKV projection of the shard's heads, then the output projection back to hidden.
    m.gemms.push_back({"qkv_proj", m.hidden,
                       int64_t{p.num_q_heads + 2 * p.num_kv_heads} * p.head_dim, 1, false, true});
    m.gemms.push_back({"o_proj", int64_t{p.num_q_heads} * p.head_dim, m.hidden, 1, false, false});
  } else {
    // DeepSeek-V3/R1 attention projections (per shard: heads = the preset's). Decode tokens go
    // through the absorbed form: q_nope x W_UK per head before attention, the 512-wide output x
    // W_UV per head after; extend/prefill tokens get kv_b_proj inside the backend instead.
    const int64_t h = p.num_q_heads;
    m.gemms.push_back({"q_a_proj", m.hidden, m.q_lora_rank, 1, false, true});
    m.gemms.push_back({"q_b_proj", m.q_lora_rank, h * kMlaQkDim, 1, false, true});
    m.gemms.push_back({"kv_a_proj", m.hidden, kMlaEntryDim, 1, false, true});
    m.gemms.push_back({"w_uk_absorb", kMlaNopeDim, kMlaLatentDim, p.num_q_heads, true, true});
    m.gemms.push_back({"w_uv_absorb", kMlaLatentDim, kMlaVDim, p.num_q_heads, true, false});
    m.gemms.push_back({"o_proj", h * kMlaVDim, m.hidden, 1, false, false});
  }
  return m;
}

double linear_flops(const ServeModel& model, int64_t tokens, int64_t decode_tokens) {
  double flops = 0.0;
  for (const GemmShape& g : model.gemms) {
    const double rows = static_cast<double>(g.decode_only ? decode_tokens : tokens);
    flops += 2.0 * rows * static_cast<double>(g.k) * static_cast<double>(g.n) * g.batch;
  }
  return flops;
}

double linear_weight_bytes(const ServeModel& model) {
  double bytes = 0.0;
  for (const GemmShape& g : model.gemms)
    bytes += 2.0 * static_cast<double>(g.k) * static_cast<double>(g.n) * g.batch;
  return bytes;
}

double path_weight(const ServeModel& model, const StepLengths& lengths, int64_t decode_tokens,
                   bool with_linear, bool count_bytes) {
  if (lengths.query_lens.empty()) return 0.0;
  const StepCost cost = model.preset->is_mla
                            ? mla_cost(lengths, *model.preset, 1, DType::kBF16, DType::kBF16)
                            : mha_cost(lengths, *model.preset, DType::kBF16, DType::kBF16);
  double weight = cost.flops / kNominalFlops;
  if (count_bytes) weight += cost.bytes / kNominalBytesPerSecond;
  if (with_linear) {
    int64_t tokens = 0;
    for (int32_t q : lengths.query_lens) tokens += q;
    weight += linear_flops(model, tokens, decode_tokens) / kNominalFlops;
  }
  return weight;
}

}  // namespace tripath::cli
