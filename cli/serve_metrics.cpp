#include "serve_metrics.h"

#include <algorithm>
#include <cmath>

namespace tripath::cli {

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * frac;
}

Distribution distribution(const std::vector<double>& values) {
  Distribution d;
  d.count = static_cast<int64_t>(values.size());
  if (values.empty()) return d;
  double sum = 0.0;
  for (double v : values) sum += v;
  d.mean = sum / static_cast<double>(values.size());
  d.p50 = percentile(values, 50.0);
  d.p99 = percentile(values, 99.0);
  d.max = *std::max_element(values.begin(), values.end());
  return d;
}

void apportion(StepRecord& step, const double weights[3]) {
  PathStats* paths[3] = {&step.decode, &step.extend, &step.prefill};
  double total = weights[0] + weights[1] + weights[2];
  double share[3] = {weights[0], weights[1], weights[2]};
  if (!(total > 0.0)) {
    for (int i = 0; i < 3; ++i) share[i] = static_cast<double>(paths[i]->tokens);
    total = share[0] + share[1] + share[2];
  }
  for (int i = 0; i < 3; ++i) paths[i]->ms = total > 0.0 ? step.device_ms * share[i] / total : 0.0;
}

ServeMetrics compute_metrics(const std::vector<RequestTiming>& requests,
                             const std::vector<StepRecord>& steps) {
  ServeMetrics m;
  m.requests = static_cast<int64_t>(requests.size());
  std::vector<double> ttft, tpot, latency;
  for (const RequestTiming& r : requests) {
    m.input_tokens += r.input_tokens;
    m.output_tokens += r.output_tokens;
    m.duration_s = std::max(m.duration_s, r.finish);
    ttft.push_back((r.first_token - r.arrival) * 1e3);
    latency.push_back((r.finish - r.arrival) * 1e3);
    if (r.output_tokens >= 2) {
      tpot.push_back((r.finish - r.first_token) * 1e3 / static_cast<double>(r.output_tokens - 1));
    }
  }
  if (m.duration_s > 0.0) {
    m.output_tps = static_cast<double>(m.output_tokens) / m.duration_s;
    m.total_tps = static_cast<double>(m.input_tokens + m.output_tokens) / m.duration_s;
  }
  m.ttft_ms = distribution(ttft);
  m.tpot_ms = distribution(tpot);
  m.latency_ms = distribution(latency);

  m.steps = static_cast<int64_t>(steps.size());
  for (const StepRecord& s : steps) {
    m.preemptions += s.preemptions;
    const PathStats* from[3] = {&s.decode, &s.extend, &s.prefill};
    PathStats* to[3] = {&m.decode, &m.extend, &m.prefill};
    for (int i = 0; i < 3; ++i) {
      to[i]->requests += from[i]->requests;
      to[i]->tokens += from[i]->tokens;
      to[i]->ms += from[i]->ms;
      if (from[i]->requests > 0) ++to[i]->steps;
    }
    m.device_ms += s.device_ms;
    m.schedule_ms += s.schedule_ms;
    m.plan_ms += s.plan_ms;
    m.prepare_ms += s.prepare_ms;
    if (s.graph) ++m.graph_steps;
    m.capture_ms += s.capture_ms;
    m.max_step_tokens =
        std::max(m.max_step_tokens, s.decode.tokens + s.extend.tokens + s.prefill.tokens);
  }
  m.host_ms = m.schedule_ms + m.plan_ms + m.prepare_ms;
  m.overhead_pct = m.device_ms > 0.0 ? 100.0 * m.host_ms / m.device_ms : 0.0;
  return m;
}

}  // namespace tripath::cli
