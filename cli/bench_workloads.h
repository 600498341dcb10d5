// The benchmark workloads and model geometries of shared/BENCH.md as data, the scaling that
// shrinks them for a CPU, and the byte and FLOP formulas every reported rate comes from. Keep
// this file and BENCH.md in step: a number means the same thing on every commit and machine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tripath/dtype.h"

namespace tripath::cli {

// Attention of one layer of a model (BENCH.md "Model geometries").
struct ModelPreset {
  const char* name;
  bool is_mla;
  int num_q_heads;   // MLA: heads
  int num_kv_heads;  // MLA: 1 (every head reads the one latent row)
  int head_dim;      // MLA: 576 (absorbed q/k; 512 of it is the value)
  float softcap;     // 0: off
  int window_left;   // sliding window of the windowed layers; -1: none
  bool has_sinks;    // per-head attention sinks
  int layers;
  const char* note;
};

// `count` requests with `query_len` new tokens each and a context drawn uniformly from
// [context_min, context_max] (equal bounds: fixed).
struct RequestGroup {
  int count;
  int query_len;
  int context_min;
  int context_max;
};

// One step workload (BENCH.md "Step workloads"): one backend call for one layer.
struct WorkloadSpec {
  const char* id;
  bool is_mla;
  const char* default_model;
  std::vector<RequestGroup> groups;
  const char* stresses;
};

const std::vector<ModelPreset>& model_presets();
const std::vector<WorkloadSpec>& workloads();
const ModelPreset* find_model(const std::string& name);    // nullptr if unknown
const WorkloadSpec* find_workload(const std::string& id);  // nullptr if unknown
std::vector<std::string> model_names();
std::vector<std::string> workload_ids();

// --scale=F shrinks a workload: every context and query length times F, every request count
// times sqrt(F) (rounded, at least 1; a query of more than one token stays more than one token,
// so no request changes class). Heads and head dims are kept: the per-token work is the real one.
// F = 1/64 gives lengths / 64 and request counts / 8.
struct ScaledGroup {
  int count;
  int query_len;
  int context_min;
  int context_max;
};
std::vector<ScaledGroup> scale_groups(const WorkloadSpec& w, double scale);
// "8x[q1,c64] + 1x[q32,c256] + 1x[q32,c0]"; a context range prints as c16..128.
std::string shape_text(const std::vector<ScaledGroup>& groups);

// The drawn lengths of one step, in generation order (the groups one after another).
struct StepLengths {
  std::vector<int32_t> query_lens;
  std::vector<int32_t> context_lens;
};
// Contexts of a range are drawn uniformly with a generator seeded by `seed` (BENCH.md: seed 0).
StepLengths draw_lengths(const std::vector<ScaledGroup>& groups, uint64_t seed);

// ---- Cost formulas (BENCH.md "Metrics and floors") ----
// Attended (query, key) pairs of a request: every new token sees the whole context and, causally,
// the new tokens up to itself; the causal part is counted as q^2/2 (the convention of the
// prefill FLOP formula, "halved for the causal part").
double attended_pairs(int64_t query_len, int64_t context_len);

struct StepCost {
  double bytes = 0.0;  // memory traffic model (the decode bytes formula)
  double flops = 0.0;  // arithmetic model
};

// MHA/GQA: FLOPs = 4 x sum_r pairs_r x num_q_heads x head_dim (QK^T and PV, 2 FLOPs per MAC).
// Bytes = sum_r context_len_r x num_kv_heads x head_dim x 2 (K and V) x bytes(cache dtype)
//         + the query and the output: num_tokens x num_q_heads x head_dim x 2 x bytes(act).
// Windows and soft-caps are not applied: the bench runs the model's full-attention layer.
StepCost mha_cost(const StepLengths& step, const ModelPreset& m, DType cache_dtype,
                  DType act_dtype);

// MLA, decode requests (absorbed): FLOPs = 2 x heads x (576 + 512) per (query token, key) pair;
//   bytes = 576 x bytes(cache dtype) per context token + q (576) and out (512) per head and token.
// Extend/prefill requests (non-absorbed, q/k 192, v 128): FLOPs = 2 x heads x (192 + 128) per
//   pair, plus the kv_b_proj decompression 2 x 512 x heads x 256 per key token (context + new);
//   bytes = 576 x bytes(cache) per context token + q (192) and out (128) per head and token, plus
//   kv_b_proj (512 x heads x 256) once when any such request exists.
StepCost mla_cost(const StepLengths& step, const ModelPreset& m, int decode_threshold,
                  DType cache_dtype, DType act_dtype);

}  // namespace tripath::cli
