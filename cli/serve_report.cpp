#include "serve_report.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <set>

namespace tripath::cli {

namespace {

std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", decimals, value);
  return text;
}

// About three significant digits.
std::string number_text(double value) {
  const double a = std::fabs(value);
  return fixed(value, a >= 100.0 ? 0 : (a >= 10.0 ? 1 : (a >= 1.0 ? 2 : 3)));
}

std::string pct_text(double part, double whole) {
  return whole > 0.0 ? fixed(100.0 * part / whole, 1) + "%" : "-";
}

// A plain text table: left-aligned text columns, right-aligned number columns.
class TextTable {
 public:
  TextTable(std::vector<std::string> header, size_t first_number_column)
      : header_(std::move(header)), first_number_(first_number_column) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::ostream& out) const {
    std::vector<size_t> width(header_.size(), 0);
    for (size_t c = 0; c < header_.size(); ++c) width[c] = header_[c].size();
    for (const auto& row : rows_)
      for (size_t c = 0; c < row.size() && c < width.size(); ++c)
        width[c] = std::max(width[c], row[c].size());
    auto line = [&](const std::vector<std::string>& row) {
      std::string s;
      for (size_t c = 0; c < row.size(); ++c) {
        const std::string pad(width[c] - row[c].size(), ' ');
        s += c >= first_number_ ? pad + row[c] : row[c] + pad;
        if (c + 1 < row.size()) s += "  ";
      }
      while (!s.empty() && s.back() == ' ') s.pop_back();
      out << s << "\n";
    };
    line(header_);
    std::vector<std::string> rule;
    for (size_t w : width) rule.emplace_back(w, '-');
    line(rule);
    for (const auto& row : rows_) line(row);
  }

 private:
  std::vector<std::string> header_;
  size_t first_number_;
  std::vector<std::vector<std::string>> rows_;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

nlohmann::json distribution_json(const Distribution& d) {
  return {{"count", d.count}, {"mean", d.mean}, {"p50", d.p50}, {"p99", d.p99}, {"max", d.max}};
}

nlohmann::json path_json(const PathStats& p, double device_ms) {
  return {{"requests", p.requests},
          {"tokens", p.tokens},
          {"steps", p.steps},
          {"tokens_per_step", p.steps > 0 ? static_cast<double>(p.tokens) / p.steps : 0.0},
          {"ms", p.ms},
          {"share_of_device_time", device_ms > 0.0 ? p.ms / device_ms : 0.0}};
}

}  // namespace

std::string duration_text(double ms) {
  if (ms >= 10000.0) return number_text(ms / 1000.0) + " s";
  return number_text(ms) + " ms";
}

std::string default_backend_of(const std::vector<std::string>& ran, bool is_mla) {
  const char* preferred = is_mla ? "mla" : "three_path";
  if (std::find(ran.begin(), ran.end(), preferred) != ran.end()) return preferred;
  return ran.empty() ? "" : ran.front();
}

std::vector<RatioRow> ratio_rows(const std::vector<RunResult>& runs) {
  std::vector<RatioRow> rows;
  std::vector<const RunResult*> done;
  for (const RunResult& r : runs)
    if (r.unsupported.empty()) done.push_back(&r);
  std::set<size_t> used;
  for (size_t i = 0; i < done.size(); ++i) {
    if (used.count(i)) continue;
    const RunResult& first = *done[i];
    std::vector<const RunResult*> group;
    for (size_t j = i; j < done.size(); ++j) {
      const RunResult& r = *done[j];
      if (r.model == first.model && r.trace == first.trace && r.concurrency == first.concurrency) {
        group.push_back(&r);
        used.insert(j);
      }
    }
    std::vector<std::string> names;
    for (const RunResult* r : group) names.push_back(r->backend);
    RatioRow row;
    row.model = first.model;
    row.trace = first.trace;
    row.concurrency = first.concurrency;
    row.default_backend = default_backend_of(names, first.is_mla);
    for (const RunResult* r : group)
      if (r->backend == row.default_backend) row.default_tps = r->sim.metrics.output_tps;
    for (const RunResult* r : group) {
      const double tps = r->sim.metrics.output_tps;
      row.ratios.emplace_back(r->backend, tps > 0.0 ? row.default_tps / tps : 0.0);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

void print_results(std::ostream& out, const std::vector<RunResult>& runs) {
  TextTable t({"model", "trace", "conc", "backend", "requests", "out tok/s", "TTFT mean",
               "TTFT p99", "TPOT mean", "TPOT p99", "steps", "preempt", "host %", "graph steps"},
              4);
  for (const RunResult& r : runs) {
    std::vector<std::string> row = {r.model, r.trace, std::to_string(r.concurrency), r.backend};
    if (!r.unsupported.empty()) {
      row.push_back("not run: " + r.unsupported);
      t.add(row);
      continue;
    }
    const ServeMetrics& m = r.sim.metrics;
    row.push_back(std::to_string(m.requests));
    row.push_back(number_text(m.output_tps));
    row.push_back(duration_text(m.ttft_ms.mean));
    row.push_back(duration_text(m.ttft_ms.p99));
    row.push_back(number_text(m.tpot_ms.mean) + " ms");
    row.push_back(number_text(m.tpot_ms.p99) + " ms");
    row.push_back(std::to_string(m.steps));
    row.push_back(std::to_string(m.preemptions));
    row.push_back(fixed(m.overhead_pct, 2));
    row.push_back(r.executor.on_gpu ? std::to_string(m.graph_steps) : "-");
    t.add(row);
  }
  t.print(out);
}

void print_breakdown(std::ostream& out, const std::vector<RunResult>& runs) {
  TextTable t({"model", "trace", "conc", "backend", "decode tok/step", "extend tok/step",
               "prefill tok/step", "decode", "extend", "prefill", "host"},
              4);
  for (const RunResult& r : runs) {
    if (!r.unsupported.empty()) continue;
    const ServeMetrics& m = r.sim.metrics;
    const double total = m.device_ms + m.host_ms;
    auto per_step = [](const PathStats& p) {
      return p.steps > 0 ? number_text(static_cast<double>(p.tokens) / p.steps) + " x" +
                               std::to_string(p.steps)
                         : std::string("-");
    };
    auto share = [&](double ms) { return duration_text(ms) + " (" + pct_text(ms, total) + ")"; };
    t.add({r.model, r.trace, std::to_string(r.concurrency), r.backend, per_step(m.decode),
           per_step(m.extend), per_step(m.prefill), share(m.decode.ms), share(m.extend.ms),
           share(m.prefill.ms), share(m.host_ms)});
  }
  t.print(out);
}

void print_ratios(std::ostream& out, const std::vector<RatioRow>& rows) {
  std::vector<std::string> backends;
  for (const RatioRow& row : rows)
    for (const auto& [name, ratio] : row.ratios)
      if (std::find(backends.begin(), backends.end(), name) == backends.end())
        backends.push_back(name);
  std::vector<std::string> header = {"model", "trace", "conc", "default", "default tok/s"};
  header.insert(header.end(), backends.begin(), backends.end());
  TextTable t(header, 4);
  for (const RatioRow& row : rows) {
    std::vector<std::string> line = {row.model, row.trace, std::to_string(row.concurrency),
                                     row.default_backend, number_text(row.default_tps)};
    for (const std::string& b : backends) {
      std::string cell = "-";
      for (const auto& [name, ratio] : row.ratios)
        if (name == b) cell = fixed(ratio, 2) + "x";
      line.push_back(cell);
    }
    t.add(line);
  }
  t.print(out);
}

nlohmann::json run_json(const RunResult& r) {
  nlohmann::json j;
  j["model"] = r.model;
  j["kind"] = r.is_mla ? "mla" : "mha";
  j["trace"] = r.trace;
  j["concurrency"] = r.concurrency;
  j["backend"] = r.backend;
  j["layers"] = r.layers;
  j["num_blocks"] = r.num_blocks;
  j["block_size"] = r.block_size;
  j["max_batched_tokens"] = r.max_batched_tokens;
  j["linear"] = r.linear && r.executor.on_gpu;
  if (!r.unsupported.empty()) {
    j["not_run"] = r.unsupported;
    return j;
  }
  j["device"] = r.executor.on_gpu ? "cuda" : "cpu";
  j["timer"] = r.executor.timer;
  j["kv_cache_bytes"] = r.executor.cache_bytes;
  if (r.executor.weight_bytes > 0) j["linear_weight_bytes"] = r.executor.weight_bytes;
  if (!r.executor.notes.empty()) j["notes"] = r.executor.notes;
  j["wall_s"] = r.wall_s;
  const ServeMetrics& m = r.sim.metrics;
  j["metrics"] = {{"requests", m.requests},
                  {"input_tokens", m.input_tokens},
                  {"output_tokens", m.output_tokens},
                  {"duration_s", m.duration_s},
                  {"output_tps", m.output_tps},
                  {"total_tps", m.total_tps},
                  {"ttft_ms", distribution_json(m.ttft_ms)},
                  {"tpot_ms", distribution_json(m.tpot_ms)},
                  {"latency_ms", distribution_json(m.latency_ms)},
                  {"steps", m.steps},
                  {"max_step_tokens", m.max_step_tokens},
                  {"preemptions", m.preemptions},
                  {"prefix_forks", r.sim.prefix_forks},
                  {"prefix_tokens_reused", r.sim.prefix_tokens_reused}};
  j["breakdown"] = {{"device_ms", m.device_ms},
                    {"decode", path_json(m.decode, m.device_ms)},
                    {"extend", path_json(m.extend, m.device_ms)},
                    {"prefill", path_json(m.prefill, m.device_ms)}};
  j["overhead"] = {{"schedule_ms", m.schedule_ms},
                   {"plan_ms", m.plan_ms},
                   {"prepare_ms", m.prepare_ms},
                   {"host_ms", m.host_ms},
                   {"pct_of_device_time", m.overhead_pct}};
  j["cuda_graphs"] = {{"graph_steps", m.graph_steps}, {"capture_ms", m.capture_ms}};
  nlohmann::json steps = nlohmann::json::array();
  for (const StepRecord& s : r.sim.steps) {
    steps.push_back({s.decode.tokens, s.extend.tokens, s.prefill.tokens, s.decode.requests,
                     s.extend.requests, s.prefill.requests, s.context_tokens, s.device_ms,
                     s.host_ms(), s.graph ? 1 : 0, s.preemptions, s.end_time});
  }
  j["steps"] = {{"columns",
                 {"decode_tokens", "extend_tokens", "prefill_tokens", "decode_requests",
                  "extend_requests", "prefill_requests", "context_tokens", "device_ms", "host_ms",
                  "graph", "preemptions", "end_s"}},
                {"rows", std::move(steps)}};
  nlohmann::json requests = nlohmann::json::array();
  for (const RequestRecord& q : r.sim.requests) {
    requests.push_back(
        {q.arrival, q.first_token, q.finish, q.spec.input_len, q.generated, q.preemptions});
  }
  j["requests"] = {
      {"columns",
       {"arrival_s", "first_token_s", "finish_s", "input_tokens", "output_tokens", "preemptions"}},
      {"rows", std::move(requests)}};
  return j;
}

nlohmann::json ratios_json(const std::vector<RatioRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const RatioRow& row : rows) {
    nlohmann::json ratios = nlohmann::json::object();
    for (const auto& [name, ratio] : row.ratios) ratios[name] = ratio;
    out.push_back({{"model", row.model},
                   {"trace", row.trace},
                   {"concurrency", row.concurrency},
                   {"default_backend", row.default_backend},
                   {"default_output_tps", row.default_tps},
                   {"default_tps_over_backend_tps", ratios}});
  }
  return out;
}

ProgressBar::ProgressBar(std::ostream& out, std::string label, int64_t total, bool enabled,
                         bool terminal)
    : out_(out),
      label_(std::move(label)),
      total_(std::max<int64_t>(total, 1)),
      enabled_(enabled),
      terminal_(terminal),
      start_s_(now_s()) {}

void ProgressBar::update(int64_t done, const std::string& status) {
  if (!enabled_) return;
  const double fraction = std::clamp(static_cast<double>(done) / total_, 0.0, 1.0);
  if (terminal_) {
    const double t = now_s();
    if (last_draw_s_ >= 0.0 && t - last_draw_s_ < 0.1) return;
    last_draw_s_ = t;
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(fraction * kWidth);
    std::string line = label_ + " [" + std::string(static_cast<size_t>(filled), '#') +
                       std::string(static_cast<size_t>(kWidth - filled), '.') + "] " +
                       fixed(100.0 * fraction, 0) + "% " + status + ", " + fixed(t - start_s_, 0) +
                       " s";
    // Pad over the previous line instead of relying on terminal escape codes.
    const size_t width = line.size();
    if (line.size() < last_width_) line += std::string(last_width_ - line.size(), ' ');
    last_width_ = width;
    out_ << "\r" << line << std::flush;
  } else {
    const int quarter = static_cast<int>(fraction * 4.0);
    if (quarter > quarter_ && quarter < 4) {
      quarter_ = quarter;
      out_ << label_ << ": " << quarter * 25 << "% " << status << std::endl;
    }
  }
}

void ProgressBar::finish(const std::string& summary) {
  if (!enabled_) return;
  std::string line = label_ + ": " + summary + " (" + fixed(now_s() - start_s_, 1) + " s)";
  if (terminal_ && line.size() < last_width_) line += std::string(last_width_ - line.size(), ' ');
  out_ << (terminal_ ? "\r" : "") << line << std::endl;
}

}  // namespace tripath::cli
