// What the serving simulation needs to know about a model beyond the attention geometry of
// bench_workloads.h: the hidden size and the projection GEMMs of one layer (`--linear`), at the
// shapes of the preset (for a -tp8 preset, one GPU's shard), and the cost model that splits a
// measured step time between the decode, extend and prefill paths.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_workloads.h"

namespace tripath::cli {

// One projection GEMM of a layer: rows = tokens (all of the step's, or only its decode tokens),
// [rows, k] x [k, n] per batch entry; batch > 1 is a strided-batched GEMM (one per head).
struct GemmShape {
  const char* name;
  int64_t k;
  int64_t n;
  int batch;
  bool decode_only;       // MLA's absorption GEMMs run on the decode tokens only
  bool before_attention;  // QKV side (true) or output side (false)
};

struct ServeModel {
  const ModelPreset* preset = nullptr;
  int hidden = 0;                // model hidden size (not sharded under tensor parallelism)
  int q_lora_rank = 0;           // MLA only
  std::vector<GemmShape> gemms;  // one layer's projections, in execution order
};

// The serving view of a bench preset; throws tripath::Error for an unknown name.
ServeModel serve_model(const std::string& name);

// FLOPs of one layer's projection GEMMs for a step of `tokens` tokens, `decode_tokens` of them
// decode (2 per multiply-add).
double linear_flops(const ServeModel& model, int64_t tokens, int64_t decode_tokens);
// Bytes of one layer's projection weights (bf16), read once per step.
double linear_weight_bytes(const ServeModel& model);

// The nominal H200 rates the path attribution weighs FLOPs and bytes with (datasheet: dense
// bf16 989 TFLOP/s, HBM3e 4.8 TB/s). Only their ratio matters: it turns a path's FLOPs and
// bytes into one "time-equivalent" weight.
inline constexpr double kNominalFlops = 989e12;
inline constexpr double kNominalBytesPerSecond = 4.8e12;

// Time-equivalent weight of one path's share of a step: its attention FLOPs and bytes (the
// BENCH.md formulas of bench_workloads.h, for the requests of that path) plus, with --linear,
// the projection FLOPs of its tokens. Without count_bytes, FLOPs alone: the CPU reference is
// compute-bound on every path, so bytes at GPU rates would overweight its decodes.
double path_weight(const ServeModel& model, const StepLengths& lengths, int64_t decode_tokens,
                   bool with_linear, bool count_bytes = true);

}  // namespace tripath::cli
