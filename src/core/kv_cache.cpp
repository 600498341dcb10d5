#include "tripath/kv_cache.h"

#include <string>

#include "tripath/error.h"

namespace tripath {

const char* layout_name(KvLayout l) {
  switch (l) {
    case KvLayout::kNHD: return "nhd";
    case KvLayout::kHND: return "hnd";
    case KvLayout::kTiled: return "tiled";
  }
  return "unknown";
}

KvLayout parse_layout(const std::string& name) {
  if (name == "nhd" || name == "NHD") return KvLayout::kNHD;
  if (name == "hnd" || name == "HND") return KvLayout::kHND;
  if (name == "tiled") return KvLayout::kTiled;
  throw_arg_error("layout", name, "one of nhd, hnd, tiled");
}

bool is_supported_head_dim(int head_dim) {
  for (int d : kSupportedHeadDims)
    if (d == head_dim) return true;
  return false;
}

std::string supported_head_dims_text() {
  std::string s = "{";
  for (int d : kSupportedHeadDims) {
    if (s.size() > 1) s += ", ";
    s += std::to_string(d);
  }
  return s + "}";
}

namespace {
void check_block_size(int block_size, const char* name) {
  TRIPATH_CHECK_ARG(is_valid_block_size(block_size), name, block_size,
                    "a power of two in [1, 256]");
}

void check_scale(float scale, const char* name) {
  TRIPATH_CHECK_ARG(scale > 0.0f && scale < 1e30f, name, scale, "a positive finite scale");
}

bool is_cache_dtype(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kFP8E4M3;
}

void check_storage(const TensorView& t, const char* name, DType dtype, int64_t elements,
                   Device device) {
  TRIPATH_CHECK_ARG(t.defined(), name, "no tensor", "the cache storage tensor");
  TRIPATH_CHECK_ARG(dtype_size(t.dtype) == dtype_size(dtype), name,
                    std::string("dtype ") + dtype_name(t.dtype),
                    std::string("a ") + std::to_string(dtype_size(dtype)) +
                        "-byte element type for a " + dtype_name(dtype) + " cache");
  TRIPATH_CHECK_ARG(t.numel() == elements, name, std::to_string(t.numel()) + " elements",
                    std::to_string(elements) + " elements (the cache config's shape)");
  TRIPATH_CHECK_ARG(t.is_contiguous(), name, "a strided tensor", "a contiguous tensor");
  TRIPATH_CHECK_ARG(t.device == device, name, device_name(t.device),
                    std::string("a ") + device_name(device) + " tensor");
  TRIPATH_CHECK_ARG(t.data != nullptr || elements == 0, name, "a null pointer", "memory");
}
}  // namespace

void KvCacheConfig::validate() const {
  TRIPATH_CHECK_ARG(num_blocks > 0, "cache.num_blocks", num_blocks, "a positive block count");
  check_block_size(block_size, "cache.block_size");
  TRIPATH_CHECK_ARG(num_kv_heads > 0, "cache.num_kv_heads", num_kv_heads, "at least 1");
  TRIPATH_CHECK_ARG(is_supported_head_dim(head_dim), "cache.head_dim", head_dim,
                    "one of " + supported_head_dims_text());
  TRIPATH_CHECK_ARG(is_cache_dtype(dtype), "cache.dtype", dtype_name(dtype),
                    "one of f32, f16, bf16, fp8_e4m3");
  check_scale(k_scale, "cache.k_scale");
  check_scale(v_scale, "cache.v_scale");
}

int64_t KvCacheConfig::elements_per_tensor() const {
  return num_blocks * block_size * num_kv_heads * static_cast<int64_t>(head_dim);
}

int64_t KvCacheConfig::bytes_per_tensor() const {
  return elements_per_tensor() * static_cast<int64_t>(dtype_size(dtype));
}

std::vector<int64_t> KvCacheConfig::shape() const {
  if (layout == KvLayout::kNHD) return {num_blocks, block_size, num_kv_heads, head_dim};
  return {num_blocks, num_kv_heads, block_size, head_dim};
}

int tiled_chunk(int chunk, int row, int chunks_per_row) {
  int w = 8;
  while (w > 1 && (w > chunks_per_row || chunks_per_row % w != 0)) w >>= 1;
  return (chunk & ~(w - 1)) | ((chunk ^ row) & (w - 1));
}

int64_t kv_cache_offset(const KvCacheConfig& c, int64_t block, int slot, int head, int dim) {
  const int64_t d = c.head_dim;
  switch (c.layout) {
    case KvLayout::kNHD:
      return ((block * c.block_size + slot) * c.num_kv_heads + head) * d + dim;
    case KvLayout::kHND:
      return ((block * c.num_kv_heads + head) * c.block_size + slot) * d + dim;
    case KvLayout::kTiled: {
      const int per_chunk = static_cast<int>(16 / dtype_size(c.dtype));
      const int chunks = c.head_dim / per_chunk;  // every supported head dim divides evenly
      const int phys = tiled_chunk(dim / per_chunk, slot, chunks);
      return ((block * c.num_kv_heads + head) * c.block_size + slot) * d +
             static_cast<int64_t>(phys) * per_chunk + dim % per_chunk;
    }
  }
  return 0;
}

void KvCacheView::validate(Device device) const {
  config.validate();
  check_storage(k, "k_cache", config.dtype, config.elements_per_tensor(), device);
  check_storage(v, "v_cache", config.dtype, config.elements_per_tensor(), device);
}

void MlaCacheConfig::validate() const {
  TRIPATH_CHECK_ARG(num_blocks > 0, "mla_cache.num_blocks", num_blocks, "a positive count");
  check_block_size(block_size, "mla_cache.block_size");
  TRIPATH_CHECK_ARG(is_cache_dtype(dtype), "mla_cache.dtype", dtype_name(dtype),
                    "one of f32, f16, bf16, fp8_e4m3");
  check_scale(scale, "mla_cache.scale");
}

void MlaCacheView::validate(Device device) const {
  config.validate();
  check_storage(latent, "latent_cache", config.dtype, config.elements(), device);
}

}  // namespace tripath
