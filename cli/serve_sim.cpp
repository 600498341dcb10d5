#include "serve_sim.h"

#include <chrono>

namespace tripath::cli {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// The lengths of the requests at positions [begin, end) of an ordered plan.
StepLengths path_lengths(const StepPlan& plan, const PathRange& range) {
  StepLengths l;
  for (int32_t i = range.begin; i < range.end; ++i) {
    l.query_lens.push_back(plan.query_lens[static_cast<size_t>(i)]);
    l.context_lens.push_back(plan.context_lens[static_cast<size_t>(i)]);
  }
  return l;
}

PathStats path_stats(const PathRange& range) {
  PathStats p;
  p.requests = range.num_requests();
  p.tokens = range.num_tokens();
  return p;
}

}  // namespace

StepInput step_input(const ScheduledBatch& batch, const SimConfig& config) {
  StepInput in;
  in.query_lens.reserve(batch.entries.size());
  in.context_lens.reserve(batch.entries.size());
  for (const BatchEntry& e : batch.entries) {
    in.query_lens.push_back(e.query_len);
    in.context_lens.push_back(e.context_len);
  }
  in.block_table = batch.block_table.data();
  in.block_table_stride = batch.block_table_stride;
  in.num_cache_blocks = config.scheduler.num_blocks;
  in.block_size = config.scheduler.block_size;
  in.num_work_units = config.num_work_units;
  in.num_kv_heads = config.num_kv_heads;
  in.split_waves = config.split_waves;
  return in;
}

StepPlan plan_ordered(const StepInput& input, std::vector<int32_t>& storage) {
  StepPlan plan = plan_step(input);
  if (plan.is_ordered) return plan;
  const StepInput ordered = ordered_input(input, plan, storage);
  return plan_step(ordered);
}

SimResult simulate(const SimConfig& config, std::vector<TraceRequest> trace, StepExecutor& executor,
                   const SimProgress& progress) {
  Scheduler scheduler(config.scheduler, std::move(trace));
  SimResult result;
  result.num_blocks = config.scheduler.num_blocks;
  double clock = 0.0;  // simulated seconds
  std::vector<int32_t> storage;
  while (!scheduler.done()) {
    StepRecord step;
    const Clock::time_point t0 = Clock::now();
    const ScheduledBatch batch = scheduler.schedule();
    step.schedule_ms = ms_since(t0);

    const Clock::time_point t1 = Clock::now();
    const StepPlan plan = plan_ordered(step_input(batch, config), storage);
    step.plan_ms = ms_since(t1);

    const StepTiming timing = executor.run(plan);
    step.device_ms = timing.device_ms;
    step.prepare_ms = timing.prepare_ms;
    step.graph = timing.graph;
    step.capture_ms = timing.capture_ms;
    step.preemptions = batch.preemptions;
    step.decode = path_stats(plan.decode);
    step.extend = path_stats(plan.extend);
    step.prefill = path_stats(plan.prefill);
    for (int32_t c : plan.context_lens) step.context_tokens += c;
    const bool bytes = config.attribute_bytes;
    const double weights[3] = {
        path_weight(config.model, path_lengths(plan, plan.decode), plan.decode.num_tokens(),
                    config.linear, bytes),
        path_weight(config.model, path_lengths(plan, plan.extend), 0, config.linear, bytes),
        path_weight(config.model, path_lengths(plan, plan.prefill), 0, config.linear, bytes)};
    apportion(step, weights);

    clock += (step.host_ms() + step.device_ms) * 1e-3;
    step.end_time = clock;
    scheduler.complete(batch, clock);
    if (config.check_invariants) scheduler.check_invariants();
    result.steps.push_back(step);
    if (progress) progress(scheduler, result.steps.back());
  }
  result.requests = scheduler.requests();
  result.prefix_forks = scheduler.prefix_forks();
  result.prefix_tokens_reused = scheduler.prefix_tokens_reused();
  std::vector<RequestTiming> timings;
  for (const RequestRecord& r : result.requests) {
    RequestTiming t;
    t.arrival = r.arrival;
    t.first_token = r.first_token;
    t.finish = r.finish;
    t.input_tokens = r.spec.input_len;
    t.output_tokens = r.generated;
    t.preemptions = r.preemptions;
    timings.push_back(t);
  }
  result.metrics = compute_metrics(timings, result.steps);
  return result;
}

}  // namespace tripath::cli
