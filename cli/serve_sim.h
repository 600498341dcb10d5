// The serving simulation loop: scheduler -> one plan per step -> every layer on a backend ->
// the simulated clock advances by what the step took.
//
// Per step: the scheduler picks the batch (serve_scheduler.h); the engine lays it out as
// [decode | extend | prefill] (plan_step on the scheduler's order, ordered_input, plan_step
// again: the activations are synthetic, so no token rows need moving); the executor runs the
// backend's prepare once and run() for every layer, timing the layers on the device; the clock
// advances by the host time (scheduling, planning, prepare) plus the measured device time, and
// the scheduler applies the step at that time (first tokens, finishes, new arrivals).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "serve_metrics.h"
#include "serve_model.h"
#include "serve_scheduler.h"
#include "serve_trace.h"
#include "tripath/step_plan.h"

namespace tripath::cli {

struct StepTiming {
  double device_ms = 0.0;   // every layer of the step (GPU: CUDA events; CPU: steady clock)
  double prepare_ms = 0.0;  // host time of the backend's prepare
  bool graph = false;       // ran as a CUDA-graph replay
  double capture_ms = 0.0;  // host time of the graph capture (outside the simulated clock)
};

// Runs one planned step on one backend, all layers. Implementations: serve_executor.h.
class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  virtual StepTiming run(const StepPlan& plan) = 0;
};

struct SimConfig {
  SchedulerConfig scheduler;
  ServeModel model;               // path attribution weights
  bool linear = false;            // the executor also runs the projection GEMMs
  bool attribute_bytes = true;    // path attribution: FLOPs and bytes (GPU) or FLOPs (CPU)
  int num_work_units = 1;         // StepInput::num_work_units: SMs on a GPU, threads on a CPU
  int num_kv_heads = 1;           // StepInput::num_kv_heads (MLA: 1)
  int split_waves = StepInput{}.split_waves;  // StepInput::split_waves (MLA: mla_split_waves)
  bool check_invariants = false;  // check the block manager after every step (tests)
};

struct SimResult {
  std::vector<RequestRecord> requests;
  std::vector<StepRecord> steps;
  ServeMetrics metrics;
  int64_t num_blocks = 0;
  int64_t prefix_forks = 0;
  int64_t prefix_tokens_reused = 0;
};

// Called after every step with the scheduler's state (progress bars).
using SimProgress = std::function<void(const Scheduler&, const StepRecord&)>;

SimResult simulate(const SimConfig& config, std::vector<TraceRequest> trace, StepExecutor& executor,
                   const SimProgress& progress = nullptr);

// The StepInput of a scheduled batch in the scheduler's order (exposed for tests).
StepInput step_input(const ScheduledBatch& batch, const SimConfig& config);
// plan_step; when the batch is not in [decode | extend | prefill] order, ordered_input and
// plan_step again. `storage` keeps the reordered block table alive.
StepPlan plan_ordered(const StepInput& input, std::vector<int32_t>& storage);

}  // namespace tripath::cli
