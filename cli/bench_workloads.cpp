#include "bench_workloads.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "tripath/kv_cache.h"

namespace tripath::cli {

const std::vector<ModelPreset>& model_presets() {
  // name, mla, q heads, kv heads, head dim, softcap, window, sinks, layers, note
  static const std::vector<ModelPreset> presets = {
      {"qwen3-235b", false, 64, 4, 128, 0.0f, -1, false, 94, "GQA 16:1"},
      {"qwen3-235b-tp8", false, 8, 1, 128, 0.0f, -1, false, 94,
       "one GPU's shard under 8-way tensor parallelism"},
      {"llama3-70b", false, 64, 8, 128, 0.0f, -1, false, 80, ""},
      {"llama3-8b", false, 32, 8, 128, 0.0f, -1, false, 32, ""},
      {"gemma2-9b", false, 16, 8, 256, 50.0f, 4096, false, 42,
       "soft-cap 50, sliding window 4096 on alternate layers (bench: full-attention layer)"},
      {"gpt-oss-120b", false, 64, 8, 64, 0.0f, 128, true, 36,
       "attention sinks, sliding window 128 on alternate layers (bench: full-attention layer)"},
      {"deepseek-r1", true, 128, 1, kMlaEntryDim, 0.0f, -1, false, 61,
       "MLA, latent 576/512, qk 192 and v 128 in prefill"},
      {"deepseek-r1-tp8", true, 16, 1, kMlaEntryDim, 0.0f, -1, false, 61, "MLA, 8-way TP shard"},
      {"kimi-k2", true, 64, 1, kMlaEntryDim, 0.0f, -1, false, 61, "MLA"},
  };
  return presets;
}

const std::vector<WorkloadSpec>& workloads() {
  // groups: {count, query_len, context_min, context_max}
  static const std::vector<WorkloadSpec> specs = {
      {"decode-4k", false, "qwen3-235b", {{64, 1, 4096, 4096}}, "decode bandwidth"},
      {"decode-mixed",
       false,
       "qwen3-235b",
       {{64, 1, 1024, 8192}},
       "uneven contexts, split-KV planning"},
      {"decode-long",
       false,
       "qwen3-235b",
       {{8, 1, 131072, 131072}},
       "very long contexts, few requests: split-KV must fill the SMs"},
      {"mixed",
       false,
       "qwen3-235b",
       {{60, 1, 1024, 8192}, {2, 2048, 16384, 16384}, {2, 2048, 0, 0}},
       "one continuous-batching step: decode + extend + prefill"},
      {"prefill-8k", false, "qwen3-235b", {{4, 8192, 0, 0}}, "prefill compute"},
      {"extend-long",
       false,
       "qwen3-235b",
       {{1, 2048, 131072, 131072}},
       "chunked context with LSE merge, bounded workspace"},
      {"mla-decode-4k",
       true,
       "deepseek-r1",
       {{64, 1, 4096, 4096}},
       "MLA decode (compute-bound at 128 heads)"},
      {"mla-decode-mixed", true, "deepseek-r1", {{64, 1, 1024, 8192}}, "MLA uneven contexts"},
      {"mla-mixed",
       true,
       "deepseek-r1",
       {{60, 1, 1024, 8192}, {2, 2048, 16384, 16384}, {2, 2048, 0, 0}},
       "MLA hybrid paths"},
  };
  return specs;
}

const ModelPreset* find_model(const std::string& name) {
  for (const ModelPreset& m : model_presets()) {
    if (name == m.name) return &m;
  }
  return nullptr;
}

const WorkloadSpec* find_workload(const std::string& id) {
  for (const WorkloadSpec& w : workloads()) {
    if (id == w.id) return &w;
  }
  return nullptr;
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const ModelPreset& m : model_presets()) names.emplace_back(m.name);
  return names;
}

std::vector<std::string> workload_ids() {
  std::vector<std::string> ids;
  for (const WorkloadSpec& w : workloads()) ids.emplace_back(w.id);
  return ids;
}

namespace {

int scale_length(int length, double scale, int minimum) {
  if (length == 0) return 0;
  const double scaled = std::round(static_cast<double>(length) * scale);
  return static_cast<int>(std::max<double>(minimum, scaled));
}

}  // namespace

std::vector<ScaledGroup> scale_groups(const WorkloadSpec& w, double scale) {
  const double count_scale = std::sqrt(scale);
  std::vector<ScaledGroup> out;
  for (const RequestGroup& g : w.groups) {
    ScaledGroup s;
    s.count = scale_length(g.count, count_scale, 1);
    // A decode stays one token; a multi-token query keeps at least two (it stays extend/prefill).
    s.query_len = g.query_len <= 1 ? g.query_len : scale_length(g.query_len, scale, 2);
    s.context_min = scale_length(g.context_min, scale, 1);
    s.context_max = std::max(s.context_min, scale_length(g.context_max, scale, 1));
    out.push_back(s);
  }
  return out;
}

std::string shape_text(const std::vector<ScaledGroup>& groups) {
  std::ostringstream s;
  for (size_t i = 0; i < groups.size(); ++i) {
    const ScaledGroup& g = groups[i];
    if (i) s << " + ";
    s << g.count << "x[q" << g.query_len << ",c" << g.context_min;
    if (g.context_max != g.context_min) s << ".." << g.context_max;
    s << "]";
  }
  return s.str();
}

StepLengths draw_lengths(const std::vector<ScaledGroup>& groups, uint64_t seed) {
  std::mt19937_64 rng(seed);
  StepLengths step;
  for (const ScaledGroup& g : groups) {
    std::uniform_int_distribution<int> context(g.context_min, g.context_max);
    for (int i = 0; i < g.count; ++i) {
      step.query_lens.push_back(g.query_len);
      step.context_lens.push_back(g.context_min == g.context_max ? g.context_min : context(rng));
    }
  }
  return step;
}

double attended_pairs(int64_t query_len, int64_t context_len) {
  const double q = static_cast<double>(query_len);
  return q * static_cast<double>(context_len) + q * q / 2.0;
}

StepCost mha_cost(const StepLengths& step, const ModelPreset& m, DType cache_dtype,
                  DType act_dtype) {
  StepCost cost;
  double pairs = 0.0, context_tokens = 0.0, tokens = 0.0;
  for (size_t r = 0; r < step.query_lens.size(); ++r) {
    pairs += attended_pairs(step.query_lens[r], step.context_lens[r]);
    context_tokens += step.context_lens[r];
    tokens += step.query_lens[r];
  }
  cost.flops = 4.0 * pairs * m.num_q_heads * m.head_dim;
  cost.bytes =
      context_tokens * m.num_kv_heads * m.head_dim * 2.0 *
          static_cast<double>(dtype_size(cache_dtype)) +
      tokens * m.num_q_heads * m.head_dim * 2.0 * static_cast<double>(dtype_size(act_dtype));
  return cost;
}

StepCost mla_cost(const StepLengths& step, const ModelPreset& m, int decode_threshold,
                  DType cache_dtype, DType act_dtype) {
  StepCost cost;
  const double heads = m.num_q_heads;
  const double cache_bytes = static_cast<double>(dtype_size(cache_dtype));
  const double act_bytes = static_cast<double>(dtype_size(act_dtype));
  bool any_non_absorbed = false;
  for (size_t r = 0; r < step.query_lens.size(); ++r) {
    const int64_t q = step.query_lens[r];
    const int64_t c = step.context_lens[r];
    const double pairs = attended_pairs(q, c);
    cost.bytes += static_cast<double>(c) * kMlaEntryDim * cache_bytes;
    if (q <= decode_threshold) {
      cost.flops += 2.0 * heads * (kMlaEntryDim + kMlaLatentDim) * pairs;
      cost.bytes += static_cast<double>(q) * heads * (kMlaEntryDim + kMlaLatentDim) * act_bytes;
    } else {
      any_non_absorbed = true;
      cost.flops += 2.0 * heads * (kMlaQkDim + kMlaVDim) * pairs;
      cost.flops +=
          2.0 * kMlaLatentDim * heads * (kMlaNopeDim + kMlaVDim) * static_cast<double>(c + q);
      cost.bytes += static_cast<double>(q) * heads * (kMlaQkDim + kMlaVDim) * act_bytes;
    }
  }
  if (any_non_absorbed) {
    cost.bytes += static_cast<double>(kMlaLatentDim) * heads * (kMlaNopeDim + kMlaVDim) * act_bytes;
  }
  return cost;
}

}  // namespace tripath::cli
