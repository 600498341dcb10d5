// Metrics of one serving run, computed from the per-request timeline and the per-step records:
//   output TPS   output tokens of every request / the run's duration (t = 0 to the last finish)
//   TTFT         first output token - arrival (the time the client sent the request)
//   TPOT         (finish - first token) / (output tokens - 1), for requests with >= 2 outputs
//   percentiles  linear interpolation between order statistics (numpy's default)
// and the step-time breakdown: each step's measured device time apportioned to its decode,
// extend and prefill paths (by the weights of serve_model.h), plus the host time the simulator
// spends per step (scheduling, planning, the backend's prepare).
#pragma once

#include <cstdint>
#include <vector>

namespace tripath::cli {

// The per-path numbers of one step, or their sums over a run.
struct PathStats {
  int64_t requests = 0;
  int64_t tokens = 0;
  double ms = 0.0;    // apportioned device time
  int64_t steps = 0;  // steps with at least one request on this path (sums only)
};

struct StepRecord {
  PathStats decode, extend, prefill;
  int64_t context_tokens = 0;  // KV tokens attended from the cache (sum of context_len)
  double device_ms = 0.0;      // measured time of the step's layers (GPU: CUDA events)
  double schedule_ms = 0.0;    // host: the scheduler
  double plan_ms = 0.0;        // host: plan_step, ordered_input, plan_step
  double prepare_ms = 0.0;     // host: the backend's prepare (plan upload)
  bool graph = false;          // the layers ran as one CUDA-graph replay
  double capture_ms = 0.0;     // host: graph capture + instantiation (not on the simulated clock)
  int32_t preemptions = 0;
  double end_time = 0.0;  // simulated clock at the end of the step, seconds
  double host_ms() const { return schedule_ms + plan_ms + prepare_ms; }
};

struct RequestTiming {
  double arrival = 0.0;  // seconds
  double first_token = 0.0;
  double finish = 0.0;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  int32_t preemptions = 0;
};

struct Distribution {
  int64_t count = 0;
  double mean = 0.0;
  double p50 = 0.0;
  double p99 = 0.0;
  double max = 0.0;
};

// p in [0, 100]; `values` need not be sorted. 0 for no values.
double percentile(std::vector<double> values, double p);
Distribution distribution(const std::vector<double>& values);

struct ServeMetrics {
  int64_t requests = 0;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  double duration_s = 0.0;
  double output_tps = 0.0;
  double total_tps = 0.0;  // (input + output tokens) / duration
  Distribution ttft_ms;
  Distribution tpot_ms;
  Distribution latency_ms;  // finish - arrival
  int64_t steps = 0;
  int64_t preemptions = 0;
  PathStats decode, extend, prefill;
  double device_ms = 0.0;
  double schedule_ms = 0.0, plan_ms = 0.0, prepare_ms = 0.0;
  double host_ms = 0.0;
  double overhead_pct = 0.0;  // host_ms / device_ms x 100
  int64_t graph_steps = 0;
  double capture_ms = 0.0;
  int64_t max_step_tokens = 0;
};

ServeMetrics compute_metrics(const std::vector<RequestTiming>& requests,
                             const std::vector<StepRecord>& steps);

// Splits step.device_ms over its paths in proportion to `weights` (decode, extend, prefill);
// all-zero weights split by token counts.
void apportion(StepRecord& step, const double weights[3]);

}  // namespace tripath::cli
