// Runtime -> template dispatch of the unified kernel over the generated specialization table.
#include "common/device_math.cuh"
#include "specializations.h"
#include "unified/launch.h"

namespace tripath::kernels {

bool unified_built(int head_dim, DType q, DType kv) {
#define X(D, T, K, QE, KE) \
  if (head_dim == D && q == DType::QE && kv == DType::KE) return true;
  TRIPATH_UNIFIED_SPECIALIZATIONS(X)
#undef X
  return false;
}

std::string unified_built_text() {
  std::string s;
#define X(D, T, K, QE, KE)                                                                \
  s += (s.empty() ? "" : ", ") + std::to_string(D) + "/" + dtype_name(DType::QE) + "/" + \
       dtype_name(DType::KE);
  TRIPATH_UNIFIED_SPECIALIZATIONS(X)
#undef X
  return s;
}

cudaError_t launch_unified(int head_dim, DType q, DType kv, const UnifiedParams& p,
                           UnifiedTile tile, cudaStream_t stream) {
#define X(D, T, K, QE, KE)                                      \
  if (head_dim == D && q == DType::QE && kv == DType::KE)       \
    return launch_unified_impl<D, T, K>(p, tile, stream);
  TRIPATH_UNIFIED_SPECIALIZATIONS(X)
#undef X
  return cudaErrorInvalidValue;  // the backend checks unified_built() first
}

}  // namespace tripath::kernels
