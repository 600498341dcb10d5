#include "bench_gpu.h"

#include <algorithm>

namespace tripath::cli {
namespace {

size_t bytes_of(const TensorView& t) { return static_cast<size_t>(t.numel()) * dtype_size(t.dtype); }

DeviceAllocation mirror(const TensorView& t) {
  DeviceAllocation d(bytes_of(t));
  if (t.defined() && bytes_of(t) > 0) copy_to_device(d.data(), t.data, bytes_of(t));
  return d;
}

TensorView on_device(TensorView t, const DeviceAllocation& d) {
  t.data = d.data();
  t.device = Device::kCUDA;
  return t;
}

}  // namespace

int GpuMhaStep::copies_for(const MhaStep& host, size_t l2_bytes) {
  const size_t cache = 2 * bytes_of(host.inputs.cache.k);
  const size_t want = 3 * l2_bytes;
  return static_cast<int>(std::clamp<size_t>((want + cache - 1) / std::max<size_t>(cache, 1), 1, 4));
}

GpuMhaStep::GpuMhaStep(const MhaStep& host, int cache_copies) : host_(host) {
  const AttentionInputs& in = host.inputs;
  q_ = mirror(in.q);
  k_ = mirror(in.k);
  v_ = mirror(in.v);
  out_ = mirror(in.out);
  if (in.sinks.defined()) sinks_ = mirror(in.sinks);
  for (int c = 0; c < cache_copies; ++c) {
    cache_k_.push_back(mirror(in.cache.k));
    cache_v_.push_back(mirror(in.cache.v));
  }
}

AttentionInputs GpuMhaStep::inputs(int copy, bool write_cache, void* stream) const {
  AttentionInputs d = host_.inputs;
  d.q = on_device(d.q, q_);
  d.out = on_device(d.out, out_);
  d.k = write_cache ? on_device(d.k, k_) : TensorView{};
  d.v = write_cache ? on_device(d.v, v_) : TensorView{};
  if (d.sinks.defined()) d.sinks = on_device(d.sinks, sinks_);
  d.cache.k = on_device(d.cache.k, cache_k_[copy]);
  d.cache.v = on_device(d.cache.v, cache_v_[copy]);
  d.lse = TensorView{};
  d.stream = stream;
  return d;
}

void GpuMhaStep::download_out(MhaStep& host) const {
  copy_to_host(host.inputs.out.data, out_.data(), bytes_of(host.inputs.out));
}

}  // namespace tripath::cli
