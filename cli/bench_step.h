// One benchmark step with all its host memory: the drawn request lengths laid out as an engine
// would (requests shuffled, block tables a random permutation of a pool larger than needed, the
// batch reordered [decode | extend | prefill] through ordered_input), random non-zero inputs,
// and the paged cache holding every request's context, written by the reference cache writers.
// What run() writes (the step's own K/V or latent rows, and the output) is left to the backend.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "bench_workloads.h"
#include "tripath/attention.h"
#include "tripath/kv_cache.h"
#include "tripath/step_plan.h"
#include "tripath/tensor.h"

namespace tripath::cli {

// Zero-initialised host memory with a contiguous view of it. Movable, not copyable (the view
// points into the storage).
struct Buffer {
  std::vector<uint8_t> storage;
  TensorView view;

  Buffer() = default;
  Buffer(DType dtype, std::initializer_list<int64_t> shape);
  Buffer(DType dtype, const std::vector<int64_t>& shape);
  Buffer(Buffer&&) = default;
  Buffer& operator=(Buffer&&) = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

struct StepSettings {
  DType cache_dtype = DType::kBF16;
  DType act_dtype = DType::kBF16;  // q / new K, V / outputs (bf16 when the cache is fp8)
  KvLayout layout = KvLayout::kNHD;
  int block_size = 16;
  uint64_t seed = 0;
  int num_work_units = 1;    // StepInput::num_work_units: threads on a CPU, SMs on a GPU
  int split_waves = StepInput{}.split_waves;  // StepInput::split_waves (decode split-KV target)
  double pool_factor = 1.5;  // cache blocks allocated / blocks needed
};

// The planned step shared by MHA and MLA: the ordered StepInput and its plan.
struct PlannedStep {
  StepInput input;                     // ordered (is_ordered plan)
  std::vector<int32_t> block_storage;  // input.block_table points here
  StepPlan plan;
  bool input_was_shuffled = false;  // the generated order needed ordered_input
};
PlannedStep plan_random_step(const StepLengths& lengths, int num_kv_heads,
                             const StepSettings& settings);

struct MhaStep {
  PlannedStep step;
  AttentionParams params;
  Buffer q, k, v, out, sinks;
  Buffer cache_k, cache_v;
  AttentionInputs inputs;  // views of the buffers above; k/v given, so run() writes the cache
};
MhaStep build_mha_step(const ModelPreset& model, const StepLengths& lengths,
                       const StepSettings& settings);

struct MlaStep {
  PlannedStep step;
  MlaParams params;
  Buffer latent, cache;
  Buffer q_absorbed, out_absorbed;  // decode tokens
  Buffer q, kv_b_proj, out;         // extend + prefill tokens
  MlaInputs inputs;
};
MlaStep build_mla_step(const ModelPreset& model, const StepLengths& lengths,
                       const StepSettings& settings);

// Fills `t` with values uniform in +-[0.05, 1] x magnitude (never zero), from a seeded stream.
void fill_random(const TensorView& t, uint64_t seed, float magnitude);

}  // namespace tripath::cli
