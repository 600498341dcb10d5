#include "bench_timer.h"

#include <algorithm>

#include "tripath/error.h"

namespace tripath::cli {

std::unique_ptr<Timer> make_timer(Device device) {
  if (device == Device::kCPU) return std::make_unique<SteadyClockTimer>();
  throw Error(
      "tripath bench: timing a CUDA backend needs the CUDA-event timer, which this "
      "build of the CLI does not have yet");
}

TimingStats summarize(std::vector<double> times_ms) {
  TimingStats stats;
  stats.times_ms = times_ms;
  if (times_ms.empty()) return stats;
  std::sort(times_ms.begin(), times_ms.end());
  const size_t n = times_ms.size();
  stats.median_ms = n % 2 ? times_ms[n / 2] : 0.5 * (times_ms[n / 2 - 1] + times_ms[n / 2]);
  stats.min_ms = times_ms.front();
  stats.max_ms = times_ms.back();
  return stats;
}

}  // namespace tripath::cli
