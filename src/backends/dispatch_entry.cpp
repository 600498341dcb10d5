// Device-dispatching entry points: CPU tensors go to the reference, CUDA tensors to the kernels.
#include "tripath/backend.h"
#include "tripath/error.h"
#include "tripath/reference.h"

#ifdef TRIPATH_WITH_CUDA
#include "cuda/cuda_entry.h"
#include "cuda/mla_backends.h"
#endif

namespace tripath {

#ifndef TRIPATH_WITH_CUDA
namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw_arg_error(what, "a cuda tensor", "a cpu tensor (this build has no CUDA support)");
}
}  // namespace
#endif

void write_kv_cache(const KvCacheView& cache, const TensorView& k, const TensorView& v,
                    const TensorView& slot_mapping, void* stream) {
  check_tensor(slot_mapping, "slot_mapping", {-1}, k.device);
  check_dtype(slot_mapping, "slot_mapping", {DType::kI64});
  (void)stream;
  if (k.device == Device::kCPU) {
    reference::write_kv_cache(cache, k, v, static_cast<const int64_t*>(slot_mapping.data),
                              slot_mapping.numel());
    return;
  }
#ifdef TRIPATH_WITH_CUDA
  cuda_write_kv_cache(cache, k, v, slot_mapping, stream);
#else
  no_cuda("k");
#endif
}

void write_mla_cache(const MlaCacheView& cache, const TensorView& latent,
                     const TensorView& slot_mapping, void* stream) {
  check_tensor(slot_mapping, "slot_mapping", {-1}, latent.device);
  check_dtype(slot_mapping, "slot_mapping", {DType::kI64});
  (void)stream;
  if (latent.device == Device::kCPU) {
    reference::write_mla_cache(cache, latent, static_cast<const int64_t*>(slot_mapping.data),
                               slot_mapping.numel());
    return;
  }
#ifdef TRIPATH_WITH_CUDA
  cuda_write_mla_cache(cache, latent, slot_mapping, stream);
#else
  no_cuda("latent");
#endif
}

void merge_states(const TensorView& outs, const TensorView& lses, const TensorView& out,
                  const TensorView& lse, void* stream) {
  if (outs.device == Device::kCPU) {
    reference::merge_states(outs, lses, out, lse);
    return;
  }
#ifdef TRIPATH_WITH_CUDA
  cuda_merge_states(outs, lses, out, lse, stream);
#else
  (void)stream;
  no_cuda("outs");
#endif
}

}  // namespace tripath
