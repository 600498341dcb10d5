#include "bench_gpu.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tripath/kv_cache.h"

namespace tripath::cli {
namespace {

size_t bytes_of(const TensorView& t) {
  return static_cast<size_t>(t.numel()) * dtype_size(t.dtype);
}

// A device copy of `t`; nothing for a tensor that is not given.
DeviceAllocation mirror(const TensorView& t) {
  if (!t.defined()) return DeviceAllocation();
  DeviceAllocation d(bytes_of(t));
  if (bytes_of(t) > 0) copy_to_device(d.data(), t.data, bytes_of(t));
  return d;
}

// Device memory for the output `t`, every byte 0xFF (NaN in f32, f16 and bf16): a row the backend
// never writes fails --verify instead of passing on what an earlier backend left in the host
// buffer.
DeviceAllocation poisoned(const TensorView& t) {
  if (!t.defined()) return DeviceAllocation();
  DeviceAllocation d(bytes_of(t));
  const std::vector<uint8_t> nan(bytes_of(t), 0xFF);
  if (!nan.empty()) copy_to_device(d.data(), nan.data(), nan.size());
  return d;
}

// `t` pointing at its device copy `d`; a tensor that is not given stays so.
TensorView on_device(TensorView t, const DeviceAllocation& d) {
  if (!t.defined()) return t;
  t.data = d.data();
  t.device = Device::kCUDA;
  return t;
}

void download(const TensorView& host, const DeviceAllocation& d) {
  if (host.defined() && bytes_of(host) > 0) copy_to_host(host.data, d.data(), bytes_of(host));
}

}  // namespace

int rotated_cache_copies(size_t cache_bytes, size_t l2_bytes) {
  const size_t want = 3 * l2_bytes;
  return static_cast<int>(
      std::clamp<size_t>((want + cache_bytes - 1) / std::max<size_t>(cache_bytes, 1), 1, 4));
}

// ---- MHA ----

int GpuMhaStep::copies_for(const MhaStep& host, size_t l2_bytes) {
  return rotated_cache_copies(2 * bytes_of(host.inputs.cache.k), l2_bytes);
}

GpuMhaStep::GpuMhaStep(const MhaStep& host, int cache_copies) : host_(host) {
  const AttentionInputs& in = host.inputs;
  q_ = mirror(in.q);
  k_ = mirror(in.k);
  v_ = mirror(in.v);
  out_ = poisoned(in.out);
  sinks_ = mirror(in.sinks);
  for (int c = 0; c < cache_copies; ++c) {
    cache_k_.push_back(mirror(in.cache.k));
    cache_v_.push_back(mirror(in.cache.v));
  }
  // The gather's list: one entry per cache block a decode request's context touches.
  const StepPlan& plan = host.step.plan;
  const KvCacheConfig& config = in.cache.config;
  gather_row_bytes_ = config.head_dim * static_cast<int32_t>(dtype_size(config.dtype));
  const int chunks = gather_row_bytes_ / 16;  // launch_paged_gather takes powers of two
  if (plan.decode.num_requests() > 0 && plan.extend.num_requests() == 0 &&
      plan.prefill.num_requests() == 0 && is_power_of_two(chunks)) {
    const int bs = config.block_size;
    std::vector<int32_t> blocks, rows;
    for (int32_t i = plan.decode.begin; i < plan.decode.end; ++i) {
      const int32_t ctx = plan.context_lens[i];
      for (int32_t b = 0; b * bs < ctx; ++b) {
        blocks.push_back(plan.block_row(i)[b]);
        rows.push_back(std::min(bs, ctx - b * bs));
      }
      gather_bytes_ += 2.0 * ctx * config.num_kv_heads * gather_row_bytes_;
    }
    gather_entries_ = static_cast<int32_t>(blocks.size());
    gather_blocks_ = DeviceAllocation(blocks.size() * sizeof(int32_t));
    gather_rows_ = DeviceAllocation(rows.size() * sizeof(int32_t));
    gather_sum_ = DeviceAllocation(kPagedGatherSumWords * sizeof(uint32_t));
    copy_to_device(gather_blocks_.data(), blocks.data(), blocks.size() * sizeof(int32_t));
    copy_to_device(gather_rows_.data(), rows.data(), rows.size() * sizeof(int32_t));
  }
}

void GpuMhaStep::gather(int copy, void* stream) const {
  if (gather_entries_ == 0) return;
  const KvCacheConfig& config = host_.inputs.cache.config;
  PagedGatherArgs a;
  a.k_cache = cache_k_[copy].data();
  a.v_cache = cache_v_[copy].data();
  a.blocks = static_cast<const int32_t*>(gather_blocks_.data());
  a.rows = static_cast<const int32_t*>(gather_rows_.data());
  a.num_entries = gather_entries_;
  a.block_size = config.block_size;
  a.num_kv_heads = config.num_kv_heads;
  a.row_bytes = gather_row_bytes_;
  a.layout = static_cast<int32_t>(config.layout);
  a.checksum = static_cast<uint32_t*>(gather_sum_.data());
  launch_paged_gather(a, stream);
}

AttentionInputs GpuMhaStep::inputs(int copy, bool write_cache, void* stream) const {
  AttentionInputs d = host_.inputs;
  d.q = on_device(d.q, q_);
  d.out = on_device(d.out, out_);
  d.k = write_cache ? on_device(d.k, k_) : TensorView{};
  d.v = write_cache ? on_device(d.v, v_) : TensorView{};
  d.sinks = on_device(d.sinks, sinks_);
  d.cache.k = on_device(d.cache.k, cache_k_[copy]);
  d.cache.v = on_device(d.cache.v, cache_v_[copy]);
  d.lse = TensorView{};
  d.stream = stream;
  return d;
}

void GpuMhaStep::download_out(MhaStep& host) const { download(host.inputs.out, out_); }

// ---- MLA ----

int GpuMlaStep::copies_for(const MlaStep& host, size_t l2_bytes) {
  return rotated_cache_copies(bytes_of(host.inputs.cache.latent), l2_bytes);
}

GpuMlaStep::GpuMlaStep(const MlaStep& host, int cache_copies) : host_(host) {
  const MlaInputs& in = host.inputs;
  latent_ = mirror(in.latent);
  q_absorbed_ = mirror(in.q_absorbed);
  out_absorbed_ = poisoned(in.out_absorbed);
  q_ = mirror(in.q);
  kv_b_proj_ = mirror(in.kv_b_proj);
  out_ = poisoned(in.out);
  for (int c = 0; c < cache_copies; ++c) cache_.push_back(mirror(in.cache.latent));
}

MlaInputs GpuMlaStep::inputs(int copy, bool write_cache, void* stream) const {
  MlaInputs d = host_.inputs;
  d.latent = write_cache ? on_device(d.latent, latent_) : TensorView{};
  d.cache.latent = on_device(d.cache.latent, cache_[copy]);
  d.q_absorbed = on_device(d.q_absorbed, q_absorbed_);
  d.out_absorbed = on_device(d.out_absorbed, out_absorbed_);
  d.q = on_device(d.q, q_);
  d.kv_b_proj = on_device(d.kv_b_proj, kv_b_proj_);
  d.out = on_device(d.out, out_);
  d.lse_absorbed = TensorView{};
  d.lse = TensorView{};
  d.stream = stream;
  return d;
}

void GpuMlaStep::download_out(MlaStep& host) const {
  download(host.inputs.out_absorbed, out_absorbed_);
  download(host.inputs.out, out_);
}

}  // namespace tripath::cli
