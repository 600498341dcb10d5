// The backend interface and registry. An engine plans once per step (plan_step), then per layer
// calls run(): cache write first, then attention. Backends are chosen by name, by the
// TRIPATH_BACKEND / TRIPATH_MLA_BACKEND environment variables, or by "auto".
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tripath/attention.h"
#include "tripath/step_plan.h"

namespace tripath {

class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  virtual const char* name() const = 0;
  // True if run() needs the batch in [decode | extend | prefill] order (plan.is_ordered).
  virtual bool needs_ordered_batch() const = 0;
  // Throws tripath::Error explaining why this backend cannot serve these params/cache.
  virtual void check_supported(const AttentionParams& params, const KvCacheConfig& cache) const;
  // Once per step, before the step's run() calls: CUDA backends upload the plan's metadata and
  // size their workspace here (the only place they allocate), so run() never allocates or
  // synchronizes and can be captured in a CUDA graph. `stream` is a cudaStream_t (or null).
  // CPU backends need no preparation.
  // `params` gives the geometry (heads, head dim) the work partition depends on; every layer of
  // the step that run() is called for must share it (windows and soft-caps may differ).
  virtual void prepare(const StepPlan& plan, const AttentionParams& params, void* stream) {}
  // Cache write (when in.k / in.v are given) then attention for every token of the plan.
  virtual void run(const StepPlan& plan, const AttentionParams& params,
                   const AttentionInputs& in) = 0;
};

class MlaBackend {
 public:
  virtual ~MlaBackend() = default;
  virtual const char* name() const = 0;
  virtual void prepare(const StepPlan& plan, const MlaParams& params, void* stream) {}
  // Latent cache write (when in.latent is given) then decode absorbed and extend/prefill
  // non-absorbed. Needs an ordered plan.
  virtual void run(const StepPlan& plan, const MlaParams& params, const MlaInputs& in) = 0;
};

// Throws tripath::Error if a backend that needs the order gets an unordered plan.
void check_ordered(const StepPlan& plan, const char* backend_name);

// Validates one layer call against its plan (block size and pool size the plan was built for),
// params and cache: shapes, dtypes, devices. Throws tripath::Error naming the argument.
void validate_attention_call(const StepPlan& plan, const AttentionParams& params,
                             const AttentionInputs& in, Device device);
void validate_mla_call(const StepPlan& plan, const MlaParams& params, const MlaInputs& in,
                       Device device);

// Entry points that dispatch on the tensors' device (CPU: the reference; CUDA: the kernels,
// asynchronous on `stream`). slot_mapping: [num_tokens] int64 on the tensors' device.
void write_kv_cache(const KvCacheView& cache, const TensorView& k, const TensorView& v,
                    const TensorView& slot_mapping, void* stream = nullptr);
// latent: [num_tokens, 576] new MLA cache rows (GPU: bf16, f16 or f32 into a bf16, f16 or fp8
// cache; fp8 stores e4m3(x / scale) exactly as the CPU writer does).
void write_mla_cache(const MlaCacheView& cache, const TensorView& latent,
                     const TensorView& slot_mapping, void* stream = nullptr);
void merge_states(const TensorView& outs, const TensorView& lses, const TensorView& out,
                  const TensorView& lse, void* stream = nullptr);

struct BackendInfo {
  std::string name;
  bool is_mla = false;
  bool available = false;
  std::string reason;  // why not available ("not built with CUDA ...", "no GPU found")
};

// Every backend name tripath knows, with availability in this build and on this machine.
std::vector<BackendInfo> list_backends();
// Resolves "auto" and checks availability; throws tripath::Error listing valid and available
// names (and why the others are unavailable) for an unknown or unavailable name.
std::string resolve_backend(std::string_view name, bool mla);
// The name from TRIPATH_BACKEND (mla: TRIPATH_MLA_BACKEND), "auto" when unset, resolved.
std::string backend_from_env(bool mla);

std::unique_ptr<AttentionBackend> create_attention_backend(std::string_view name);
std::unique_ptr<MlaBackend> create_mla_backend(std::string_view name);

// The environment variables that select a GPU backend's opt-in kernel variants (read when the
// backend is created), with what each does and its value now (empty: unset). Reports record
// them so a figure says which kernels produced it.
struct VariantVariable {
  std::string name;
  std::string backend;  // the backend that reads it
  std::string meaning;
  int max_value = 1;      // it takes unset, empty or a digit 0..max_value
  int default_value = 0;  // what unset or empty means
  std::string value;      // as set in the environment now ("" when unset)
};
std::vector<VariantVariable> variant_variables();
// The value of variant variable `name` now, as the backends read it: its default when unset or
// empty, else its digit. A value outside 0..max_value throws tripath::Error naming the variable and the
// accepted values; so does a name that is not in variant_variables().
int read_variant(std::string_view name);

struct BuildInfo {
  std::string version;
  bool with_cuda = false;
  std::string cuda_archs;
  int num_threads = 1;      // CPU threads the reference uses
  bool gpu_found = false;
  std::string gpu_name;     // empty without a GPU
  int gpu_sm_count = 0;
  int gpu_compute_capability = 0;  // 90 for Hopper
  int64_t gpu_memory_bytes = 0;
  std::string cuda_specializations;  // "head_dim/q dtype/kv dtype, ..." compiled in
};
BuildInfo build_info();

}  // namespace tripath
