// Helpers of the serving-simulation tests: drive a Scheduler to completion with a fake clock,
// recording every batch and the state each scheduled request was in when it was picked.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "serve_scheduler.h"
#include "serve_trace.h"

namespace tripath::cli::testing {

struct EntryState {
  int64_t computed = 0;  // before the step
  int64_t generated = 0;
  int64_t remaining = 0;
};

struct DrivenStep {
  ScheduledBatch batch;
  std::vector<EntryState> before;  // per entry
  int64_t in_flight = 0;
  int64_t free_blocks = 0;
};

// Runs the scheduler until every request finished, one simulated second per step, checking the
// block manager after every step. Fails the test (and stops) past max_steps.
inline std::vector<DrivenStep> drive(Scheduler& s, int64_t max_steps = 200000) {
  std::vector<DrivenStep> steps;
  double t = 0.0;
  while (!s.done()) {
    DrivenStep d;
    d.batch = s.schedule();
    EXPECT_FALSE(d.batch.entries.empty()) << "an empty batch before the end";
    for (const BatchEntry& e : d.batch.entries) {
      const RequestRecord& r = s.requests()[static_cast<size_t>(e.request)];
      d.before.push_back({r.computed, r.generated, r.remaining()});
    }
    d.free_blocks = s.allocator().num_free();
    t += 1.0;
    s.complete(d.batch, t);
    s.check_invariants();
    d.in_flight = s.in_flight();
    steps.push_back(std::move(d));
    if (static_cast<int64_t>(steps.size()) > max_steps) {
      ADD_FAILURE() << "no end after " << max_steps << " steps";
      break;
    }
  }
  return steps;
}

inline std::vector<TraceRequest> uniform_trace(int64_t n, int64_t isl, int64_t osl) {
  TraceSpec spec;
  spec.kind = TraceKind::kUniform;
  spec.num_requests = n;
  spec.isl = isl;
  spec.osl = osl;
  return generate_trace(spec);
}

}  // namespace tripath::cli::testing
