#include "gpu_test_util.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace tripath::gputest {

std::string gpu_unavailable_reason() {
#ifndef TRIPATH_WITH_CUDA
  return "built without CUDA (configure with -DTRIPATH_CUDA=ON)";
#else
  const BuildInfo info = build_info();
  if (!info.gpu_found) return "no CUDA GPU found";
  return "";
#endif
}

bool timing_enabled(const char* name) {
  const char* env = std::getenv(name);
  return env != nullptr && !std::string(env).empty() && std::string(env) != "0";
}

#ifdef TRIPATH_WITH_CUDA
void DeviceMem::resize(size_t bytes) {
  if (bytes <= bytes_ && ptr_ != nullptr) return;
  if (ptr_) cudaFree(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
  if (cudaMalloc(&ptr_, std::max<size_t>(bytes, 16)) != cudaSuccess) {
    ptr_ = nullptr;
    ADD_FAILURE() << "cudaMalloc of " << bytes << " bytes failed";
    return;
  }
  bytes_ = bytes;
}

double median_launch_us(const std::function<void()>& launch, int warmup, int reps,
                        const std::function<void()>& before) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < warmup; ++i) launch();
  std::vector<float> us;
  for (int i = 0; i < reps; ++i) {
    if (before) before();
    cudaEventRecord(start);
    launch();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    us.push_back(ms * 1000.0f);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(us.begin(), us.end());
  return us.empty() ? 0.0 : double(us[us.size() / 2]);
}
#endif

namespace {

uint16_t to_bits(float x, DType t) { return t == DType::kBF16 ? float_to_bf16(x) : float_to_f16(x); }

uint8_t poison_byte(DType t) { return t == DType::kFP8E4M3 ? 0x7F : 0xFF; }  // NaN patterns

}  // namespace

std::vector<float> widen(const std::vector<uint16_t>& bits, DType dtype) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i)
    out[i] = dtype == DType::kBF16 ? bf16_to_float(bits[i]) : f16_to_float(bits[i]);
  return out;
}

void plan_shuffled_step(const std::vector<ReqShape>& reqs, int block_size, int decode_threshold,
                        int64_t extend_chunk_budget, int num_work_units, int num_kv_heads,
                        bool ordered, std::mt19937_64& rng, StepInput& input,
                        std::vector<int32_t>& table, StepPlan& plan, int decode_segments) {
  int64_t needed = 0;
  int32_t max_blocks = 1;
  for (const ReqShape& r : reqs) {
    const int64_t b = (int64_t(r.query_len) + r.context_len + block_size - 1) / block_size;
    needed += b;
    max_blocks = std::max<int32_t>(max_blocks, static_cast<int32_t>(b));
  }
  const int64_t pool = needed * 5 / 2 + 3;
  std::vector<int32_t> ids(static_cast<size_t>(pool));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  const int32_t stride = max_blocks + 2;
  table.assign(reqs.size() * stride, -1);
  size_t next = 0;
  for (size_t r = 0; r < reqs.size(); ++r) {
    const int64_t b =
        (int64_t(reqs[r].query_len) + reqs[r].context_len + block_size - 1) / block_size;
    for (int64_t j = 0; j < b; ++j) table[r * stride + j] = ids[next++];
  }
  input = StepInput{};
  input.block_table = table.data();
  input.block_table_stride = stride;
  input.num_cache_blocks = pool;
  input.block_size = block_size;
  input.decode_threshold = decode_threshold;
  input.num_work_units = num_work_units;
  input.num_kv_heads = num_kv_heads;
  input.extend_chunk_budget = extend_chunk_budget;
  input.decode_segments = decode_segments;
  for (const ReqShape& r : reqs) {
    input.query_lens.push_back(r.query_len);
    input.context_lens.push_back(r.context_len);
  }
  plan = plan_step(input);
  if (ordered && !plan.is_ordered) {
    std::vector<int32_t> storage;
    input = ordered_input(input, plan, storage);
    table = storage;
    input.block_table = table.data();
    plan = plan_step(input);
  }
}

HostStep make_step(const std::vector<ReqShape>& reqs, int q_heads, int kv_heads, int head_dim,
                   int block_size, KvLayout layout, DType dtype, DType cache_dtype, bool ordered,
                   int decode_threshold, int num_work_units, uint64_t seed,
                   int64_t extend_chunk_budget, int decode_segments) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  HostStep s;
  s.dtype = dtype;
  plan_shuffled_step(reqs, block_size, decode_threshold, extend_chunk_budget, num_work_units,
                     kv_heads, ordered, rng, s.input, s.block_table, s.plan, decode_segments);
  const int64_t pool = s.input.num_cache_blocks;

  s.cache.num_blocks = pool;
  s.cache.block_size = block_size;
  s.cache.num_kv_heads = kv_heads;
  s.cache.head_dim = head_dim;
  s.cache.dtype = cache_dtype;
  s.cache.layout = layout;
  if (cache_dtype == DType::kFP8E4M3) s.cache.k_scale = s.cache.v_scale = 0.025f;
  const size_t cache_bytes = static_cast<size_t>(s.cache.bytes_per_tensor());
  s.k_cache.assign(cache_bytes, poison_byte(cache_dtype));
  s.v_cache.assign(cache_bytes, poison_byte(cache_dtype));

  // Context tokens go in through the reference writer (f32 source), as earlier steps would have.
  int64_t ctx_tokens = 0;
  for (int32_t i = 0; i < s.plan.num_requests; ++i) ctx_tokens += s.plan.context_lens[i];
  std::vector<float> ck(static_cast<size_t>(ctx_tokens) * kv_heads * head_dim), cv(ck.size());
  for (float& x : ck) x = normal(rng);
  for (float& x : cv) x = normal(rng);
  std::vector<int64_t> slots;
  for (int32_t i = 0; i < s.plan.num_requests; ++i)
    for (int32_t pos = 0; pos < s.plan.context_lens[i]; ++pos)
      slots.push_back(int64_t(s.plan.block_row(i)[pos / block_size]) * block_size + pos % block_size);
  KvCacheView view{s.cache,
                   TensorView::contiguous(s.k_cache.data(), cache_dtype, {int64_t(cache_bytes / dtype_size(cache_dtype))}),
                   TensorView::contiguous(s.v_cache.data(), cache_dtype, {int64_t(cache_bytes / dtype_size(cache_dtype))})};
  reference::write_kv_cache(view,
                            TensorView::contiguous(ck.data(), DType::kF32, {ctx_tokens, kv_heads, head_dim}),
                            TensorView::contiguous(cv.data(), DType::kF32, {ctx_tokens, kv_heads, head_dim}),
                            slots.data(), ctx_tokens);

  const int64_t n = s.plan.num_tokens;
  s.q.resize(static_cast<size_t>(n * q_heads * head_dim));
  s.k.resize(static_cast<size_t>(n * kv_heads * head_dim));
  s.v.resize(s.k.size());
  for (auto& x : s.q) x = to_bits(normal(rng), dtype);
  for (auto& x : s.k) x = to_bits(normal(rng), dtype);
  for (auto& x : s.v) x = to_bits(normal(rng), dtype);
  s.sinks.resize(q_heads);
  for (float& x : s.sinks) x = normal(rng);
  return s;
}

double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    num += double(got[i] - want[i]) * (got[i] - want[i]);
    den += double(want[i]) * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace tripath::gputest
