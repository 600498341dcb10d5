// The report: the ratio table in the published form, the text tables, the JSON of a run and
// the SVG plots (well-formed enough: one bar per run, escaped text).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "serve_report.h"

namespace tripath::cli {
namespace {

RunResult run(const std::string& model, bool mla, int64_t concurrency, const std::string& backend,
              double tps) {
  RunResult r;
  r.model = model;
  r.is_mla = mla;
  r.trace = "uniform";
  r.concurrency = concurrency;
  r.backend = backend;
  r.sim.metrics.output_tps = tps;
  r.sim.metrics.requests = 4;
  r.sim.metrics.device_ms = 1000.0;
  r.sim.metrics.decode = {4, 40, 600.0, 10};
  r.sim.metrics.prefill = {4, 400, 400.0, 2};
  return r;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(Report, RatiosInThePublishedForm) {
  // MI300X-like numbers: three_path 1.05x unified, 3.82x two_path.
  const std::vector<RunResult> runs = {
      run("qwen3-235b-tp8", false, 64, "unified", 1000.0),
      run("qwen3-235b-tp8", false, 64, "three_path", 1050.0),
      run("qwen3-235b-tp8", false, 64, "two_path", 1050.0 / 3.82),
      run("deepseek-r1-tp8", true, 64, "mla_baseline", 500.0),
      run("qwen3-235b-tp8", false, 128, "unified", 1500.0),
  };
  const std::vector<RatioRow> rows = ratio_rows(runs);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].default_backend, "three_path");
  EXPECT_DOUBLE_EQ(rows[0].default_tps, 1050.0);
  ASSERT_EQ(rows[0].ratios.size(), 3u);
  EXPECT_EQ(rows[0].ratios[0].first, "unified");
  EXPECT_NEAR(rows[0].ratios[0].second, 1.05, 1e-12);
  EXPECT_NEAR(rows[0].ratios[1].second, 1.0, 1e-12);
  EXPECT_NEAR(rows[0].ratios[2].second, 3.82, 1e-12);
  // Without the default backend, the first that ran is the reference point.
  EXPECT_EQ(rows[1].model, "deepseek-r1-tp8");
  EXPECT_EQ(rows[1].default_backend, "mla_baseline");
  EXPECT_EQ(rows[2].concurrency, 128);
  EXPECT_EQ(rows[2].default_backend, "unified");
  EXPECT_EQ(default_backend_of({"mla_baseline", "mla"}, true), "mla");

  std::ostringstream text;
  print_ratios(text, rows);
  EXPECT_NE(text.str().find("3.82x"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("1.05x"), std::string::npos) << text.str();
  const nlohmann::json j = ratios_json(rows);
  EXPECT_NEAR(j[0]["default_tps_over_backend_tps"]["two_path"].get<double>(), 3.82, 1e-12);
}

TEST(Report, TablesShowUnsupportedRuns) {
  std::vector<RunResult> runs = {run("qwen3-235b-tp8", false, 64, "unified", 1000.0)};
  RunResult bad = run("qwen3-235b-tp8", false, 64, "two_path", 0.0);
  bad.unsupported = "no GPU";
  runs.push_back(bad);
  std::ostringstream out;
  print_results(out, runs);
  print_breakdown(out, runs);
  EXPECT_NE(out.str().find("not run: no GPU"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("600 ms (60.0%)"), std::string::npos) << out.str();
  EXPECT_EQ(ratio_rows(runs).size(), 1u);
  EXPECT_EQ(run_json(bad)["not_run"], "no GPU");
}

TEST(Report, RunJsonHasTheMetricsAndSteps) {
  RunResult r = run("qwen3-235b-tp8", false, 64, "reference", 123.0);
  StepRecord s;
  s.device_ms = 5.0;
  s.decode.tokens = 3;
  r.sim.steps = {s, s};
  const nlohmann::json j = run_json(r);
  EXPECT_EQ(j["metrics"]["output_tps"], 123.0);
  EXPECT_EQ(j["steps"]["rows"].size(), 2u);
  EXPECT_EQ(j["steps"]["columns"][0], "decode_tokens");
  EXPECT_EQ(j["steps"]["rows"][0][0], 3);
  EXPECT_DOUBLE_EQ(j["breakdown"]["decode"]["share_of_device_time"].get<double>(), 0.6);
}

TEST(Report, SvgPlots) {
  std::vector<RunResult> runs = {run("qwen3-235b-tp8", false, 64, "unified", 1000.0),
                                 run("qwen3-235b-tp8", false, 64, "two_path", 300.0),
                                 run("qwen3-235b-tp8", false, 128, "unified", 1400.0),
                                 run("deepseek-r1-tp8", true, 64, "a<b&c", 10.0)};
  const std::string tps = tps_svg(runs);
  EXPECT_EQ(tps.rfind("<svg", 0), 0u);
  EXPECT_NE(tps.find("</svg>"), std::string::npos);
  // Four bars (one per run) plus legend swatches and the background.
  EXPECT_EQ(count(tps, "<rect"), 4u + 3u + 1u);
  EXPECT_NE(tps.find("a&lt;b&amp;c"), std::string::npos);
  EXPECT_EQ(tps.find("a<b&c"), std::string::npos);
  EXPECT_NE(tps.find(">c=128<"), std::string::npos);
  const std::string breakdown = breakdown_svg(runs);
  // Decode and prefill segments per run (extend and host are zero here), four legend swatches.
  EXPECT_EQ(count(breakdown, "<rect"), 4u * 2u + 4u + 1u);

  const std::string dir =
      (std::filesystem::temp_directory_path() / "tripath_serve_plot_test").string();
  std::filesystem::remove_all(dir);
  const std::vector<std::string> paths = write_plots(dir + "/nested", runs);
  ASSERT_EQ(paths.size(), 2u);
  for (const std::string& p : paths) {
    std::ifstream in(p);
    std::stringstream content;
    content << in.rdbuf();
    EXPECT_NE(content.str().find("</svg>"), std::string::npos) << p;
  }
  std::filesystem::remove_all(dir);
}

TEST(Report, DurationText) {
  EXPECT_EQ(duration_text(12.345), "12.3 ms");
  EXPECT_EQ(duration_text(950.0), "950 ms");
  EXPECT_EQ(duration_text(12500.0), "12.5 s");
}

}  // namespace
}  // namespace tripath::cli
