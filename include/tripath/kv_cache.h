// Paged KV cache: configuration, the element addressing of every layout, and views of K/V caches
// and of the MLA latent cache. The addressing functions here are the single definition of each
// layout; the CPU reference and the CUDA writers/readers all follow them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tripath/dtype.h"
#include "tripath/tensor.h"

namespace tripath {

enum class KvLayout : uint8_t {
  kNHD,    // [num_blocks, block_size, num_kv_heads, head_dim]
  kHND,    // [num_blocks, num_kv_heads, block_size, head_dim]
  kTiled,  // [num_blocks, num_kv_heads, block_size, head_dim] with the 16-byte chunks of each
           // row XOR-swizzled (see tiled_chunk()), so a (block, head) page copied to shared
           // memory in one bulk copy is read by ldmatrix without bank conflicts.
};
const char* layout_name(KvLayout l);         // "nhd", "hnd", "tiled"
KvLayout parse_layout(const std::string& name);

// Head dims every MHA backend supports; others are refused by name.
inline constexpr int kSupportedHeadDims[] = {64, 80, 96, 128, 192, 256};
bool is_supported_head_dim(int head_dim);
std::string supported_head_dims_text();  // "{64, 80, 96, 128, 192, 256}"

// Tokens per cache block: a power of two (kernels index blocks by shifts and masks) in
// [1, kMaxBlockSize].
inline constexpr int kMaxBlockSize = 256;
constexpr bool is_power_of_two(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }
// The exponent of a power of two (block sizes, chunk counts), as kernels take them for shifts.
constexpr int log2_of(int x) {
  int l = 0;
  while ((1 << l) < x) ++l;
  return l;
}
constexpr bool is_valid_block_size(int64_t block_size) {
  return is_power_of_two(block_size) && block_size <= kMaxBlockSize;
}

struct KvCacheConfig {
  int64_t num_blocks = 0;
  int block_size = 16;  // power of two, 1..256
  int num_kv_heads = 0;
  int head_dim = 0;
  DType dtype = DType::kBF16;
  KvLayout layout = KvLayout::kNHD;
  // fp8 only: stored = e4m3(x / scale), read = e4m3 * scale. One scale per tensor.
  float k_scale = 1.0f;
  float v_scale = 1.0f;

  void validate() const;  // throws tripath::Error naming the bad field
  int64_t elements_per_tensor() const;
  int64_t bytes_per_tensor() const;
  // The storage shape of one of K or V (the same for NHD/HND/tiled element counts).
  std::vector<int64_t> shape() const;
};

// Tiled layout: within a row of `chunks` 16-byte chunks, logical chunk c of row r sits at
// physical chunk (c & ~(w-1)) | ((c ^ r) & (w-1)), w = the largest power of two <= min(8, chunks)
// dividing chunks. A bijection on every row, for every head dim and dtype.
int tiled_chunk(int chunk, int row, int chunks_per_row);

// Element offset of (block, slot-in-block, kv head, dim) in one K or V tensor.
int64_t kv_cache_offset(const KvCacheConfig& c, int64_t block, int slot, int head, int dim);

struct KvCacheView {
  KvCacheConfig config;
  TensorView k;  // storage of config.shape(), dtype config.dtype (fp8 may be given as uint8)
  TensorView v;
  void validate(Device device) const;
};

// MLA latent cache: one row of 576 per token = 512 latent (c_kv after RMSNorm) + 64 rotary key.
inline constexpr int kMlaLatentDim = 512;
inline constexpr int kMlaRopeDim = 64;
inline constexpr int kMlaEntryDim = kMlaLatentDim + kMlaRopeDim;  // 576
inline constexpr int kMlaNopeDim = 128;   // qk_nope_head_dim
inline constexpr int kMlaQkDim = kMlaNopeDim + kMlaRopeDim;  // 192, non-absorbed q/k
inline constexpr int kMlaVDim = 128;      // v_head_dim

struct MlaCacheConfig {
  int64_t num_blocks = 0;
  int block_size = 16;
  DType dtype = DType::kBF16;
  float scale = 1.0f;  // fp8 only, per tensor

  void validate() const;
  int64_t elements() const { return num_blocks * block_size * kMlaEntryDim; }
  std::vector<int64_t> shape() const { return {num_blocks, block_size, kMlaEntryDim}; }
};

struct MlaCacheView {
  MlaCacheConfig config;
  TensorView latent;  // [num_blocks, block_size, 576]
  void validate(Device device) const;
};

}  // namespace tripath
