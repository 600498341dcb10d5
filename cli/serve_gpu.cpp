// GPU step executors of the serving simulation (see serve_executor.h for the memory model).
//
// Timing: the step's layers are enqueued on the executor's own stream between two CUDA events;
// the step time is their elapsed time, read after synchronizing on the second (an engine syncs
// every step too, to sample). The backend's prepare (plan upload) runs before the first event
// and counts as host planning time.
//
// CUDA graphs: a decode-only step (no extend, no prefill) is captured, every layer, into one
// graph and timed as one replay, as an engine replays its captured decode graphs. The plan
// changes every step (contexts grow, split counts move), so the graph is captured again each
// step: into an existing executable graph with cudaGraphExecUpdate when the topology allows,
// else by instantiating a new one. That host time is reported (capture_ms) but kept off the
// simulated clock, because an engine captures once per batch size at start-up. A backend whose
// run() cannot be captured (the capture fails or throws) is timed with plain launches from then
// on, and the report says why.
//
// --linear: the projection GEMMs of serve_model.h through cuBLAS (bf16 in and out, fp32
// accumulate) around each layer's attention, on the same stream and in the same graph. Each
// layer's weights are distinct memory (rotated over enough copies to exceed 3x the L2), so a
// decode-step GEMM streams its weights from HBM as it does in a real model.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "bench_step.h"
#include "serve_executor.h"
#include "tripath/backend.h"
#include "tripath/device.h"
#include "tripath/error.h"

namespace tripath::cli {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

void cuda_check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw Error(std::string("serve (GPU): ") + what + ": " + cudaGetErrorString(status));
  }
}

void cublas_check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw Error(std::string("serve (GPU): ") + what + ": " + cublasGetStatusString(status));
  }
}

TensorView device_view(const DeviceAllocation& d, DType dtype,
                       std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(d.data(), dtype, shape, Device::kCUDA);
}

TensorView first_rows(TensorView t, int64_t rows) {
  t.shape[0] = rows;
  return t;
}

// A device buffer of `count` elements filled with random non-zero values (a host pattern of
// up to 4M elements, tiled: the values only need to be realistic, not unique).
DeviceAllocation random_device(DType dtype, int64_t count, uint64_t seed, float magnitude) {
  const size_t element = dtype_size(dtype);
  DeviceAllocation d(static_cast<size_t>(std::max<int64_t>(count, 1)) * element);
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(count, int64_t{1} << 22));
  Buffer host(dtype, {chunk});
  fill_random(host.view, seed, magnitude);
  for (int64_t offset = 0; offset < count; offset += chunk) {
    const int64_t n = std::min(chunk, count - offset);
    copy_to_device(static_cast<char*>(d.data()) + offset * static_cast<int64_t>(element),
                   host.storage.data(), static_cast<size_t>(n) * element);
  }
  return d;
}

DeviceAllocation zero_device(size_t bytes) {
  DeviceAllocation d(bytes);
  cuda_check(cudaMemset(d.data(), 0, bytes), "cudaMemset (KV cache)");
  return d;
}

size_t l2_bytes() {
  int device = 0, l2 = 0;
  cuda_check(cudaGetDevice(&device), "cudaGetDevice");
  cuda_check(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device), "L2 size");
  return static_cast<size_t>(l2);
}

void check_memory(size_t bytes, const char* what) {
  size_t free = 0, total = 0;
  cuda_check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  if (bytes + (size_t{1} << 30) > free) {
    throw Error(std::string("serve (GPU): ") + what + " needs " + std::to_string(bytes >> 20) +
                " MiB but only " + std::to_string(free >> 20) +
                " MiB of device memory are free; lower --num-blocks, --concurrency or "
                "--max-batched-tokens");
  }
}

// The projection GEMMs of one layer (serve_model.h), with per-layer weights.
class GpuLinear {
 public:
  GpuLinear(const ServeModel& model, int layers, int64_t max_tokens, int64_t max_decode,
            cudaStream_t stream, uint64_t seed)
      : model_(model) {
    const double weight_bytes = linear_weight_bytes(model);
    copies_ = static_cast<int>(std::clamp<double>(
        std::ceil(3.0 * static_cast<double>(l2_bytes()) / std::max(weight_bytes, 1.0)), 1.0,
        static_cast<double>(std::max(layers, 1))));
    int64_t max_in = 1, max_out = 1;
    for (const GemmShape& g : model.gemms) {
      const int64_t rows = g.decode_only ? max_decode : max_tokens;
      max_in = std::max(max_in, rows * g.k * g.batch);
      max_out = std::max(max_out, rows * g.n * g.batch);
    }
    check_memory(static_cast<size_t>(weight_bytes) * static_cast<size_t>(copies_) +
                     static_cast<size_t>(max_in + max_out) * 2 + kWorkspaceBytes,
                 "--linear (weights and activations)");
    input_ = random_device(DType::kBF16, max_in, seed + 101, 1.0f);
    output_ = DeviceAllocation(static_cast<size_t>(max_out) * 2);
    for (int c = 0; c < copies_; ++c) {
      std::vector<DeviceAllocation> set;
      for (size_t i = 0; i < model.gemms.size(); ++i) {
        const GemmShape& g = model.gemms[i];
        set.push_back(random_device(DType::kBF16, g.k * g.n * g.batch,
                                    seed + 1000 + static_cast<uint64_t>(c * 64) + i, 0.02f));
      }
      weights_.push_back(std::move(set));
    }
    weight_bytes_ = static_cast<int64_t>(weight_bytes) * copies_;
    workspace_ = DeviceAllocation(kWorkspaceBytes);
    cublas_check(cublasCreate(&handle_), "cublasCreate");
    cublas_check(cublasSetStream(handle_, stream), "cublasSetStream");
    // A fixed workspace: cuBLAS allocates nothing during a graph capture.
    cublas_check(cublasSetWorkspace(handle_, workspace_.data(), kWorkspaceBytes),
                 "cublasSetWorkspace");
  }
  ~GpuLinear() {
    if (handle_ != nullptr) cublasDestroy(handle_);
  }
  GpuLinear(const GpuLinear&) = delete;
  GpuLinear& operator=(const GpuLinear&) = delete;

  // The GEMMs before (QKV side) or after (output side) attention of layer `layer`.
  void run(bool before_attention, int layer, int64_t tokens, int64_t decode_tokens) {
    const std::vector<DeviceAllocation>& w = weights_[static_cast<size_t>(layer % copies_)];
    const float alpha = 1.0f, beta = 0.0f;
    for (size_t i = 0; i < model_.gemms.size(); ++i) {
      const GemmShape& g = model_.gemms[i];
      if (g.before_attention != before_attention) continue;
      const int64_t rows = g.decode_only ? decode_tokens : tokens;
      if (rows == 0) continue;
      // Row-major C[rows, n] = A[rows, k] x W[k, n] is column-major C^T = W^T x A^T.
      const int n = static_cast<int>(g.n), m = static_cast<int>(rows), k = static_cast<int>(g.k);
      if (g.batch == 1) {
        cublas_check(
            cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, w[i].data(),
                         CUDA_R_16BF, n, input_.data(), CUDA_R_16BF, k, &beta, output_.data(),
                         CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            g.name);
      } else {
        cublas_check(cublasGemmStridedBatchedEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha,
                                                w[i].data(), CUDA_R_16BF, n, g.k * g.n,
                                                input_.data(), CUDA_R_16BF, k, rows * g.k, &beta,
                                                output_.data(), CUDA_R_16BF, n, rows * g.n, g.batch,
                                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     g.name);
      }
    }
  }
  int64_t weight_bytes() const { return weight_bytes_; }
  int copies() const { return copies_; }

 private:
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;
  ServeModel model_;
  int copies_ = 1;
  int64_t weight_bytes_ = 0;
  cublasHandle_t handle_ = nullptr;
  DeviceAllocation workspace_, input_, output_;
  std::vector<std::vector<DeviceAllocation>> weights_;
};

// The stream, the events, the per-step graph and the optional GEMMs shared by the MHA and MLA
// executors. `layers(stream)` enqueues every layer of the step.
class GpuStepRunner {
 public:
  explicit GpuStepRunner(bool use_graphs) : use_graphs_(use_graphs) {
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda_check(cudaEventCreate(&begin_), "cudaEventCreate");
    cuda_check(cudaEventCreate(&end_), "cudaEventCreate");
    if (!use_graphs) graph_note_ = "CUDA graphs off (--cuda-graphs=false)";
  }
  ~GpuStepRunner() {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    cudaEventDestroy(begin_);
    cudaEventDestroy(end_);
    cudaStreamDestroy(stream_);
  }
  GpuStepRunner(const GpuStepRunner&) = delete;
  GpuStepRunner& operator=(const GpuStepRunner&) = delete;

  cudaStream_t stream() const { return stream_; }
  const std::string& graph_note() const { return graph_note_; }

  // Times the step's layers; decode-only steps as a graph replay when capture works.
  void time(const std::function<void()>& layers, bool decode_only, StepTiming& timing) {
    if (!warmed_) {
      // First step: module loading, cuBLAS heuristics and first-touch costs stay off the clock.
      layers();
      cuda_check(cudaStreamSynchronize(stream_), "warm-up step");
      warmed_ = true;
    }
    if (decode_only && use_graphs_) {
      const Clock::time_point t0 = Clock::now();
      const bool captured = capture(layers);
      timing.capture_ms = ms_since(t0);
      if (captured) {
        cuda_check(cudaEventRecord(begin_, stream_), "cudaEventRecord");
        cuda_check(cudaGraphLaunch(exec_, stream_), "cudaGraphLaunch");
        cuda_check(cudaEventRecord(end_, stream_), "cudaEventRecord");
        timing.device_ms = elapsed_ms();
        timing.graph = true;
        return;
      }
    }
    cuda_check(cudaEventRecord(begin_, stream_), "cudaEventRecord");
    layers();
    cuda_check(cudaEventRecord(end_, stream_), "cudaEventRecord");
    timing.device_ms = elapsed_ms();
  }

 private:
  double elapsed_ms() {
    cuda_check(cudaEventSynchronize(end_), "step (asynchronous kernel error?)");
    cuda_check(cudaGetLastError(), "step");
    float ms = 0.0f;
    cuda_check(cudaEventElapsedTime(&ms, begin_, end_), "cudaEventElapsedTime");
    return ms;
  }

  // Captures the layers into exec_ (updated in place when possible). False, with graphs off
  // from then on and the reason noted, when the backend cannot be captured.
  bool capture(const std::function<void()>& layers) {
    cudaGraph_t graph = nullptr;
    std::string failure;
    cudaError_t status = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal);
    if (status != cudaSuccess) {
      failure = std::string("cudaStreamBeginCapture: ") + cudaGetErrorString(status);
    } else {
      try {
        layers();
      } catch (const std::exception& e) {
        failure = e.what();
      }
      status = cudaStreamEndCapture(stream_, &graph);
      if (failure.empty() && status != cudaSuccess)
        failure = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(status);
    }
    if (failure.empty()) {
      bool updated = false;
      if (exec_ != nullptr) {
        cudaGraphExecUpdateResultInfo info{};
        updated = cudaGraphExecUpdate(exec_, graph, &info) == cudaSuccess;
        if (!updated) {
          cudaGetLastError();
          cudaGraphExecDestroy(exec_);
          exec_ = nullptr;
        }
      }
      if (!updated) {
        status = cudaGraphInstantiate(&exec_, graph, 0);
        if (status != cudaSuccess) {
          failure = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(status);
          exec_ = nullptr;
        }
      }
      if (failure.empty()) {
        // Upload outside the timed replay, as a pre-captured graph would be resident.
        status = cudaGraphUpload(exec_, stream_);
        if (status != cudaSuccess)
          failure = std::string("cudaGraphUpload: ") + cudaGetErrorString(status);
      }
    }
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (failure.empty()) return true;
    cudaGetLastError();
    use_graphs_ = false;
    graph_note_ = "CUDA graphs unavailable for this backend (" + failure +
                  "); decode steps timed as plain launches";
    return false;
  }

  bool use_graphs_ = true;
  bool warmed_ = false;
  std::string graph_note_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t begin_ = nullptr, end_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// The report's view of a GPU executor: timer, graph state, cache and --linear weights.
ExecutorInfo gpu_executor_info(const GpuStepRunner& runner, int64_t cache_bytes,
                               const GpuLinear* linear) {
  ExecutorInfo i;
  i.on_gpu = true;
  i.timer = "CUDA events";
  i.notes = runner.graph_note();
  i.cache_bytes = cache_bytes;
  if (linear != nullptr) {
    i.weight_bytes = linear->weight_bytes();
    i.notes += std::string(i.notes.empty() ? "" : "; ") + "--linear weights in " +
               std::to_string(linear->copies()) + " rotated copies";
  }
  return i;
}

class GpuMhaExecutor final : public ServeExecutor {
 public:
  explicit GpuMhaExecutor(const ExecutorConfig& c)
      : c_(c), backend_(create_attention_backend(c.backend)), runner_(c.cuda_graphs) {
    const ModelPreset& p = *c.model.preset;
    KvCacheConfig cache;
    mha_setup(c, *backend_, params_, cache);
    const int64_t t = c.max_tokens, hq = p.num_q_heads, hkv = p.num_kv_heads, d = p.head_dim;
    const size_t cache_bytes = static_cast<size_t>(cache.bytes_per_tensor());
    check_memory(2 * cache_bytes + static_cast<size_t>(t * (2 * hq + 2 * hkv) * d * 2),
                 "the KV cache and activations");
    q_ = random_device(DType::kBF16, t * hq * d, c.seed + 1, 1.0f);
    k_ = random_device(DType::kBF16, t * hkv * d, c.seed + 2, 1.0f);
    v_ = random_device(DType::kBF16, t * hkv * d, c.seed + 3, 1.0f);
    out_ = DeviceAllocation(static_cast<size_t>(t * hq * d) * 2);
    cache_k_ = zero_device(cache_bytes);
    cache_v_ = zero_device(cache_bytes);
    in_.q = device_view(q_, DType::kBF16, {t, hq, d});
    in_.k = device_view(k_, DType::kBF16, {t, hkv, d});
    in_.v = device_view(v_, DType::kBF16, {t, hkv, d});
    in_.out = device_view(out_, DType::kBF16, {t, hq, d});
    in_.cache.config = cache;
    const std::vector<int64_t> shape = cache.shape();
    in_.cache.k = TensorView::contiguous(cache_k_.data(), DType::kBF16,
                                         {shape[0], shape[1], shape[2], shape[3]}, Device::kCUDA);
    in_.cache.v = TensorView::contiguous(cache_v_.data(), DType::kBF16,
                                         {shape[0], shape[1], shape[2], shape[3]}, Device::kCUDA);
    if (p.has_sinks) {
      sinks_ = random_device(DType::kF32, hq, c.seed + 4, 2.0f);
      in_.sinks = device_view(sinks_, DType::kF32, {hq});
    }
    in_.stream = runner_.stream();
    if (c.linear) {
      linear_ = std::make_unique<GpuLinear>(c.model, c.layers, t, c.max_requests, runner_.stream(),
                                            c.seed);
    }
    full_ = in_;
    cache_bytes_ = static_cast<int64_t>(2 * cache_bytes);
  }

  StepTiming run(const StepPlan& plan) override {
    const int64_t n = plan.num_tokens, nd = plan.decode.num_tokens();
    in_.q = first_rows(full_.q, n);
    in_.k = first_rows(full_.k, n);
    in_.v = first_rows(full_.v, n);
    in_.out = first_rows(full_.out, n);
    StepTiming timing;
    const Clock::time_point t0 = Clock::now();
    backend_->prepare(plan, params_, runner_.stream());
    timing.prepare_ms = ms_since(t0);
    auto layers = [&] {
      for (int layer = 0; layer < c_.layers; ++layer) {
        if (linear_) linear_->run(true, layer, n, nd);
        AttentionParams params = params_;
        if (layer % 2 == 1) params.window_left = c_.model.preset->window_left;
        backend_->run(plan, params, in_);
        if (linear_) linear_->run(false, layer, n, nd);
      }
    };
    const bool decode_only =
        n > 0 && plan.extend.num_requests() == 0 && plan.prefill.num_requests() == 0;
    runner_.time(layers, decode_only, timing);
    return timing;
  }

  ExecutorInfo info() const override {
    return gpu_executor_info(runner_, cache_bytes_, linear_.get());
  }

 private:
  ExecutorConfig c_;
  std::unique_ptr<AttentionBackend> backend_;
  GpuStepRunner runner_;
  AttentionParams params_;
  DeviceAllocation q_, k_, v_, out_, sinks_, cache_k_, cache_v_;
  AttentionInputs in_, full_;
  std::unique_ptr<GpuLinear> linear_;
  int64_t cache_bytes_ = 0;
};

class GpuMlaExecutor final : public ServeExecutor {
 public:
  explicit GpuMlaExecutor(const ExecutorConfig& c)
      : c_(c), backend_(create_mla_backend(c.backend)), runner_(c.cuda_graphs) {
    const int64_t h = c.model.preset->num_q_heads;
    MlaCacheConfig cache;
    mla_setup(c, params_, cache);
    const int64_t t = c.max_tokens, r = c.max_requests;
    const size_t cache_bytes = static_cast<size_t>(cache.elements()) * 2;
    const int64_t activations = t * kMlaEntryDim + r * h * (kMlaEntryDim + kMlaLatentDim) +
                                t * h * (kMlaQkDim + kMlaVDim) +
                                int64_t{kMlaLatentDim} * h * (kMlaNopeDim + kMlaVDim);
    check_memory(cache_bytes + static_cast<size_t>(activations) * 2,
                 "the latent cache and activations");
    latent_ = random_device(DType::kBF16, t * kMlaEntryDim, c.seed + 1, 1.0f);
    q_absorbed_ = random_device(DType::kBF16, r * h * kMlaEntryDim, c.seed + 2, 1.0f);
    out_absorbed_ = DeviceAllocation(static_cast<size_t>(r * h * kMlaLatentDim) * 2);
    q_ = random_device(DType::kBF16, t * h * kMlaQkDim, c.seed + 3, 1.0f);
    kv_b_proj_ = random_device(DType::kBF16, int64_t{kMlaLatentDim} * h * (kMlaNopeDim + kMlaVDim),
                               c.seed + 4, 0.1f);
    out_ = DeviceAllocation(static_cast<size_t>(t * h * kMlaVDim) * 2);
    cache_ = zero_device(cache_bytes);
    full_.latent = device_view(latent_, DType::kBF16, {t, kMlaEntryDim});
    full_.q_absorbed = device_view(q_absorbed_, DType::kBF16, {r, h, kMlaEntryDim});
    full_.out_absorbed = device_view(out_absorbed_, DType::kBF16, {r, h, kMlaLatentDim});
    full_.q = device_view(q_, DType::kBF16, {t, h, kMlaQkDim});
    full_.kv_b_proj =
        device_view(kv_b_proj_, DType::kBF16, {kMlaLatentDim, h * (kMlaNopeDim + kMlaVDim)});
    full_.out = device_view(out_, DType::kBF16, {t, h, kMlaVDim});
    full_.cache.config = cache;
    full_.cache.latent =
        TensorView::contiguous(cache_.data(), DType::kBF16,
                               {cache.num_blocks, cache.block_size, kMlaEntryDim}, Device::kCUDA);
    full_.stream = runner_.stream();
    if (c.linear) {
      linear_ = std::make_unique<GpuLinear>(c.model, c.layers, t, r, runner_.stream(), c.seed);
    }
    cache_bytes_ = static_cast<int64_t>(cache_bytes);
  }

  StepTiming run(const StepPlan& plan) override {
    const int64_t n = plan.num_tokens, nd = plan.decode.num_tokens(), np = n - nd;
    if (nd > c_.max_requests) {
      throw Error("serve: a step with " + std::to_string(nd) + " decode tokens exceeds the " +
                  std::to_string(c_.max_requests) + " the MLA executor was sized for");
    }
    MlaInputs in = full_;
    in.latent = first_rows(full_.latent, n);
    in.q_absorbed = nd > 0 ? first_rows(full_.q_absorbed, nd) : TensorView{};
    in.out_absorbed = nd > 0 ? first_rows(full_.out_absorbed, nd) : TensorView{};
    in.q = np > 0 ? first_rows(full_.q, np) : TensorView{};
    in.kv_b_proj = np > 0 ? full_.kv_b_proj : TensorView{};
    in.out = np > 0 ? first_rows(full_.out, np) : TensorView{};
    StepTiming timing;
    const Clock::time_point t0 = Clock::now();
    backend_->prepare(plan, params_, runner_.stream());
    timing.prepare_ms = ms_since(t0);
    auto layers = [&] {
      for (int layer = 0; layer < c_.layers; ++layer) {
        if (linear_) linear_->run(true, layer, n, nd);
        backend_->run(plan, params_, in);
        if (linear_) linear_->run(false, layer, n, nd);
      }
    };
    runner_.time(layers, n > 0 && np == 0, timing);
    return timing;
  }

  ExecutorInfo info() const override {
    return gpu_executor_info(runner_, cache_bytes_, linear_.get());
  }

 private:
  ExecutorConfig c_;
  std::unique_ptr<MlaBackend> backend_;
  GpuStepRunner runner_;
  MlaParams params_;
  DeviceAllocation latent_, q_absorbed_, out_absorbed_, q_, kv_b_proj_, out_, cache_;
  MlaInputs full_;
  std::unique_ptr<GpuLinear> linear_;
  int64_t cache_bytes_ = 0;
};

}  // namespace

std::unique_ptr<ServeExecutor> make_gpu_executor(const ExecutorConfig& config) {
  if (config.model.preset->is_mla) return std::make_unique<GpuMlaExecutor>(config);
  return std::make_unique<GpuMhaExecutor>(config);
}

}  // namespace tripath::cli
