// What `tripath serve` shows people: the results table, the step-time breakdown, the ratio table
// in the published form, the JSON of every run, SVG plots and a progress bar.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "serve_executor.h"
#include "serve_sim.h"

namespace tripath::cli {

// One simulation: a model, a trace, a concurrency, a backend.
struct RunResult {
  std::string model;
  bool is_mla = false;
  std::string trace;
  int64_t concurrency = 0;
  std::string backend;
  int layers = 0;
  int64_t num_blocks = 0;
  int block_size = 16;
  int64_t max_batched_tokens = 0;
  bool linear = false;
  ExecutorInfo executor;
  std::string unsupported;  // non-empty: the run could not be made or failed, and why
  SimResult sim;
  double wall_s = 0.0;  // host wall time of the whole simulation
};

// The published form: for each (model, trace, concurrency), every backend's TPS divided into
// the default backend's TPS (default: three_path for MHA, mla for MLA, when they ran; else the
// first backend that ran). "unified 1.05x" means the default is 1.05x faster than unified.
struct RatioRow {
  std::string model;
  std::string trace;
  int64_t concurrency = 0;
  std::string default_backend;
  double default_tps = 0.0;
  std::vector<std::pair<std::string, double>> ratios;  // backend, default TPS / its TPS
};
std::vector<RatioRow> ratio_rows(const std::vector<RunResult>& runs);
std::string default_backend_of(const std::vector<std::string>& ran, bool is_mla);

// "12.3", "1.23 s" style: milliseconds as ms below 10 s, seconds above.
std::string duration_text(double ms);

void print_results(std::ostream& out, const std::vector<RunResult>& runs);
void print_breakdown(std::ostream& out, const std::vector<RunResult>& runs);
void print_ratios(std::ostream& out, const std::vector<RatioRow>& rows);

nlohmann::json run_json(const RunResult& run);
nlohmann::json ratios_json(const std::vector<RatioRow>& rows);

// SVG plots (hand-written, no dependencies). tps_svg: one panel per (model, trace), a group of
// bars per concurrency, one bar per backend. breakdown_svg: one panel per (model, trace), a
// stacked bar per (concurrency, backend): decode, extend, prefill device time and host time.
std::string tps_svg(const std::vector<RunResult>& runs);
std::string breakdown_svg(const std::vector<RunResult>& runs);
// Writes serve_tps.svg and serve_breakdown.svg into `dir` (created if missing); returns the
// paths. Throws tripath::Error if they cannot be written.
std::vector<std::string> write_plots(const std::string& dir, const std::vector<RunResult>& runs);

// A progress bar on stderr. On a terminal it redraws one line in place (at most 10 times a
// second); otherwise it prints a line at each quarter. Disabled: silent.
class ProgressBar {
 public:
  ProgressBar(std::ostream& out, std::string label, int64_t total, bool enabled, bool terminal);
  void update(int64_t done, const std::string& status);
  void finish(const std::string& summary);

 private:
  std::ostream& out_;
  std::string label_;
  int64_t total_;
  bool enabled_, terminal_;
  int quarter_ = 0;
  double last_draw_s_ = -1.0;
  double start_s_ = 0.0;
  size_t last_width_ = 0;
};

}  // namespace tripath::cli
