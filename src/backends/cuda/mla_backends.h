// The MLA CUDA backends behind the registry and the device-dispatching write_mla_cache entry.
// CUDA-free on purpose: the registry and the dispatch entry include it.
#pragma once

#include <memory>

#include "tripath/backend.h"

namespace tripath {

// "mla": heads packed in the MMA M dimension, each latent tile loaded once per split and row
// block. "mla_baseline": two-stage split-KV decode with 16-row blocks (the Triton MLA analog).
// Both run extend/prefill non-absorbed (cuBLAS decompression + 192/128 attention: the Hopper
// flash kernel for mla on compute capability 9.0, the unified kernel otherwise).
std::unique_ptr<MlaBackend> make_mla_backend();
std::unique_ptr<MlaBackend> make_mla_baseline_backend();

// New latent rows -> MLA cache slots on the device (slot -1 skipped), asynchronous on `stream`.
void cuda_write_mla_cache(const MlaCacheView& cache, const TensorView& latent,
                          const TensorView& slot_mapping, void* stream);

}  // namespace tripath
