// Runtime -> template dispatch of the split-KV decode kernel over the generated specialization
// table (the unified kernel's: one table, read by both).
#include "common/device_math.cuh"
#include "decode/launch.h"
#include "specializations.h"

namespace tripath::kernels {

bool decode_built(int head_dim, DType q, DType kv) {
#define X(D, T, K, QE, KE) \
  if (head_dim == D && q == DType::QE && kv == DType::KE) return true;
  TRIPATH_UNIFIED_SPECIALIZATIONS(X)
#undef X
  return false;
}

bool decode_cluster_built(int head_dim, DType q, DType kv) {
#define X(D, T, K, QE, KE) \
  if (head_dim == D && q == DType::QE && kv == DType::KE) return kDecodeClusterBuilt<D, T, K>;
  TRIPATH_UNIFIED_SPECIALIZATIONS(X)
#undef X
  return false;
}

int decode_cluster_capacity(int head_dim, DType q, DType kv) {
#define X(D, T, K, QE, KE)                                \
  if (head_dim == D && q == DType::QE && kv == DType::KE) \
    return decode_cluster_capacity_impl<D, T, K>();
  TRIPATH_UNIFIED_SPECIALIZATIONS(X)
#undef X
  return 0;
}

bool decode_kernel_supports(int head_dim, DType q, DType kv, int group, int max_query_len,
                            std::string* why) {
  auto no = [&](const std::string& reason) {
    if (why != nullptr) *why = reason;
    return false;
  };
  if (!decode_built(head_dim, q, kv)) {
    return no("no decode kernel built for head dim " + std::to_string(head_dim) + ", q " +
              dtype_name(q) + ", cache " + dtype_name(kv));
  }
  if (group < 1 || max_query_len < 0 || max_query_len * group > 16) {
    return no("query_len " + std::to_string(max_query_len) + " x GQA group " +
              std::to_string(group) + " exceeds the decode kernel's 16-row tile");
  }
  return true;
}

cudaError_t launch_paged_decode(int head_dim, DType q, DType kv, const UnifiedParams& p,
                                cudaStream_t stream) {
#define X(D, T, K, QE, KE)                                \
  if (head_dim == D && q == DType::QE && kv == DType::KE) \
    return launch_paged_decode_impl<D, T, K>(p, stream);
  TRIPATH_UNIFIED_SPECIALIZATIONS(X)
#undef X
  return cudaErrorInvalidValue;  // the backend checks decode_kernel_supports() first
}

}  // namespace tripath::kernels
