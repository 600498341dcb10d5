// SVG plots of `tripath serve`, written by hand (no plotting dependency): grouped and stacked
// bar charts, one panel per (model, trace) so models of very different speed keep their own
// y scale.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "serve_report.h"
#include "tripath/error.h"

namespace tripath::cli {

namespace {

struct Segment {
  double value;
  std::string key;  // colour and legend entry
};
struct Bar {
  std::string label;
  std::vector<Segment> segments;
};
struct Group {
  std::string label;
  std::vector<Bar> bars;
};
struct Panel {
  std::string title;
  std::vector<Group> groups;
};
struct LegendEntry {
  std::string key;
  std::string colour;
};

constexpr double kBarWidth = 22.0, kBarGap = 4.0, kGroupGap = 26.0;
constexpr double kPlotHeight = 240.0, kTop = 78.0, kBottom = 96.0, kAxis = 64.0, kRight = 24.0;

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string num(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", value);
  return text;
}

// About three significant digits, for value labels: "1234", "56.7", "0.0123", "1.2e+06".
std::string label_number(double value) {
  char text[32];
  const double a = std::fabs(value);
  if (a >= 100.0 && a < 1e6) {
    std::snprintf(text, sizeof(text), "%.0f", value);
  } else {
    std::snprintf(text, sizeof(text), "%.3g", value);
  }
  return text;
}

// Tick values are multiples of a 1/2/2.5/5 x 10^k step: %g prints them without trailing zeros.
std::string tick_label(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

// A 1/2/2.5/5 x 10^k step giving about five ticks up to `max`.
double tick_step(double max) {
  if (!(max > 0.0)) return 1.0;
  const double raw = max / 5.0;
  const double base = std::pow(10.0, std::floor(std::log10(raw)));
  for (double f : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (raw <= f * base) return f * base;
  return 10.0 * base;
}

std::string colour_of(const std::string& key, const std::vector<LegendEntry>& legend) {
  for (const LegendEntry& e : legend)
    if (e.key == key) return e.colour;
  return "#999999";
}

// A group is as wide as its bars, but never narrower than its label.
double group_width(const Group& g) {
  const double bars = static_cast<double>(g.bars.size()) * (kBarWidth + kBarGap) - kBarGap;
  return std::max(bars, 7.0 * static_cast<double>(g.label.size()));
}

double panel_width(const Panel& p) {
  double w = kGroupGap;
  for (const Group& g : p.groups) w += group_width(g) + kGroupGap;
  return std::max(w, 180.0);
}

std::string chart_svg(const std::string& title, const std::string& y_label,
                      const std::vector<Panel>& panels, const std::vector<LegendEntry>& legend,
                      bool total_labels) {
  double width = 16.0;
  for (const Panel& p : panels) width += kAxis + panel_width(p) + kRight;
  // Wide enough for the title (15 px bold: about 8.5 px a character) and the legend.
  double legend_width = 16.0;
  for (const LegendEntry& e : legend)
    legend_width += 28.0 + 6.5 * static_cast<double>(e.key.size());
  width = std::max({width, 520.0, 24.0 + 8.5 * static_cast<double>(title.size()), legend_width});
  const double height = kTop + kPlotHeight + kBottom;
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(width) << "\" height=\""
    << num(height) << "\" viewBox=\"0 0 " << num(width) << " " << num(height)
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s << "<text x=\"16\" y=\"22\" font-size=\"15\" font-weight=\"bold\">" << escape(title)
    << "</text>\n";
  // Legend on one line under the title.
  double lx = 16.0;
  for (const LegendEntry& e : legend) {
    s << "<rect x=\"" << num(lx) << "\" y=\"34\" width=\"11\" height=\"11\" fill=\"" << e.colour
      << "\"/><text x=\"" << num(lx + 15) << "\" y=\"44\">" << escape(e.key) << "</text>\n";
    lx += 28.0 + 6.5 * static_cast<double>(e.key.size());
  }

  double x0 = 16.0;
  const double base_y = kTop + kPlotHeight;
  for (const Panel& p : panels) {
    const double pw = panel_width(p);
    const double left = x0 + kAxis;
    double max_total = 0.0;
    for (const Group& g : p.groups)
      for (const Bar& b : g.bars) {
        double total = 0.0;
        for (const Segment& seg : b.segments) total += std::max(seg.value, 0.0);
        max_total = std::max(max_total, total);
      }
    const double step = tick_step(max_total * 1.08);
    // 8% headroom keeps the value label of the tallest bar clear of the panel title.
    const double top_value = std::max(step, std::ceil(max_total * 1.08 / step) * step);
    auto y_of = [&](double v) { return base_y - kPlotHeight * v / top_value; };

    s << "<text x=\"" << num(left) << "\" y=\"" << num(kTop - 14) << "\" font-weight=\"bold\">"
      << escape(p.title) << "</text>\n";
    for (double v = 0.0; v <= top_value + step * 0.5; v += step) {
      const double y = y_of(v);
      s << "<line x1=\"" << num(left) << "\" y1=\"" << num(y) << "\" x2=\"" << num(left + pw)
        << "\" y2=\"" << num(y) << "\" stroke=\"#e4e4e4\"/>";
      s << "<text x=\"" << num(left - 6) << "\" y=\"" << num(y + 4) << "\" text-anchor=\"end\">"
        << tick_label(v) << "</text>\n";
    }
    s << "<text transform=\"translate(" << num(x0 + 12) << "," << num(kTop + kPlotHeight / 2)
      << ") rotate(-90)\" text-anchor=\"middle\">" << escape(y_label) << "</text>\n";
    s << "<line x1=\"" << num(left) << "\" y1=\"" << num(base_y) << "\" x2=\"" << num(left + pw)
      << "\" y2=\"" << num(base_y) << "\" stroke=\"#333\"/>\n";

    double group_left = left + kGroupGap;
    for (const Group& g : p.groups) {
      const double gw = group_width(g);
      const double bars = static_cast<double>(g.bars.size()) * (kBarWidth + kBarGap) - kBarGap;
      double x = group_left + (gw - bars) / 2;
      for (const Bar& b : g.bars) {
        double acc = 0.0;
        for (const Segment& seg : b.segments) {
          const double v = std::max(seg.value, 0.0);
          if (v <= 0.0) continue;
          const double y_top = y_of(acc + v), y_bottom = y_of(acc);
          s << "<rect x=\"" << num(x) << "\" y=\"" << num(y_top) << "\" width=\"" << num(kBarWidth)
            << "\" height=\"" << num(std::max(y_bottom - y_top, 0.5)) << "\" fill=\""
            << colour_of(seg.key, legend) << "\"><title>" << escape(b.label) << " "
            << escape(seg.key) << ": " << label_number(v) << "</title></rect>\n";
          acc += v;
        }
        if (total_labels) {
          s << "<text x=\"" << num(x + kBarWidth / 2) << "\" y=\"" << num(y_of(acc) - 4)
            << "\" text-anchor=\"middle\" font-size=\"9\">" << label_number(acc) << "</text>\n";
        }
        s << "<text transform=\"translate(" << num(x + kBarWidth / 2 + 3) << "," << num(base_y + 10)
          << ") rotate(-40)\" text-anchor=\"end\" font-size=\"9\">" << escape(b.label)
          << "</text>\n";
        x += kBarWidth + kBarGap;
      }
      s << "<text x=\"" << num(group_left + gw / 2) << "\" y=\"" << num(base_y + kBottom - 10)
        << "\" text-anchor=\"middle\">" << escape(g.label) << "</text>\n";
      group_left += gw + kGroupGap;
    }
    x0 += kAxis + pw + kRight;
  }
  s << "</svg>\n";
  return s.str();
}

const std::vector<std::string>& backend_palette() {
  static const std::vector<std::string> colours = {"#1b9e77", "#d95f02", "#7570b3", "#e7298a",
                                                   "#66a61e", "#e6ab02", "#a6761d", "#666666"};
  return colours;
}

// Stable colours for the backends of the published comparison, others after them.
std::string backend_colour(const std::string& name, size_t fallback_index) {
  static const std::map<std::string, std::string> known = {
      {"three_path", "#1b9e77"}, {"unified", "#d95f02"},      {"two_path", "#7570b3"},
      {"mla", "#e7298a"},        {"mla_baseline", "#66a61e"}, {"reference", "#666666"}};
  const auto it = known.find(name);
  if (it != known.end()) return it->second;
  return backend_palette()[fallback_index % backend_palette().size()];
}

// Panels per (model, trace) in first-seen order, groups per concurrency, bars per run.
template <typename MakeBar>
std::vector<Panel> panels_of(const std::vector<RunResult>& runs, MakeBar make_bar) {
  std::vector<Panel> panels;
  for (const RunResult& r : runs) {
    if (!r.unsupported.empty()) continue;
    const std::string title = r.model + " (" + r.trace + ")";
    auto p = std::find_if(panels.begin(), panels.end(),
                          [&](const Panel& q) { return q.title == title; });
    if (p == panels.end()) {
      panels.push_back({title, {}});
      p = panels.end() - 1;
    }
    const std::string glabel = "c=" + std::to_string(r.concurrency);
    auto g = std::find_if(p->groups.begin(), p->groups.end(),
                          [&](const Group& q) { return q.label == glabel; });
    if (g == p->groups.end()) {
      p->groups.push_back({glabel, {}});
      g = p->groups.end() - 1;
    }
    g->bars.push_back(make_bar(r));
  }
  return panels;
}

}  // namespace

std::string tps_svg(const std::vector<RunResult>& runs) {
  std::vector<LegendEntry> legend;
  for (const RunResult& r : runs) {
    if (!r.unsupported.empty()) continue;
    const bool seen = std::any_of(legend.begin(), legend.end(),
                                  [&](const LegendEntry& e) { return e.key == r.backend; });
    if (!seen) legend.push_back({r.backend, backend_colour(r.backend, legend.size())});
  }
  const auto panels = panels_of(runs, [](const RunResult& r) {
    return Bar{r.backend, {{r.sim.metrics.output_tps, r.backend}}};
  });
  return chart_svg("Output tokens/s per backend (tripath serve)", "output tokens / s", panels,
                   legend, true);
}

std::string breakdown_svg(const std::vector<RunResult>& runs) {
  const std::vector<LegendEntry> legend = {{"decode", "#4e79a7"},
                                           {"extend", "#f28e2b"},
                                           {"prefill", "#e15759"},
                                           {"host (schedule + plan)", "#bab0ac"}};
  const auto panels = panels_of(runs, [](const RunResult& r) {
    const ServeMetrics& m = r.sim.metrics;
    return Bar{r.backend,
               {{m.decode.ms / 1e3, "decode"},
                {m.extend.ms / 1e3, "extend"},
                {m.prefill.ms / 1e3, "prefill"},
                {m.host_ms / 1e3, "host (schedule + plan)"}}};
  });
  return chart_svg("Step time by path, whole run (device time split by FLOPs and bytes)",
                   "seconds of simulated time", panels, legend, true);
}

std::vector<std::string> write_plots(const std::string& dir, const std::vector<RunResult>& runs) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("cannot create the plot directory '" + dir + "': " + ec.message());
  std::vector<std::string> paths;
  const std::pair<const char*, std::string> files[] = {
      {"serve_tps.svg", tps_svg(runs)}, {"serve_breakdown.svg", breakdown_svg(runs)}};
  for (const auto& [name, svg] : files) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    std::ofstream out(path);
    out << svg;
    if (!out) throw Error("failed writing the plot '" + path + "'");
    paths.push_back(path);
  }
  return paths;
}

}  // namespace tripath::cli
