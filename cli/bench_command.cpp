// `tripath bench`: times backends on the step workloads of shared/BENCH.md. For every workload
// (with its own model, or with every --model of its kind) it builds one random step
// (bench_step.h), optionally checks each backend against the CPU reference (--verify, before any
// timing), then times backend->run() with warm-up and the median of --repeats calls, and reports
// time, achieved GB/s (decode bytes formula) and GFLOP/s (attention FLOP formula) per backend,
// workload and model, as a table and optionally as JSON. CUDA backends (MHA and MLA) run on
// device copies of the step (bench_gpu.h), timed with CUDA events around CUDA-graph replays.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "bench_gpu.h"
#include "bench_step.h"
#include "bench_timer.h"
#include "bench_verify.h"
#include "bench_workloads.h"
#include "commands.h"
#include "flags.h"
#include "json_report.h"
#include "tripath/backend.h"
#include "tripath/device.h"
#include "tripath/error.h"
#include "tripath/kv_cache.h"

namespace tripath::cli {

namespace {

// Defaults without a GPU: the reference backend must get through every workload in well under a
// minute on two cores, so lengths shrink 64x and request counts 8x (see scale_groups); measured
// about 7 s on 2 idle cores, mostly mla-mixed (its kv_b_proj decompression, ~11 GFLOP a call).
constexpr double kCpuScale = 1.0 / 64.0;
constexpr long long kCpuRepeats = 5;
constexpr long long kCpuWarmup = 1;
// BENCH.md: warm-up first, median of >= 20 runs.
constexpr long long kGpuRepeats = 20;
constexpr long long kGpuWarmup = 3;

struct Options {
  bool split_waves_set = false;  // --split-waves given: every step takes it
  std::string backend;
  std::string mla_backend;
  std::string workload = "all";
  std::string model;
  std::string json_path;
  std::string dtype = "bf16";
  // tiled: the layout three_path's decode reads by bulk copies, measured the fastest (run w4).
  std::string layout = "tiled";
  std::string timing = "held";
  double scale = 1.0;
  double tolerance = 1e-3;
  long long repeats = kGpuRepeats;
  long long warmup = kGpuWarmup;
  long long seed = 0;
  long long block_size = 16;
  long long split_waves = StepInput{}.split_waves;
  long long cache_copies = 0;  // 0: rotated_cache_copies decides (bench_gpu.h)
  bool verify = false;
  bool with_cache_write = false;  // GPU timings include the step's cache write
};

struct Entry {
  std::string backend;
  std::string workload;
  std::string model;
  bool is_mla = false;
  std::string shape;
  std::vector<int32_t> query_lens;  // ordered batch
  std::vector<int32_t> context_lens;
  int32_t decode_requests = 0, extend_requests = 0, prefill_requests = 0;
  int64_t num_tokens = 0;
  int32_t num_splits = 0, split_tokens = 0, num_chunks = 0;
  StepCost cost;
  TimingStats timing;
  bool timed = false;
  std::string unsupported;  // why the backend refused this workload
  bool verified = false;
  VerifyResult verify;
  bool on_gpu = false;
  bool graph_used = false;  // timed by CUDA-graph replay
  int cache_copies = 1;     // rotated cache copies (L2)
  // Decode-only MHA steps on the GPU: the median of a paged gather of the same rows (0: none).
  double gather_ms = 0.0, gather_bytes = 0.0;
};

// The reference backend runs on the host; every other backend is a CUDA backend.
Device backend_device(const std::string& name) {
  return name == "reference" ? Device::kCPU : Device::kCUDA;
}

std::string scale_text(double scale) {
  char text[64];
  const double inverse = 1.0 / scale;
  if (scale < 1.0 && std::fabs(inverse - std::round(inverse)) < 1e-9) {
    std::snprintf(text, sizeof(text), "1/%.0f", inverse);
  } else {
    std::snprintf(text, sizeof(text), "%g", scale);
  }
  return text;
}

std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", decimals, value);
  return text;
}

std::string scientific(double value) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.2e", value);
  return text;
}

// Three significant digits or so, whatever the magnitude (CPU GB/s are small, GPU ones large).
std::string rate_text(double value) {
  return fixed(value, value >= 100.0 ? 0 : (value >= 10.0 ? 1 : 2));
}

double rate(double amount, double ms, double unit) {
  return ms > 0.0 ? amount / (ms * 1e-3) / unit : 0.0;
}

// Measured once per run, on first use (a few seconds of GPU time).
const GpuCeilings& gpu_ceilings() {
  static const GpuCeilings c = measure_gpu_ceilings();
  return c;
}
bool have_ceilings = false;

// The backends to time for one kind of layer: the flag's comma-separated names, "all" available
// ones, or (flag not given) the environment's choice, else auto.
std::vector<std::string> select_backends(const FlagSet& flags, const std::string& flag,
                                         const std::string& value, bool mla) {
  std::vector<std::string> names;
  if (!flags.was_set(flag)) {
    try {
      names.push_back(backend_from_env(mla));
    } catch (const Error& e) {
      throw flags.error(e.what());  // the library's message names the environment variable
    }
    return names;
  }
  if (value == "all") {
    for (const BackendInfo& b : list_backends()) {
      if (b.is_mla == mla && b.available) names.push_back(b.name);
    }
    if (names.empty()) {
      throw Error(std::string("no ") + (mla ? "MLA" : "MHA") + " backend is available here");
    }
    return names;
  }
  for (const std::string& item : split_list(value)) {
    std::string name;
    try {
      name = resolve_backend(item, mla);
    } catch (const Error& e) {
      throw flags.error("invalid value '" + item + "' for --" + flag + ": " + e.what());
    }
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  if (names.empty()) throw flags.error("--" + flag + " needs a backend name or all");
  return names;
}

std::unique_ptr<AttentionBackend> make_backend(const MhaStep&, const std::string& name) {
  return create_attention_backend(name);
}
std::unique_ptr<MlaBackend> make_backend(const MlaStep&, const std::string& name) {
  return create_mla_backend(name);
}

// Empty when the backend serves the step; otherwise its reason.
std::string unsupported_reason(const AttentionBackend& backend, const MhaStep& step) {
  try {
    backend.check_supported(step.params, step.inputs.cache.config);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
// The MLA interface has no check_supported: the CUDA MLA kernels' dtype rules
// (mla_cuda_backend.cpp) are checked here, so a --dtype they do not take reads as unsupported
// instead of ending the run with run()'s error.
std::string unsupported_reason(const MlaBackend& backend, const MlaStep& step) {
  if (backend_device(backend.name()) != Device::kCUDA) return "";
  const DType cache = step.inputs.cache.config.dtype;
  const DType act = step.inputs.latent.dtype;  // q_absorbed, q, kv_b_proj and outputs alike
  if ((cache != DType::kBF16 && cache != DType::kFP8E4M3) || act != DType::kBF16) {
    const std::string rule =
        "the GPU MLA kernels take bf16 activations and a bf16 or fp8_e4m3 latent cache "
        "(--dtype=bf16 or fp8_e4m3), not ";
    return rule + dtype_name(act) + " activations and a " + dtype_name(cache) + " cache";
  }
  return "";
}

Entry describe_step(const WorkloadSpec& w, const ModelPreset& model, const std::string& shape,
                    const StepPlan& plan, const StepCost& cost) {
  Entry e;
  e.workload = w.id;
  e.model = model.name;
  e.is_mla = w.is_mla;
  e.shape = shape;
  e.query_lens = plan.query_lens;
  e.context_lens = plan.context_lens;
  e.decode_requests = plan.decode.num_requests();
  e.extend_requests = plan.extend.num_requests();
  e.prefill_requests = plan.prefill.num_requests();
  e.num_tokens = plan.num_tokens;
  e.num_splits = plan.num_splits();
  e.split_tokens = plan.split_tokens;
  e.num_chunks = plan.num_chunks;
  e.cost = cost;
  return e;
}

void print_progress(const Entry& e, size_t index, size_t total) {
  std::ostringstream s;
  s << "[" << index << "/" << total << "] " << e.workload << " " << e.model << " " << e.shape
    << ": " << e.backend;
  if (!e.unsupported.empty()) {
    s << " unsupported: " << e.unsupported;
  } else {
    if (e.verified) {
      s << (e.verify.ok ? " verify ok" : " VERIFY FAILED") << " (max rel err "
        << scientific(e.verify.max_error) << ")";
    }
    if (e.timed) {
      s << " median " << fixed(e.timing.median_ms, 3) << " ms of " << e.timing.times_ms.size();
      if (e.on_gpu)
        s << " (" << e.cache_copies << (e.cache_copies == 1 ? " call" : " calls") << " per replay)";
      if (e.gather_ms > 0.0) {
        s << "; a gather of its rows " << fixed(e.gather_ms * 1e3, 1) << " us ("
          << fixed(rate(e.gather_bytes, e.gather_ms, 1e12), 2) << " TB/s): "
          << fixed(100.0 * e.gather_ms / e.timing.median_ms, 1) << "% of gather speed";
      }
    }
  }
  std::cerr << s.str() << std::endl;
}

// A CUDA backend on a step (MHA or MLA, through its GPU mirror in bench_gpu.h): verify on cache
// copy 0 (the step's new K/V or latent rows written first, as run() does), then time attention
// alone (no cache write; with --with-cache-write the whole call, the write included, as a serving
// engine makes it) by CUDA-graph replay over the rotated cache copies; each timing is one replay
// divided by the number of copies.
template <typename Backend, typename Step>
void bench_on_gpu(Backend& backend, Step& step, const std::optional<ReferenceOutput>& reference,
                  const Options& options, Entry& e) {
  using GpuStep = typename GpuStepOf<Step>::type;
  const GpuCeilings& ceilings = gpu_ceilings();
  GpuStep gpu(step, options.cache_copies > 0 ? static_cast<int>(options.cache_copies)
                                             : GpuStep::copies_for(step, ceilings.l2_bytes));
  backend.prepare(step.step.plan, step.params, nullptr);
  for (int c = 0; c < gpu.cache_copies(); ++c)
    backend.run(step.step.plan, step.params, gpu.inputs(c, true, nullptr));
  device_synchronize();
  if (reference) {
    gpu.download_out(step);
    e.verified = true;
    e.verify = compare_outputs(step, *reference, options.tolerance);
  }
  const int copies = gpu.cache_copies();
  // Times one call per cache copy in each replay; each timing per copy.
  auto time_per_copy = [&](auto per_copy, bool* graph_used) {
    std::vector<double> times = time_gpu_calls(
        [&](void* stream) {
          for (int c = 0; c < copies; ++c) per_copy(c, stream);
        },
        static_cast<int>(options.warmup), static_cast<int>(options.repeats), true, graph_used,
        options.timing == "held");
    for (double& t : times) t /= copies;
    return summarize(std::move(times));
  };
  e.timing = time_per_copy(
      [&](int c, void* stream) {
        backend.run(step.step.plan, step.params, gpu.inputs(c, options.with_cache_write, stream));
      },
      &e.graph_used);
  e.timed = true;
  e.on_gpu = true;
  e.cache_copies = copies;
  if constexpr (std::is_same_v<Step, MhaStep>) {
    if (gpu.gather_bytes() > 0) {  // the same rows, copies and timer, nothing computed
      e.gather_ms =
          time_per_copy([&](int c, void* stream) { gpu.gather(c, stream); }, nullptr).median_ms;
      e.gather_bytes = gpu.gather_bytes();
    }
  }
}

// Verifies (optionally) and times every backend on one step.
template <typename Step>
void bench_step(Step& step, const std::vector<std::string>& backend_names, const Entry& base,
                const Options& options, size_t index, size_t total, std::vector<Entry>& entries) {
  std::optional<CacheSnapshot> pristine;
  std::optional<ReferenceOutput> reference;
  if (options.verify) {
    pristine = snapshot_cache(step);
    reference = reference_output(step);
  }
  bool cache_touched = false;
  for (const std::string& name : backend_names) {
    if constexpr (std::is_same_v<Step, MlaStep>) {
      // Each MLA backend's own split-KV plan (the order, blocks and data stay the step's).
      const int waves =
          options.split_waves_set ? static_cast<int>(options.split_waves) : mla_split_waves(name);
      const int units = mla_split_units(name, step.params.num_heads);
      if (step.step.input.split_waves != waves || step.step.input.num_kv_heads != units) {
        step.step.input.split_waves = waves;
        step.step.input.num_kv_heads = units;
        step.step.plan = plan_step(step.step.input);
      }
    }
    Entry e = base;
    e.backend = name;
    // The plan this backend runs (an MLA backend may have re-planned above).
    e.num_splits = step.step.plan.num_splits();
    e.split_tokens = step.step.plan.split_tokens;
    e.num_chunks = step.step.plan.num_chunks;
    auto backend = make_backend(step, name);
    if (!backend) throw Error("no backend named '" + name + "' could be created");
    e.unsupported = unsupported_reason(*backend, step);
    if (e.unsupported.empty() && backend_device(name) == Device::kCUDA) {
      bench_on_gpu(*backend, step, reference, options, e);
    } else if (e.unsupported.empty()) {
      // Once per step (plan metadata upload, workspace sizing), outside the timed calls.
      backend->prepare(step.step.plan, step.params, step.inputs.stream);
      auto call = [&] { backend->run(step.step.plan, step.params, step.inputs); };
      if (options.verify) {
        // Every backend starts from the cache as built, so a bad cache write is its own fault.
        if (cache_touched) restore_cache(step, *pristine);
        call();
        e.verified = true;
        e.verify = compare_outputs(step, *reference, options.tolerance);
      }
      cache_touched = true;
      std::unique_ptr<Timer> timer = make_timer(backend_device(name));
      e.timing = time_calls(*timer, static_cast<int>(options.warmup),
                            static_cast<int>(options.repeats), call);
      e.timed = true;
    }
    print_progress(e, index, total);
    entries.push_back(std::move(e));
  }
}

void print_table(std::ostream& out, const std::vector<Entry>& entries, bool verify) {
  std::vector<std::string> header = {"backend",   "workload", "model", "shape",
                                     "median ms", "min ms",   "GB/s",  "GFLOP/s"};
  if (have_ceilings) {
    header.push_back("%read");
    header.push_back("%gemm");
  }
  if (verify) header.push_back("verify");
  std::vector<std::vector<std::string>> rows;
  for (const Entry& e : entries) {
    std::vector<std::string> row = {e.backend, e.workload, e.model, e.shape};
    if (e.timed) {
      row.push_back(fixed(e.timing.median_ms, 3));
      row.push_back(fixed(e.timing.min_ms, 3));
      row.push_back(rate_text(rate(e.cost.bytes, e.timing.median_ms, 1e9)));
      row.push_back(rate_text(rate(e.cost.flops, e.timing.median_ms, 1e9)));
    } else {
      row.insert(row.end(), {"unsupported", "-", "-", "-"});
    }
    if (have_ceilings) {
      const GpuCeilings& c = gpu_ceilings();
      const bool gpu = e.timed && e.on_gpu;
      row.push_back(
          gpu ? fixed(100.0 * rate(e.cost.bytes, e.timing.median_ms, 1e12) / c.read_tbps, 1) : "-");
      row.push_back(
          gpu ? fixed(100.0 * rate(e.cost.flops, e.timing.median_ms, 1e12) / c.gemm_tflops, 1)
              : "-");
    }
    if (verify) {
      row.push_back(!e.verified ? "-"
                                : (e.verify.ok ? "ok " : "FAIL ") + scientific(e.verify.max_error));
    }
    rows.push_back(std::move(row));
  }
  std::vector<size_t> width(header.size(), 0);
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  // Text columns left-aligned, numbers right-aligned.
  auto print_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      const bool right = c >= 4 && c <= (have_ceilings ? 9 : 7);
      line += right ? pad + row[c] : row[c] + pad;
      if (c + 1 < row.size()) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  };
  print_row(header);
  std::vector<std::string> rule;
  for (size_t w : width) rule.push_back(std::string(w, '-'));
  print_row(rule);
  for (const auto& row : rows) print_row(row);
}

nlohmann::json entry_json(const Entry& e) {
  nlohmann::json j;
  j["backend"] = e.backend;
  j["workload"] = e.workload;
  j["model"] = e.model;
  j["kind"] = e.is_mla ? "mla" : "mha";
  j["shape"] = e.shape;
  j["requests"] = {{"decode", e.decode_requests},
                   {"extend", e.extend_requests},
                   {"prefill", e.prefill_requests}};
  j["num_tokens"] = e.num_tokens;
  j["query_lens"] = e.query_lens;
  j["context_lens"] = e.context_lens;
  j["plan"] = {
      {"num_splits", e.num_splits}, {"split_tokens", e.split_tokens}, {"num_chunks", e.num_chunks}};
  j["bytes"] = e.cost.bytes;
  j["flops"] = e.cost.flops;
  if (!e.unsupported.empty()) j["unsupported"] = e.unsupported;
  if (e.timed) {
    j["times_ms"] = e.timing.times_ms;
    j["median_ms"] = e.timing.median_ms;
    j["min_ms"] = e.timing.min_ms;
    j["max_ms"] = e.timing.max_ms;
    j["gbps"] = rate(e.cost.bytes, e.timing.median_ms, 1e9);
    j["gflops"] = rate(e.cost.flops, e.timing.median_ms, 1e9);
  }
  if (e.on_gpu) {
    j["device"] = "cuda";
    j["graph_replay"] = e.graph_used;
    j["cache_copies"] = e.cache_copies;
    j["timed"] = "attention only (the cache write runs before timing)";
    if (have_ceilings && e.timed) {
      const GpuCeilings& c = gpu_ceilings();
      j["tbps"] = rate(e.cost.bytes, e.timing.median_ms, 1e12);
      j["tflops"] = rate(e.cost.flops, e.timing.median_ms, 1e12);
      j["pct_read_ceiling"] = 100.0 * j["tbps"].get<double>() / c.read_tbps;
      j["pct_copy_ceiling"] = 100.0 * j["tbps"].get<double>() / c.copy_tbps;
      j["pct_gemm_ceiling"] = 100.0 * j["tflops"].get<double>() / c.gemm_tflops;
    }
    if (e.gather_ms > 0.0) {
      // The decode's time against a gather of its rows: 100 means gather speed.
      j["gather"] = {{"median_ms", e.gather_ms},
                     {"tbps", rate(e.gather_bytes, e.gather_ms, 1e12)},
                     {"pct_of_gather_rate", 100.0 * e.gather_ms / e.timing.median_ms}};
    }
  }
  if (e.verified) {
    j["verify"] = {{"ok", e.verify.ok},
                   {"max_rel_error", e.verify.max_error},
                   {"limit", e.verify.limit},
                   {"bad_rows", e.verify.bad_rows}};
    if (!e.verify.detail.empty()) j["verify"]["detail"] = e.verify.detail;
  }
  return j;
}

}  // namespace

int run_bench(const std::vector<std::string>& args) {
  const BuildInfo info = build_info();
  Options o;
  if (!info.gpu_found) {
    o.scale = kCpuScale;
    o.repeats = kCpuRepeats;
    o.warmup = kCpuWarmup;
  }
  FlagSet flags("tripath bench",
                "Times attention backends on the step workloads of shared/BENCH.md (one backend "
                "call for one layer).\nWorkloads: " +
                    join(workload_ids(), ", ") + ".\nModels: " + join(model_names(), ", ") + ".");
  flags.add_string("backend", &o.backend, "NAME|all",
                   "MHA backend(s), comma-separated, or all available ones; unset: "
                   "$TRIPATH_BACKEND, else auto");
  flags.add_string("mla-backend", &o.mla_backend, "NAME|all",
                   "MLA backend(s), comma-separated, or all available ones; unset: "
                   "$TRIPATH_MLA_BACKEND, else auto");
  flags.add_string("workload", &o.workload, "ID|all", "workload id(s), comma-separated, or all");
  flags.add_string("model", &o.model, "PRESET[,PRESET]",
                   "model geometries, comma-separated (" + join(model_names(), ", ") +
                       "): each workload runs once per given model of its kind (MHA or MLA); "
                       "unset: each workload's own (qwen3-235b for MHA, deepseek-r1 for MLA); "
                       "with --workload=all, only the workloads of the given models' kinds run");
  flags.add_double("scale", &o.scale, 0.0, 1.0,
                   "lengths x F, request counts x sqrt(F) (1 = BENCH.md sizes; the default "
                   "without a GPU is 1/64)");
  flags.set_default_text("scale", scale_text(o.scale));
  flags.add_int("repeats", &o.repeats, 1, 100000, "timed calls; the median is reported");
  flags.add_int("warmup", &o.warmup, 0, 100000, "untimed calls before timing");
  flags.add_string("json", &o.json_path, "PATH", "also write a JSON report to PATH (- = stdout)");
  flags.add_bool("verify", &o.verify,
                 "check every backend against the CPU reference before timing; exit 1 on a "
                 "mismatch");
  flags.add_double("tolerance", &o.tolerance, 0.0, 1.0,
                   "--verify limit: per row, max |error| beyond the output dtype's own "
                   "rounding / max |reference| (default 1e-3 for f32, 1e-2 for 16-bit "
                   "activations, whose probabilities tensor cores round)");
  flags.add_int("seed", &o.seed, 0, (1LL << 62), "seed of the lengths, block tables and data");
  flags.add_choice("dtype", &o.dtype, {"bf16", "f16", "f32", "fp8_e4m3"},
                   "KV cache dtype (q and outputs are bf16 when the cache is fp8)");
  flags.add_choice("layout", &o.layout, {"nhd", "hnd", "tiled"},
                   "KV cache layout (MHA; tiled: three_path's decode reads it by bulk copies on "
                   "sm_90)");
  flags.add_choice("timing", &o.timing, {"held", "plain"},
                   "GPU timing: held = the stream is held while each replay and its events are "
                   "enqueued, so no host delay can enter the interval; plain = the events and the "
                   "replay are enqueued on an idle stream");
  flags.add_bool("with-cache-write", &o.with_cache_write,
                 "GPU timings of the whole call, the step's new K/V (or latent) rows written into "
                 "the cache first, as a serving engine calls it (default: attention alone)");
  flags.add_int("block-size", &o.block_size, 1, 256, "tokens per cache block, a power of two");
  flags.add_int("cache-copies", &o.cache_copies, 0, 8,
                "GPU timings: cache copies each replay rotates through, one call per copy, the "
                "time per call = replay / copies (0: enough copies for 3 x L2 bytes, at most 4; "
                "a step whose cache alone is that large gets one call per replay)");
  flags.add_int("split-waves", &o.split_waves, 1, 64,
                "decode split-KV target: work items = waves x work units (StepInput::split_waves; "
                "default 2, and 1 for the mla backend: mla_split_waves)");
  if (!flags.parse(args)) {
    std::cout << flags.usage();
    return 0;
  }
  if (!is_valid_block_size(o.block_size)) {
    throw flags.error("invalid value '" + std::to_string(o.block_size) +
                      "' for --block-size: expected a power of two in [1, 256]");
  }

  // Models (none: each workload's default), then workloads, filtered by the models' kinds.
  std::vector<const ModelPreset*> forced_models;
  for (const std::string& name : split_list(o.model)) {
    const ModelPreset* m = find_model(name);
    if (!m) {
      throw flags.error("invalid value '" + name + "' for --model: expected one of " +
                        join(model_names(), ", "));
    }
    if (std::find(forced_models.begin(), forced_models.end(), m) == forced_models.end())
      forced_models.push_back(m);
  }
  if (flags.was_set("model") && forced_models.empty()) {
    throw flags.error("--model needs at least one preset");
  }
  auto models_of_kind = [&](bool mla) {
    std::vector<const ModelPreset*> out;
    for (const ModelPreset* m : forced_models) {
      if (m->is_mla == mla) out.push_back(m);
    }
    return out;
  };
  std::vector<const WorkloadSpec*> selected;
  if (o.workload == "all") {
    for (const WorkloadSpec& w : workloads()) {
      if (forced_models.empty() || !models_of_kind(w.is_mla).empty()) selected.push_back(&w);
    }
  } else {
    for (const std::string& id : split_list(o.workload)) {
      const WorkloadSpec* w = find_workload(id);
      if (!w) {
        throw flags.error("invalid value '" + id + "' for --workload: expected all or one of " +
                          join(workload_ids(), ", "));
      }
      if (!forced_models.empty() && models_of_kind(w->is_mla).empty()) {
        throw flags.error("workload " + id + " is " + (w->is_mla ? "MLA" : "MHA") +
                          " but --model=" + o.model + " names no " + (w->is_mla ? "MLA" : "MHA") +
                          " preset");
      }
      if (std::find(selected.begin(), selected.end(), w) == selected.end()) selected.push_back(w);
    }
    if (selected.empty()) throw flags.error("--workload needs an id or all");
  }
  // What runs: every selected workload with every given model of its kind, or its own model.
  std::vector<std::pair<const WorkloadSpec*, const ModelPreset*>> runs;
  for (const WorkloadSpec* w : selected) {
    std::vector<const ModelPreset*> models = models_of_kind(w->is_mla);
    if (forced_models.empty()) models.push_back(find_model(w->default_model));
    for (const ModelPreset* m : models) runs.push_back({w, m});
  }
  const bool any_mha = std::any_of(selected.begin(), selected.end(),
                                   [](const WorkloadSpec* w) { return !w->is_mla; });
  const bool any_mla = std::any_of(selected.begin(), selected.end(),
                                   [](const WorkloadSpec* w) { return w->is_mla; });
  std::vector<std::string> mha_backends, mla_backends;
  if (any_mha) mha_backends = select_backends(flags, "backend", o.backend, false);
  if (any_mla) mla_backends = select_backends(flags, "mla-backend", o.mla_backend, true);

  bool any_gpu_backend = false;
  for (const auto* names : {&mha_backends, &mla_backends}) {
    for (const std::string& name : *names) {
      if (backend_device(name) == Device::kCUDA) any_gpu_backend = true;
    }
  }

  StepSettings settings;
  settings.cache_dtype = parse_dtype(o.dtype);
  settings.act_dtype =
      settings.cache_dtype == DType::kFP8E4M3 ? DType::kBF16 : settings.cache_dtype;
  settings.layout = parse_layout(o.layout);
  if (!flags.was_set("tolerance") && settings.act_dtype != DType::kF32) {
    // Tensor-core kernels round the softmax probabilities to the 16-bit activation dtype before
    // P.V (as FlashAttention does): measured about 3e-3 beyond the output rounding on the H200.
    o.tolerance = 1e-2;
  }
  settings.block_size = static_cast<int>(o.block_size);
  settings.seed = static_cast<uint64_t>(o.seed);
  settings.split_waves = static_cast<int>(o.split_waves);
  o.split_waves_set = flags.was_set("split-waves");
  settings.num_work_units =
      any_gpu_backend && info.gpu_sm_count > 0 ? info.gpu_sm_count : std::max(1, info.num_threads);

  const std::string timer_name =
      any_gpu_backend ? std::string("CUDA events around CUDA-graph replays (GPU, ") +
                            (o.timing == "held" ? "stream held while enqueued" : "plain") +
                            (o.with_cache_write ? "; the cache write included" : "") + "), " +
                            SteadyClockTimer().name() + " (CPU)"
                      : SteadyClockTimer().name();
  if (any_gpu_backend) {
    const GpuCeilings& c = gpu_ceilings();
    have_ceilings = true;
    std::cerr << "ceilings: copy " << fixed(c.copy_tbps, 2) << " TB/s (kernel "
              << fixed(c.copy_kernel_tbps, 2) << ", x4 kernel " << fixed(c.copy_x4_kernel_tbps, 2)
              << ", cudaMemcpy " << fixed(c.copy_memcpy_tbps, 2) << "), read "
              << fixed(c.read_tbps, 2) << " TB/s, bf16 GEMM " << fixed(c.gemm_tflops, 0)
              << " TFLOP/s (" << c.gpu_name << ")" << std::endl;
  }
  const std::string header =
      "tripath bench " + info.version + " (commit " + git_commit() + ")\n" + "machine: cpu " +
      cpu_model_name() + ", " + std::to_string(info.num_threads) + " threads; gpu " +
      gpu_text(info) + "\n" + "settings: scale " + scale_text(o.scale) + " (lengths x" +
      fixed(o.scale, 6) + ", requests x" + fixed(std::sqrt(o.scale), 4) + "), dtype " + o.dtype +
      ", layout " + o.layout + ", block " + std::to_string(o.block_size) + ", seed " +
      std::to_string(o.seed) + ", warm-up " + std::to_string(o.warmup) + ", median of " +
      std::to_string(o.repeats) + ", timer " + timer_name + (o.verify ? ", verify" : "") + "\n" +
      variants_text();
  // With the JSON report on stdout, the human-readable output moves to stderr.
  std::ostream& text = o.json_path == "-" ? std::cerr : std::cout;
  text << header << std::flush;

  std::vector<Entry> entries;
  for (size_t i = 0; i < runs.size(); ++i) {
    const WorkloadSpec& w = *runs[i].first;
    const ModelPreset& model = *runs[i].second;
    const std::vector<ScaledGroup> groups = scale_groups(w, o.scale);
    const StepLengths lengths = draw_lengths(groups, settings.seed);
    if (!w.is_mla) {
      MhaStep step = build_mha_step(model, lengths, settings);
      const StepCost cost = mha_cost(lengths, model, settings.cache_dtype, settings.act_dtype);
      const Entry base = describe_step(w, model, shape_text(groups), step.step.plan, cost);
      bench_step(step, mha_backends, base, o, i + 1, runs.size(), entries);
    } else {
      MlaStep step = build_mla_step(model, lengths, settings);
      const StepCost cost = mla_cost(lengths, model, step.step.plan.decode_threshold,
                                     settings.cache_dtype, settings.act_dtype);
      const Entry base = describe_step(w, model, shape_text(groups), step.step.plan, cost);
      bench_step(step, mla_backends, base, o, i + 1, runs.size(), entries);
    }
  }

  text << "\n";
  print_table(text, entries, o.verify);

  if (!o.json_path.empty()) {
    nlohmann::json doc;
    doc["tool"] = "tripath bench";
    doc["schema"] = 1;
    doc["date"] = utc_date_iso();
    doc["commit"] = git_commit();
    doc["machine"] = machine_json(info);
    doc["build"] = build_info_json(info);
    doc["variants"] = variants_json();
    doc["settings"] = {{"scale", o.scale},
                       {"length_scale", o.scale},
                       {"request_scale", std::sqrt(o.scale)},
                       {"dtype", o.dtype},
                       {"act_dtype", dtype_name(settings.act_dtype)},
                       {"layout", o.layout},
                       {"block_size", o.block_size},
                       {"seed", o.seed},
                       {"warmup", o.warmup},
                       {"repeats", o.repeats},
                       {"num_work_units", settings.num_work_units},
                       {"split_waves", settings.split_waves},
                       {"mla_split_waves", o.split_waves_set ? std::to_string(o.split_waves)
                                                             : "per backend (mla_split_waves)"},
                       {"timer", timer_name},
                       {"timing", o.timing},
                       {"with_cache_write", o.with_cache_write},
                       {"cache_copies", o.cache_copies > 0 ? std::to_string(o.cache_copies)
                                                           : "auto (3 x L2, at most 4)"},
                       {"verify", o.verify},
                       {"tolerance", o.tolerance}};
    doc["metrics"] = {
        {"bytes",
         "MHA: sum(context) x kv_heads x head_dim x 2 x cache bytes + q and out; "
         "MLA: sum(context) x 576 x cache bytes + q and out (+ kv_b_proj)"},
        {"flops",
         "MHA: 4 x sum(q x context + q^2/2) x q_heads x head_dim; MLA decode: 2 x heads "
         "x 1088 per pair; MLA extend/prefill: 2 x heads x 320 per pair + 2 x 512 x "
         "heads x 256 per decompressed token"}};
    if (have_ceilings) {
      const GpuCeilings& c = gpu_ceilings();
      doc["ceilings"] = {{"gpu", c.gpu_name},
                         {"sm_clock_max_mhz", c.sm_clock_mhz},
                         {"memory_clock_max_mhz", c.memory_clock_mhz},
                         {"l2_bytes", c.l2_bytes},
                         {"copy_tbps", c.copy_tbps},
                         {"copy_kernel_tbps", c.copy_kernel_tbps},
                         {"copy_x4_kernel_tbps", c.copy_x4_kernel_tbps},
                         {"copy_memcpy_tbps", c.copy_memcpy_tbps},
                         {"read_tbps", c.read_tbps},
                         {"gemm_bf16_tflops", c.gemm_tflops},
                         {"how",
                          "copy: 4 GiB, bytes read + written, the fastest of a kernel with "
                          "one 16-byte load per thread in flight, one with four, and "
                          "cudaMemcpyAsync; read: kernel reading 4 GiB with 16-byte loads, "
                          "four in flight per thread; gemm: cuBLAS bf16 8192^3 on random data; "
                          "medians of 10"}};
    }
    doc["entries"] = nlohmann::json::array();
    for (const Entry& e : entries) doc["entries"].push_back(entry_json(e));
    write_json(o.json_path, doc);
    if (o.json_path != "-") std::cerr << "wrote " << o.json_path << std::endl;
  }

  int failures = 0;
  for (const Entry& e : entries) {
    if (e.verified && !e.verify.ok) {
      ++failures;
      std::cerr << "tripath bench: verify FAILED: " << e.backend << " on " << e.workload << ": "
                << e.verify.detail << "\n";
    }
  }
  return failures ? 1 : 0;
}

}  // namespace tripath::cli
