// Timing of one backend call. The bench loop only sees Timer, so the CUDA-event timer (record an
// event before and after the call on the backend's stream, synchronize on the second, read the
// elapsed time) slots in next to the host clock without touching the loop.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "tripath/tensor.h"

namespace tripath::cli {

class Timer {
 public:
  virtual ~Timer() = default;
  virtual const char* name() const = 0;
  virtual void start() = 0;
  // Milliseconds since start(), after the timed work has finished.
  virtual double stop_ms() = 0;
};

// The host clock: right for CPU backends, whose run() returns when the work is done.
class SteadyClockTimer final : public Timer {
 public:
  const char* name() const override { return "std::chrono::steady_clock"; }
  void start() override { begin_ = std::chrono::steady_clock::now(); }
  double stop_ms() override {
    const auto end = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::milli>(end - begin_).count();
  }

 private:
  std::chrono::steady_clock::time_point begin_;
};

// The timer for work running on `device` (CPU only for now: a CUDA device throws tripath::Error
// until the CUDA-event timer lands).
std::unique_ptr<Timer> make_timer(Device device);

struct TimingStats {
  std::vector<double> times_ms;  // in run order
  double median_ms = 0.0;
  double min_ms = 0.0;
  double max_ms = 0.0;
};
TimingStats summarize(std::vector<double> times_ms);

// Runs `call` `warmup` times untimed, then `repeats` times timed one by one.
template <typename Call>
TimingStats time_calls(Timer& timer, int warmup, int repeats, Call&& call) {
  for (int i = 0; i < warmup; ++i) call();
  std::vector<double> times;
  times.reserve(static_cast<size_t>(repeats));
  for (int i = 0; i < repeats; ++i) {
    timer.start();
    call();
    times.push_back(timer.stop_ms());
  }
  return summarize(std::move(times));
}

}  // namespace tripath::cli
