#include <string>

#include "tripath/error.h"
#include "tripath/reference.h"

namespace tripath::reference {
namespace {

void check_slot(int64_t slot, int64_t num_slots, int64_t t) {
  TRIPATH_CHECK_ARG(slot >= -1 && slot < num_slots, "slot_mapping[" + std::to_string(t) + "]",
                    slot, "-1 (skip) or a slot in [0, " + std::to_string(num_slots) + ")");
}

}  // namespace

void write_kv_cache(const KvCacheView& cache, const TensorView& k, const TensorView& v,
                    const int64_t* slot_mapping, int64_t num_tokens) {
  cache.validate(Device::kCPU);
  const KvCacheConfig& c = cache.config;
  check_tensor(k, "k", {num_tokens, c.num_kv_heads, c.head_dim}, Device::kCPU);
  check_tensor(v, "v", {num_tokens, c.num_kv_heads, c.head_dim}, Device::kCPU);
  check_dtype(k, "k", {DType::kF32, DType::kF16, DType::kBF16});
  check_dtype(v, "v", {DType::kF32, DType::kF16, DType::kBF16});
  TRIPATH_CHECK_ARG(slot_mapping != nullptr || num_tokens == 0, "slot_mapping", "null",
                    "one slot per token");
  const int64_t num_slots = c.num_blocks * c.block_size;
  for (int64_t t = 0; t < num_tokens; ++t) check_slot(slot_mapping[t], num_slots, t);
  // fp8 stores e4m3(x / scale): a true division, as the CUDA writer does, so caches agree.
  const bool fp8 = c.dtype == DType::kFP8E4M3;
  const float k_div = fp8 ? c.k_scale : 1.0f;
  const float v_div = fp8 ? c.v_scale : 1.0f;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;
    const int64_t block = slot / c.block_size;
    const int offset = static_cast<int>(slot % c.block_size);
    for (int h = 0; h < c.num_kv_heads; ++h) {
      for (int d = 0; d < c.head_dim; ++d) {
        const int64_t src = (t * c.num_kv_heads + h) * c.head_dim + d;
        const int64_t dst = kv_cache_offset(c, block, offset, h, d);
        store_float(cache.k.data, c.dtype, dst, load_float(k.data, k.dtype, src) / k_div);
        store_float(cache.v.data, c.dtype, dst, load_float(v.data, v.dtype, src) / v_div);
      }
    }
  }
}

void write_mla_cache(const MlaCacheView& cache, const TensorView& latent,
                     const int64_t* slot_mapping, int64_t num_tokens) {
  cache.validate(Device::kCPU);
  const MlaCacheConfig& c = cache.config;
  check_tensor(latent, "latent", {num_tokens, kMlaEntryDim}, Device::kCPU);
  check_dtype(latent, "latent", {DType::kF32, DType::kF16, DType::kBF16});
  TRIPATH_CHECK_ARG(slot_mapping != nullptr || num_tokens == 0, "slot_mapping", "null",
                    "one slot per token");
  const int64_t num_slots = c.num_blocks * c.block_size;
  for (int64_t t = 0; t < num_tokens; ++t) check_slot(slot_mapping[t], num_slots, t);
  const float div = c.dtype == DType::kFP8E4M3 ? c.scale : 1.0f;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;
    for (int e = 0; e < kMlaEntryDim; ++e) {
      store_float(cache.latent.data, c.dtype, slot * kMlaEntryDim + e,
                  load_float(latent.data, latent.dtype, t * kMlaEntryDim + e) / div);
    }
  }
}

}  // namespace tripath::reference
