// A step's metadata in device memory: the host packs every array into one buffer and uploads
// it with a single copy in prepare(); run() reads it through the offsets recorded here.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda_util.h"
#include "tripath/step_plan.h"

namespace tripath {

class DeviceArena {
 public:
  void clear() { host_.clear(); }
  // Appends `count` elements and returns their byte offset (16-byte aligned).
  template <typename T>
  size_t add(const T* data, size_t count) {
    const size_t offset = (host_.size() + 15) / 16 * 16;
    host_.resize(offset + count * sizeof(T));
    if (count > 0) std::memcpy(host_.data() + offset, data, count * sizeof(T));
    return offset;
  }
  template <typename T>
  size_t add(const std::vector<T>& v) {
    return add(v.data(), v.size());
  }
  void upload(cudaStream_t stream);
  template <typename T>
  const T* at(size_t offset) const {
    return device_.as<T>(offset);
  }

 private:
  std::vector<char> host_;
  DeviceBuffer device_;
};

// The arrays every CUDA backend reads, uploaded from a StepPlan.
struct DevicePlanOffsets {
  size_t block_table = 0, cu_seqlens_q = 0, context_lens = 0, slot_mapping = 0;
};
DevicePlanOffsets add_common_plan_arrays(const StepPlan& plan, DeviceArena& arena);

}  // namespace tripath
