// `tripath serve`: the serving simulation (shared/BENCH.md "Serving simulation"). For every
// model preset, trace, concurrency and backend it generates the trace, runs the scheduler and
// the backend over every step (serve_sim.h), and reports TPS, TTFT, TPOT, the step-time
// breakdown and the ratio table, as text, JSON and SVG plots. docs/serving.md explains the model.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"
#include "flags.h"
#include "json_report.h"
#include "serve_executor.h"
#include "serve_options.h"
#include "serve_report.h"
#include "serve_sim.h"
#include "tripath/backend.h"
#include "tripath/error.h"
#include "tripath/kv_cache.h"

namespace tripath::cli {

namespace {

constexpr const char* kNotSimulated =
    "not simulated: MoE/MLP layers, norms, rotary embeddings, sampling and tensor-parallel "
    "communication; the QKV/output projections only with --linear (GPU)";
constexpr const char* kTimeModel =
    "clock += host time (schedule + plan + the backend's prepare) + the step's measured device "
    "time over every layer (GPU: CUDA events, decode-only steps as one CUDA-graph replay; CPU: "
    "steady clock); a request arrives when its client sends it (the first `concurrency` at t=0, "
    "the others when a client's previous request finishes); TTFT = first token - arrival; TPOT "
    "= (finish - first token) / (outputs - 1)";
constexpr const char* kAttribution =
    "each step's device time is split over its decode, extend and prefill requests in "
    "proportion to FLOPs / 989 TFLOP/s + bytes / 4.8 TB/s (the BENCH.md formulas; nominal "
    "H200 rates, only their ratio matters), plus the projection FLOPs with --linear; on the CPU, "
    "whose reference backend is compute-bound, FLOPs alone";
constexpr const char* kMemory =
    "one KV cache buffer shared by all layers (each layer reads and writes the bytes a real "
    "layer would; the cache is far larger than the L2), sized for concurrency x (isl + osl) "
    "tokens + 10% unless --num-blocks; synthetic random activations";

// Backends for one kind of layer. Not given: every available one (on a GPU machine the GPU
// backends only: the CPU reference at full size would take hours). Empty with `skip_reason`
// when none fits.
std::vector<std::string> select_backends(const ParsedServeOptions& parsed, const std::string& flag,
                                         const std::string& value, bool mla, bool gpu,
                                         std::string* skip_reason) {
  std::vector<std::string> names;
  const std::vector<BackendInfo> all = list_backends();
  if (value.empty() || value == "all") {
    std::string unavailable;
    for (const BackendInfo& b : all) {
      if (b.is_mla != mla) continue;
      if (!b.available) {
        unavailable += (unavailable.empty() ? "" : "; ") + b.name + ": " + b.reason;
        continue;
      }
      if (value.empty() && gpu && is_host_backend(b.name)) continue;
      names.push_back(b.name);
    }
    if (names.empty()) {
      *skip_reason = std::string("no ") + (mla ? "MLA" : "MHA") + " GPU backend is available (" +
                     unavailable + "); --" + flag +
                     "=reference runs the CPU reference (hours at the published sizes)";
    }
    return names;
  }
  for (const std::string& item : split_list(value)) {
    std::string name;
    try {
      name = resolve_backend(item, mla);
    } catch (const Error& e) {
      throw UsageError(
          "tripath serve: invalid value '" + item + "' for --" + flag + ": " + e.what(),
          parsed.usage);
    }
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  if (names.empty()) {
    throw UsageError("tripath serve: --" + flag + " needs a backend name or all", parsed.usage);
  }
  return names;
}

TraceSpec trace_spec(TraceKind kind, const ServeOptions& o, int64_t requests) {
  TraceSpec spec;
  spec.kind = kind;
  spec.num_requests = requests;
  spec.isl = kind == TraceKind::kShareGpt ? o.sharegpt_isl : o.isl;
  spec.osl = kind == TraceKind::kShareGpt ? o.sharegpt_osl : o.osl;
  spec.prefix_len = o.prefix_len;
  spec.prefix_groups = o.prefix_groups;
  spec.seed = static_cast<uint64_t>(o.seed);
  return spec;
}

std::string join_ints(const std::vector<int64_t>& values) {
  std::string s;
  for (int64_t v : values) s += (s.empty() ? "" : ",") + std::to_string(v);
  return s;
}

std::string summary_text(const RunResult& r) {
  const ServeMetrics& m = r.sim.metrics;
  char text[256];
  std::snprintf(text, sizeof(text),
                "%.1f tok/s, TTFT mean %s p99 %s, TPOT mean %.2f ms p99 %.2f ms, %lld steps, "
                "%lld preemptions, host %.2f%%",
                m.output_tps, duration_text(m.ttft_ms.mean).c_str(),
                duration_text(m.ttft_ms.p99).c_str(), m.tpot_ms.mean, m.tpot_ms.p99,
                static_cast<long long>(m.steps), static_cast<long long>(m.preemptions),
                m.overhead_pct);
  return text;
}

}  // namespace

int run_serve(const std::vector<std::string>& args) {
  const BuildInfo info = build_info();
  const bool gpu = info.with_cuda && info.gpu_found;
  const ParsedServeOptions parsed = parse_serve_options(args, gpu);
  if (parsed.help) {
    std::cout << parsed.usage;
    return 0;
  }
  const ServeOptions& o = parsed.options;

  // Backends per kind, only for the kinds the chosen models need.
  bool want_mha = false, want_mla = false;
  for (const std::string& m : o.models) (find_model(m)->is_mla ? want_mla : want_mha) = true;
  std::string skip_mha, skip_mla;
  std::vector<std::string> mha, mla;
  if (want_mha) mha = select_backends(parsed, "backend", o.backend, false, gpu, &skip_mha);
  if (want_mla) mla = select_backends(parsed, "mla-backend", o.mla_backend, true, gpu, &skip_mla);

  std::ostream& text = o.json_path == "-" ? std::cerr : std::cout;
  std::string traces;
  for (TraceKind k : o.traces) traces += (traces.empty() ? "" : ",") + std::string(trace_name(k));
  text << "tripath serve " << info.version << " (commit " << git_commit() << ")\n"
       << "machine: cpu " << cpu_model_name() << ", " << info.num_threads << " threads; gpu "
       << gpu_text(info) << "\n"
       << "settings: trace " << traces << ", isl " << o.isl << ", osl " << o.osl
       << (std::find(o.traces.begin(), o.traces.end(), TraceKind::kShareGpt) != o.traces.end()
               ? " (sharegpt: up to " + std::to_string(o.sharegpt_isl) + " / " +
                     std::to_string(o.sharegpt_osl) + ")"
               : std::string())
       << ", concurrency " << join_ints(o.concurrency) << ", requests/run "
       << (o.requests > 0 ? std::to_string(o.requests)
                          : std::to_string(o.requests_per_client) + " x concurrency")
       << ", budget " << o.max_batched_tokens << " tokens/step, block " << o.block_size
       << ", layout " << o.layout << ", layers "
       << (o.layers > 0 ? std::to_string(o.layers) : std::string("of the preset"))
       << ", bf16, CUDA graphs " << (o.cuda_graphs ? "on" : "off") << ", linear "
       << (o.linear ? "on" : "off") << ", seed " << o.seed << (o.quick ? ", --quick" : "") << "\n"
       << kNotSimulated << "\n";
  if (!skip_mha.empty()) text << "skipped MHA models: " << skip_mha << "\n";
  if (!skip_mla.empty()) text << "skipped MLA models: " << skip_mla << "\n";
  const bool any_host = std::any_of(mha.begin(), mha.end(), is_host_backend) ||
                        std::any_of(mla.begin(), mla.end(), is_host_backend);
  if (any_host && !o.quick && o.isl >= 4096) {
    text << "warning: the CPU reference at these sizes takes hours; --quick runs in about a "
            "minute\n";
  }
  text << std::flush;

  // Every run, in order: model, trace, concurrency, backend.
  struct Planned {
    std::string model;
    TraceKind trace;
    int64_t concurrency;
    std::string backend;
  };
  std::vector<Planned> plan;
  for (const std::string& model : o.models) {
    const std::vector<std::string>& backends = find_model(model)->is_mla ? mla : mha;
    for (TraceKind trace : o.traces)
      for (int64_t c : o.concurrency)
        for (const std::string& b : backends) plan.push_back({model, trace, c, b});
  }
  if (plan.empty()) {
    std::cerr << "tripath serve: nothing to run (no backend for the chosen models)\n";
    return 1;
  }

  const bool terminal = isatty(STDERR_FILENO) != 0;
  std::vector<RunResult> runs;
  int failures = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const Planned& p = plan[i];
    const ServeModel model = serve_model(p.model);
    const ModelPreset& preset = *model.preset;
    const int64_t requests = o.requests > 0 ? o.requests : o.requests_per_client * p.concurrency;
    std::vector<TraceRequest> trace = generate_trace(trace_spec(p.trace, o, requests));
    int64_t longest = 0;
    for (const TraceRequest& r : trace) longest = std::max(longest, r.input_len + r.output_len);

    RunResult run;
    run.model = p.model;
    run.is_mla = preset.is_mla;
    run.trace = trace_name(p.trace);
    run.concurrency = p.concurrency;
    run.backend = p.backend;
    run.layers = static_cast<int>(o.layers > 0 ? o.layers : preset.layers);
    run.block_size = static_cast<int>(o.block_size);
    run.num_blocks = o.num_blocks > 0 ? o.num_blocks
                                      : default_num_blocks(p.concurrency, longest, run.block_size);
    run.max_batched_tokens = o.max_batched_tokens;
    run.linear = o.linear;

    ExecutorConfig ec;
    ec.model = model;
    ec.backend = p.backend;
    ec.layers = run.layers;
    ec.num_blocks = run.num_blocks;
    ec.block_size = run.block_size;
    ec.layout = parse_layout(o.layout);
    ec.max_tokens = o.max_batched_tokens;
    ec.max_requests = p.concurrency;
    ec.linear = o.linear;
    ec.cuda_graphs = o.cuda_graphs;
    ec.seed = static_cast<uint64_t>(o.seed);

    SimConfig sc;
    sc.scheduler.concurrency = p.concurrency;
    sc.scheduler.max_batched_tokens = o.max_batched_tokens;
    sc.scheduler.block_size = run.block_size;
    sc.scheduler.num_blocks = run.num_blocks;
    sc.scheduler.seed = static_cast<uint64_t>(o.seed);
    sc.model = model;
    const bool host = is_host_backend(p.backend);
    sc.linear = o.linear && !host;
    sc.attribute_bytes = !host;
    sc.num_work_units = host ? std::max(1, info.num_threads) : std::max(1, info.gpu_sm_count);
    sc.num_kv_heads =
        preset.is_mla ? mla_split_units(p.backend, preset.num_q_heads) : preset.num_kv_heads;
    sc.split_waves = preset.is_mla ? mla_split_waves(p.backend) : StepInput{}.split_waves;
    sc.check_invariants = o.check;

    const std::string label = "[" + std::to_string(i + 1) + "/" + std::to_string(plan.size()) +
                              "] " + p.model + " " + run.trace +
                              " c=" + std::to_string(p.concurrency) + " " + p.backend;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      std::unique_ptr<ServeExecutor> executor = make_executor(ec);
      ProgressBar bar(std::cerr, label, requests, o.progress, terminal);
      size_t steps = 0;
      run.sim = simulate(
          sc, std::move(trace), *executor, [&](const Scheduler& s, const StepRecord& step) {
            char status[160];
            std::snprintf(status, sizeof(status), "%lld/%lld done, step %zu, t=%.2f s",
                          static_cast<long long>(s.num_finished()),
                          static_cast<long long>(requests), ++steps, step.end_time);
            bar.update(s.num_finished(), status);
          });
      run.executor = executor->info();
      run.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      bar.finish(summary_text(run));
      if (!o.progress) text << label << ": " << summary_text(run) << "\n" << std::flush;
    } catch (const Error& e) {
      run.unsupported = e.what();
      ++failures;
      std::cerr << label << ": failed: " << e.what() << std::endl;
    }
    runs.push_back(std::move(run));
  }

  const std::vector<RatioRow> ratios = ratio_rows(runs);
  text << "\nresults (TTFT/TPOT over requests; host % = scheduling + planning time / device "
          "time)\n";
  print_results(text, runs);
  text << "\nstep-time breakdown (tokens per step x steps with the path; time apportioned by "
          "FLOPs and bytes, on a CPU by FLOPs)\n";
  print_breakdown(text, runs);
  text << "\nratio table, published form (the default backend's output tokens/s divided by "
          "each backend's)\n";
  print_ratios(text, ratios);
  text << "\n" << kTimeModel << "\n" << kAttribution << "\n" << kMemory << "\n";
  for (const RunResult& r : runs) {
    if (!r.executor.notes.empty())
      text << "note: " << r.backend << ": " << r.executor.notes << "\n";
  }

  if (!o.json_path.empty()) {
    nlohmann::json doc;
    doc["tool"] = "tripath serve";
    doc["schema"] = 1;
    doc["date"] = utc_date_iso();
    doc["commit"] = git_commit();
    doc["machine"] = machine_json(info);
    doc["build"] = build_info_json(info);
    doc["variants"] = variants_json();
    doc["settings"] = {{"traces", traces},
                       {"isl", o.isl},
                       {"osl", o.osl},
                       {"sharegpt_max_isl", o.sharegpt_isl},
                       {"sharegpt_max_osl", o.sharegpt_osl},
                       {"concurrency", o.concurrency},
                       {"requests", o.requests},
                       {"requests_per_client", o.requests_per_client},
                       {"max_batched_tokens", o.max_batched_tokens},
                       {"block_size", o.block_size},
                       {"layout", o.layout},
                       {"num_blocks", o.num_blocks},
                       {"layers", o.layers},
                       {"dtype", "bf16"},
                       {"cuda_graphs", o.cuda_graphs},
                       {"linear", o.linear},
                       {"prefix_len", o.prefix_len},
                       {"prefix_groups", o.prefix_groups},
                       {"seed", o.seed},
                       {"quick", o.quick}};
    doc["model"] = {{"not_simulated", kNotSimulated},
                    {"time", kTimeModel},
                    {"attribution", kAttribution},
                    {"memory", kMemory}};
    doc["runs"] = nlohmann::json::array();
    for (const RunResult& r : runs) doc["runs"].push_back(run_json(r));
    doc["ratios"] = ratios_json(ratios);
    write_json(o.json_path, doc);
    if (o.json_path != "-") std::cerr << "wrote " << o.json_path << std::endl;
  }
  if (!o.plot_dir.empty()) {
    for (const std::string& path : write_plots(o.plot_dir, runs))
      std::cerr << "wrote " << path << std::endl;
  }
  return failures > 0 ? 1 : 0;
}

}  // namespace tripath::cli
