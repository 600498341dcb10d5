// Parameters of the KV-cache write kernel (the reshape_and_cache of serving engines).
#pragma once

#include <cstdint>

namespace tripath::kernels {

struct CacheWriteParams {
  const void* k;               // [num_tokens, num_kv_heads, head_dim] T
  const void* v;               // [num_tokens, num_kv_heads, head_dim] T
  void* k_cache;               // layout `layout`, element CacheT (T or fp8 e4m3)
  void* v_cache;
  const int64_t* slot_mapping; // [num_tokens]; -1: skip the token
  int64_t num_tokens;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t block_size;
  int32_t layout;              // KvLayoutId
  float k_scale;               // fp8: stored = e4m3(x / k_scale) (true division); 1 otherwise
  float v_scale;
};

}  // namespace tripath::kernels
