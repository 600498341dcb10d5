// CUDA implementations behind the device-dispatching public entry points and the registry.
#pragma once

#include <memory>

#include "tripath/backend.h"

namespace tripath {

void cuda_write_kv_cache(const KvCacheView& cache, const TensorView& k, const TensorView& v,
                         const TensorView& slot_mapping, void* stream);
void cuda_merge_states(const TensorView& outs, const TensorView& lses, const TensorView& out,
                       const TensorView& lse, void* stream);

std::unique_ptr<AttentionBackend> make_unified_backend();
std::unique_ptr<AttentionBackend> make_two_path_backend();
std::unique_ptr<AttentionBackend> make_three_path_backend();

// "64/bf16/bf16, ..." kernels this build compiled.
std::string cuda_specializations_text();

}  // namespace tripath
