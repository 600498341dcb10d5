#include "serve_options.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "bench_workloads.h"
#include "flags.h"
#include "tripath/block_allocator.h"
#include "tripath/kv_cache.h"

namespace tripath::cli {

namespace {

// The published form (BENCH.md): input 10240, output 1024, concurrency 64 and 128, a budget of
// 16384 batched tokens, every layer of the preset, one request per client.
struct Sizes {
  int64_t isl, osl, sharegpt_isl, sharegpt_osl;
  const char* concurrency;
  int64_t requests_per_client, max_batched_tokens, layers;
};
constexpr Sizes kFull = {10240, 1024, 8000, 1500, "64,128", 1, 16384, 0};
// CPU, reference backend, 2 cores, about a minute for both models: short prompts split over
// a few steps by a budget of 2.5 prompts (so decode, extend and prefill all occur), two layers, two
// requests per client (so clients send follow-up requests). Measured in docs/serving.md.
constexpr Sizes kQuickCpu = {512, 32, 512, 32, "8,16", 2, 1280, 2};
// GPU: the published concurrencies and budget with every layer, shorter requests.
constexpr Sizes kQuickGpu = {4096, 256, 4000, 750, "64,128", 1, 16384, 0};

bool parse_positive(const std::string& text, int64_t* value) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < 1 || v > 1000000) return false;
  *value = v;
  return true;
}

}  // namespace

int64_t default_num_blocks(int64_t concurrency, int64_t max_request_tokens, int block_size) {
  const int64_t per_request = BlockAllocator::blocks_for_tokens(max_request_tokens, block_size);
  return (concurrency * per_request * 11 + 9) / 10 + 16;
}

ParsedServeOptions parse_serve_options(const std::vector<std::string>& args, bool gpu) {
  ParsedServeOptions parsed;
  ServeOptions& o = parsed.options;
  std::string models = "qwen3-235b-tp8,deepseek-r1-tp8";
  std::string traces = "uniform";
  std::string concurrency = kFull.concurrency;
  o.isl = kFull.isl;
  o.osl = kFull.osl;
  o.requests_per_client = kFull.requests_per_client;
  o.max_batched_tokens = kFull.max_batched_tokens;

  FlagSet flags("tripath serve",
                "Simulates continuous-batching serving (shared/BENCH.md \"Serving simulation\"): "
                "a request trace at fixed\nconcurrency, chunked prefill under a token budget, "
                "paged KV blocks with preemption, one plan per\nstep, attention of every layer "
                "on each backend; reports output tokens/s, TTFT, TPOT, the step-time\n"
                "breakdown and the published ratio table. MoE/MLP layers are not simulated.");
  flags.add_string("model", &models, "PRESET[,PRESET]",
                   "model presets: " + join(model_names(), ", "));
  flags.add_string("backend", &o.backend, "NAME[,NAME]|all",
                   "MHA backends (unset: every available one, GPU backends only on a GPU)");
  flags.add_string("mla-backend", &o.mla_backend, "NAME[,NAME]|all",
                   "MLA backends (unset: every available one, GPU backends only on a GPU)");
  flags.add_string("trace", &traces, "NAME[,NAME]", "request traces: " + join(trace_names(), ", "));
  flags.add_int("isl", &o.isl, 1, 1 << 20,
                "input tokens per request (sharegpt: the longest; default 8000 there)");
  flags.add_int("osl", &o.osl, 1, 1 << 20,
                "output tokens per request (sharegpt: the longest; default 1500 there)");
  flags.add_string("concurrency", &concurrency, "N[,N]",
                   "clients sending requests back to back; one run per value");
  flags.add_int("requests", &o.requests, 1, 1 << 24,
                "requests per run (default: concurrency x " +
                    std::to_string(kFull.requests_per_client) + ", with --quick on a CPU x " +
                    std::to_string(kQuickCpu.requests_per_client) + ")");
  flags.set_default_text("requests", "");
  flags.add_int("max-batched-tokens", &o.max_batched_tokens, 1, 1 << 24,
                "token budget of one step (decodes first, prompt chunks fill the rest)");
  flags.add_int("block-size", &o.block_size, 1, 256, "tokens per KV cache block, a power of two");
  flags.add_choice("layout", &o.layout, {"nhd", "hnd", "tiled"},
                   "KV cache layout (MHA models; tiled: three_path's decode reads it by bulk "
                   "copies on sm_90)");
  flags.add_int("num-blocks", &o.num_blocks, 1, int64_t{1} << 30,
                "KV cache blocks (default: concurrency x (isl + osl) tokens + 10%); fewer "
                "forces preemption");
  flags.set_default_text("num-blocks", "");
  flags.add_int("layers", &o.layers, 1, 1000,
                "layers per step (default: the preset's, 94 for qwen3-235b, 61 for deepseek-r1)");
  flags.set_default_text("layers", "");
  flags.add_bool("linear", &o.linear,
                 "add the QKV and output projection GEMMs (cuBLAS, GPU only) around attention");
  flags.add_bool("cuda-graphs", &o.cuda_graphs,
                 "replay decode-only steps as one CUDA graph where the backend can be captured");
  flags.add_int("prefix-len", &o.prefix_len, 1, 1 << 20,
                "shared-prefix trace: common prefix tokens (default: 3/4 of --isl)");
  flags.set_default_text("prefix-len", "");
  flags.add_int("prefix-groups", &o.prefix_groups, 1, 1 << 20,
                "shared-prefix trace: distinct prefixes, requests assigned round-robin");
  flags.add_int("seed", &o.seed, 0, int64_t{1} << 62, "seed of the trace and the block pool");
  flags.add_string("json", &o.json_path, "PATH", "also write a JSON report to PATH (- = stdout)");
  flags.add_string("plot-dir", &o.plot_dir, "DIR",
                   "write SVG plots (TPS per backend, step-time breakdown) into DIR");
  flags.add_bool("quick", &o.quick,
                 "small sizes: on a CPU isl 512, osl 32, concurrency 8,16, budget 1280, 2 layers "
                 "(about a minute on 2 cores); on a GPU isl 4096, osl 256, every layer");
  flags.add_bool("progress", &o.progress, "progress bar on stderr");
  flags.add_bool("check", &o.check,
                 "check the block manager's reference counts after every step (slow)");
  parsed.usage = flags.usage();
  if (!flags.parse(args)) {
    parsed.help = true;
    return parsed;
  }

  if (o.quick) {
    const Sizes& q = gpu ? kQuickGpu : kQuickCpu;
    if (!flags.was_set("isl")) o.isl = q.isl;
    if (!flags.was_set("osl")) o.osl = q.osl;
    if (!flags.was_set("concurrency")) concurrency = q.concurrency;
    if (!flags.was_set("max-batched-tokens")) o.max_batched_tokens = q.max_batched_tokens;
    if (!flags.was_set("layers")) o.layers = q.layers;
    o.requests_per_client = q.requests_per_client;
    o.sharegpt_isl = flags.was_set("isl") ? o.isl : q.sharegpt_isl;
    o.sharegpt_osl = flags.was_set("osl") ? o.osl : q.sharegpt_osl;
  } else {
    o.sharegpt_isl = flags.was_set("isl") ? o.isl : kFull.sharegpt_isl;
    o.sharegpt_osl = flags.was_set("osl") ? o.osl : kFull.sharegpt_osl;
  }

  for (const std::string& m : split_list(models)) {
    if (find_model(m) == nullptr) {
      throw flags.error("invalid value '" + m + "' for --model: expected one of " +
                        join(model_names(), ", "));
    }
    if (std::find(o.models.begin(), o.models.end(), m) == o.models.end()) o.models.push_back(m);
  }
  if (o.models.empty()) throw flags.error("--model needs at least one preset");

  for (const std::string& t : split_list(traces)) {
    TraceKind kind;
    if (!parse_trace(t, &kind)) {
      throw flags.error("invalid value '" + t + "' for --trace: expected one of " +
                        join(trace_names(), ", "));
    }
    if (std::find(o.traces.begin(), o.traces.end(), kind) == o.traces.end())
      o.traces.push_back(kind);
  }
  if (o.traces.empty()) throw flags.error("--trace needs at least one trace name");

  for (const std::string& c : split_list(concurrency)) {
    int64_t value = 0;
    if (!parse_positive(c, &value)) {
      throw flags.error("invalid value '" + c +
                        "' for --concurrency: expected comma-separated integers in [1, 1000000]");
    }
    if (std::find(o.concurrency.begin(), o.concurrency.end(), value) == o.concurrency.end())
      o.concurrency.push_back(value);
  }
  if (o.concurrency.empty()) throw flags.error("--concurrency needs at least one value");

  if (!is_valid_block_size(o.block_size)) {
    throw flags.error("invalid value '" + std::to_string(o.block_size) +
                      "' for --block-size: expected a power of two in [1, 256]");
  }
  const int64_t max_concurrency = *std::max_element(o.concurrency.begin(), o.concurrency.end());
  if (o.max_batched_tokens < max_concurrency) {
    throw flags.error("--max-batched-tokens=" + std::to_string(o.max_batched_tokens) +
                      " is below --concurrency=" + std::to_string(max_concurrency) +
                      ": every running request decodes one token per step, so the budget must "
                      "be at least the concurrency");
  }
  const bool shared_prefix =
      std::find(o.traces.begin(), o.traces.end(), TraceKind::kSharedPrefix) != o.traces.end();
  if (flags.was_set("prefix-len") && o.prefix_len >= o.isl) {
    throw flags.error("--prefix-len=" + std::to_string(o.prefix_len) +
                      " must be shorter than the input (--isl=" + std::to_string(o.isl) + ")");
  }
  if ((flags.was_set("prefix-len") || flags.was_set("prefix-groups")) && !shared_prefix) {
    throw flags.error("--prefix-len and --prefix-groups apply to --trace=shared-prefix only");
  }
  if (o.linear && !gpu) {
    throw flags.error(
        "--linear is unavailable here: the QKV and output projection GEMMs run through cuBLAS "
        "on a GPU, and this machine has no GPU or this build has no CUDA");
  }
  return parsed;
}

}  // namespace tripath::cli
