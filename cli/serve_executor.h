// Step executors: one backend, one model preset, all layers of a step.
//
// Memory: the activations (q, new K/V or latent rows, outputs) are synthetic, filled once with
// random non-zero values and sized for the largest step; one physical KV cache (K and V, or
// the MLA latent cache) is shared by every layer. Each layer still reads and writes exactly the
// bytes a real layer would (its own query tokens against every request's whole context), and
// the cache is far larger than the L2 (60 MB on an H200) for any realistic run, so the per-layer
// time is the real one while the memory is 1/layers of a real engine's. Every slot a step reads
// was written by an earlier step (or by this one, before attention), as in an engine.
//
// Host executors (the CPU reference backend) time the layers with the steady clock. GPU
// executors (serve_gpu.cpp) time them with CUDA events on their own stream, replay decode-only
// steps as one CUDA graph, and with --linear add the projection GEMMs through cuBLAS.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "serve_model.h"
#include "tripath/backend.h"
#include "tripath/kv_cache.h"
#include "serve_sim.h"

namespace tripath::cli {

struct ExecutorConfig {
  ServeModel model;
  std::string backend;  // a resolved backend name
  int layers = 1;
  int64_t num_blocks = 0;  // KV cache blocks (shared by all layers)
  int block_size = 16;
  KvLayout layout = KvLayout::kTiled;  // MHA caches
  int64_t max_tokens = 0;    // most tokens of one step (the token budget)
  int64_t max_requests = 0;  // most requests of one step (the concurrency)
  bool linear = false;       // projection GEMMs (GPU only)
  bool cuda_graphs = true;   // replay decode-only steps as a CUDA graph (GPU only)
  uint64_t seed = 0;
};

// What an executor says about itself in the report.
struct ExecutorInfo {
  bool on_gpu = false;
  std::string timer;  // "CUDA events" / "std::chrono::steady_clock"
  std::string notes;  // e.g. "CUDA graphs unavailable: ..." (may be empty)
  int64_t cache_bytes = 0;
  int64_t weight_bytes = 0;  // --linear weights on the device
};

class ServeExecutor : public StepExecutor {
 public:
  virtual ExecutorInfo info() const = 0;
};

// What every executor runs the preset with: attention params and a bf16 KV cache of
// config.num_blocks blocks (MHA), or MLA params and a bf16 latent cache (MLA); all validated.
// mha_setup also checks that `backend` can serve them (tripath::Error naming why not).
void mha_setup(const ExecutorConfig& config, const AttentionBackend& backend,
               AttentionParams& params, KvCacheConfig& cache);
void mla_setup(const ExecutorConfig& config, MlaParams& params, MlaCacheConfig& cache);

// The reference backend runs on the host; every other backend name is a CUDA backend.
bool is_host_backend(const std::string& backend);

// Builds the executor for config.backend (MHA or MLA after the model's kind). GPU backends in a
// build without CUDA throw tripath::Error.
std::unique_ptr<ServeExecutor> make_executor(const ExecutorConfig& config);

// GPU executors (serve_gpu.cpp; serve_gpu_stub.cpp throws in a build without CUDA).
std::unique_ptr<ServeExecutor> make_gpu_executor(const ExecutorConfig& config);

}  // namespace tripath::cli
