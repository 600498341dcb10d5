#include "bench_step.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "tripath/block_allocator.h"
#include "tripath/reference.h"

namespace tripath::cli {

namespace {

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

TensorView view_of(void* data, DType dtype, const std::vector<int64_t>& shape) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = Device::kCPU;
  t.ndim = static_cast<int>(shape.size());
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.shape[d] = shape[static_cast<size_t>(d)];
    t.strides[d] = stride;
    stride *= shape[static_cast<size_t>(d)];
  }
  return t;
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Independent streams for the buffers of one step.
uint64_t stream_seed(uint64_t seed, uint64_t stream) {
  uint64_t state = seed * 0x100000001B3ull + stream;
  return splitmix64(state);
}

enum Stream : uint64_t {
  kShuffle = 1,
  kBlocks,
  kQuery,
  kKey,
  kValue,
  kSinks,
  kContextKey,
  kContextValue,
  kLatent,
  kContextLatent,
  kQueryAbsorbed,
  kKvBProj,
};

// Slots of the context tokens [0, context_len) of every request of the ordered plan.
std::vector<int64_t> context_slots(const StepPlan& plan) {
  std::vector<int64_t> slots;
  for (int32_t i = 0; i < plan.num_requests; ++i) {
    const int32_t* row = plan.block_row(i);
    for (int32_t p = 0; p < plan.context_lens[static_cast<size_t>(i)]; ++p) {
      slots.push_back(static_cast<int64_t>(row[p / plan.block_size]) * plan.block_size +
                      p % plan.block_size);
    }
  }
  return slots;
}

// Context rows are generated and written in chunks so a 1M-token context needs no 1M-row
// staging buffer.
constexpr int64_t kContextChunkTokens = 16384;

}  // namespace

Buffer::Buffer(DType dtype, std::initializer_list<int64_t> shape)
    : Buffer(dtype, std::vector<int64_t>(shape)) {}

Buffer::Buffer(DType dtype, const std::vector<int64_t>& shape) {
  storage.assign(static_cast<size_t>(product(shape)) * dtype_size(dtype), 0);
  view = view_of(storage.data(), dtype, shape);
}

void fill_random(const TensorView& t, uint64_t seed, float magnitude) {
  uint64_t state = seed;
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t bits = splitmix64(state);
    const float u = static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    const float value = (0.05f + 0.95f * u) * magnitude;
    store_float(t.data, t.dtype, i, (bits & 1) ? -value : value);
  }
}

PlannedStep plan_random_step(const StepLengths& lengths, int num_kv_heads,
                             const StepSettings& settings) {
  const size_t n = lengths.query_lens.size();
  // The engine's batch arrives in no particular order.
  std::vector<size_t> perm(n);
  std::iota(perm.begin(), perm.end(), size_t{0});
  std::mt19937_64 shuffle_rng(stream_seed(settings.seed, kShuffle));
  std::shuffle(perm.begin(), perm.end(), shuffle_rng);

  PlannedStep out;
  StepInput input;
  int64_t needed = 0, stride = 1;
  for (size_t i = 0; i < n; ++i) {
    input.query_lens.push_back(lengths.query_lens[perm[i]]);
    input.context_lens.push_back(lengths.context_lens[perm[i]]);
    const int64_t blocks = BlockAllocator::blocks_for_tokens(
        static_cast<int64_t>(input.query_lens.back()) + input.context_lens.back(),
        settings.block_size);
    needed += blocks;
    stride = std::max(stride, blocks);
  }
  // A fragmented cache: every request's blocks are scattered over a pool larger than needed.
  const int64_t num_blocks =
      std::max<int64_t>(needed + 1, static_cast<int64_t>(std::ceil(needed * settings.pool_factor)));
  std::vector<int32_t> pool(static_cast<size_t>(num_blocks));
  std::iota(pool.begin(), pool.end(), 0);
  std::mt19937_64 block_rng(stream_seed(settings.seed, kBlocks));
  std::shuffle(pool.begin(), pool.end(), block_rng);
  std::vector<int32_t> table(n * static_cast<size_t>(stride), 0);
  size_t next = 0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t blocks = BlockAllocator::blocks_for_tokens(
        static_cast<int64_t>(input.query_lens[i]) + input.context_lens[i], settings.block_size);
    for (int64_t j = 0; j < blocks; ++j) table[i * static_cast<size_t>(stride) + j] = pool[next++];
  }

  input.block_table = table.data();
  input.block_table_stride = stride;
  input.num_cache_blocks = num_blocks;
  input.block_size = settings.block_size;
  input.num_work_units = settings.num_work_units;
  input.split_waves = settings.split_waves;
  input.num_kv_heads = num_kv_heads;

  StepPlan plan = plan_step(input);
  if (plan.is_ordered) {
    out.block_storage = std::move(table);
    out.input = input;
    out.input.block_table = out.block_storage.data();
    out.plan = std::move(plan);
  } else {
    // Lay the batch out as [decode | extend | prefill], as an engine's model runner would.
    out.input = ordered_input(input, plan, out.block_storage);
    out.input.block_table = out.block_storage.data();
    out.plan = plan_step(out.input);
    out.input_was_shuffled = true;
  }
  return out;
}

MhaStep build_mha_step(const ModelPreset& model, const StepLengths& lengths,
                       const StepSettings& settings) {
  MhaStep s;
  s.step = plan_random_step(lengths, model.num_kv_heads, settings);
  const StepPlan& plan = s.step.plan;
  const int64_t tokens = plan.num_tokens;
  const int hq = model.num_q_heads, hkv = model.num_kv_heads, d = model.head_dim;

  s.params.num_q_heads = hq;
  s.params.num_kv_heads = hkv;
  s.params.head_dim = d;
  s.params.softcap = model.softcap;
  s.params.has_sinks = model.has_sinks;

  KvCacheConfig config;
  config.num_blocks = plan.num_cache_blocks;
  config.block_size = settings.block_size;
  config.num_kv_heads = hkv;
  config.head_dim = d;
  config.dtype = settings.cache_dtype;
  config.layout = settings.layout;
  config.validate();
  s.params.validate(config);

  s.q = Buffer(settings.act_dtype, {tokens, hq, d});
  s.k = Buffer(settings.act_dtype, {tokens, hkv, d});
  s.v = Buffer(settings.act_dtype, {tokens, hkv, d});
  s.out = Buffer(settings.act_dtype, {tokens, hq, d});
  fill_random(s.q.view, stream_seed(settings.seed, kQuery), 1.0f);
  fill_random(s.k.view, stream_seed(settings.seed, kKey), 1.0f);
  fill_random(s.v.view, stream_seed(settings.seed, kValue), 1.0f);
  if (model.has_sinks) {
    s.sinks = Buffer(DType::kF32, {hq});
    fill_random(s.sinks.view, stream_seed(settings.seed, kSinks), 2.0f);
  }
  s.cache_k = Buffer(config.dtype, config.shape());
  s.cache_v = Buffer(config.dtype, config.shape());

  s.inputs.q = s.q.view;
  s.inputs.k = s.k.view;
  s.inputs.v = s.v.view;
  s.inputs.out = s.out.view;
  if (model.has_sinks) s.inputs.sinks = s.sinks.view;
  s.inputs.cache.config = config;
  s.inputs.cache.k = s.cache_k.view;
  s.inputs.cache.v = s.cache_v.view;

  const std::vector<int64_t> slots = context_slots(plan);
  const int64_t total = static_cast<int64_t>(slots.size());
  for (int64_t begin = 0, chunk = 0; begin < total; begin += kContextChunkTokens, ++chunk) {
    const int64_t count = std::min(kContextChunkTokens, total - begin);
    Buffer ck(settings.act_dtype, {count, hkv, d});
    Buffer cv(settings.act_dtype, {count, hkv, d});
    fill_random(ck.view, stream_seed(settings.seed, kContextKey) + static_cast<uint64_t>(chunk),
                1.0f);
    fill_random(cv.view, stream_seed(settings.seed, kContextValue) + static_cast<uint64_t>(chunk),
                1.0f);
    reference::write_kv_cache(s.inputs.cache, ck.view, cv.view, slots.data() + begin, count);
  }
  return s;
}

MlaStep build_mla_step(const ModelPreset& model, const StepLengths& lengths,
                       const StepSettings& settings) {
  MlaStep s;
  s.step = plan_random_step(lengths, 1, settings);
  const StepPlan& plan = s.step.plan;
  const int64_t tokens = plan.num_tokens;
  const int64_t decode_tokens = plan.decode.num_tokens();
  const int64_t other_tokens = tokens - decode_tokens;
  const int h = model.num_q_heads;

  s.params.num_heads = h;
  s.params.validate();

  MlaCacheConfig config;
  config.num_blocks = plan.num_cache_blocks;
  config.block_size = settings.block_size;
  config.dtype = settings.cache_dtype;
  config.validate();

  s.latent = Buffer(settings.act_dtype, {tokens, kMlaEntryDim});
  fill_random(s.latent.view, stream_seed(settings.seed, kLatent), 1.0f);
  s.cache = Buffer(config.dtype, config.shape());
  s.inputs.latent = s.latent.view;
  s.inputs.cache.config = config;
  s.inputs.cache.latent = s.cache.view;
  if (decode_tokens > 0) {
    s.q_absorbed = Buffer(settings.act_dtype, {decode_tokens, h, kMlaEntryDim});
    s.out_absorbed = Buffer(settings.act_dtype, {decode_tokens, h, kMlaLatentDim});
    fill_random(s.q_absorbed.view, stream_seed(settings.seed, kQueryAbsorbed), 1.0f);
    s.inputs.q_absorbed = s.q_absorbed.view;
    s.inputs.out_absorbed = s.out_absorbed.view;
  }
  if (other_tokens > 0) {
    s.q = Buffer(settings.act_dtype, {other_tokens, h, kMlaQkDim});
    s.kv_b_proj =
        Buffer(settings.act_dtype, {kMlaLatentDim, int64_t{h} * (kMlaNopeDim + kMlaVDim)});
    s.out = Buffer(settings.act_dtype, {other_tokens, h, kMlaVDim});
    fill_random(s.q.view, stream_seed(settings.seed, kQuery), 1.0f);
    // Keeps decompressed keys and values near unit size (512 latent terms per element).
    fill_random(s.kv_b_proj.view, stream_seed(settings.seed, kKvBProj), 0.1f);
    s.inputs.q = s.q.view;
    s.inputs.kv_b_proj = s.kv_b_proj.view;
    s.inputs.out = s.out.view;
  }

  const std::vector<int64_t> slots = context_slots(plan);
  const int64_t total = static_cast<int64_t>(slots.size());
  for (int64_t begin = 0, chunk = 0; begin < total; begin += kContextChunkTokens, ++chunk) {
    const int64_t count = std::min(kContextChunkTokens, total - begin);
    Buffer rows(settings.act_dtype, {count, kMlaEntryDim});
    fill_random(rows.view,
                stream_seed(settings.seed, kContextLatent) + static_cast<uint64_t>(chunk), 1.0f);
    reference::write_mla_cache(s.inputs.cache, rows.view, slots.data() + begin, count);
  }
  return s;
}

}  // namespace tripath::cli
