#include "device_plan.h"

#include <cstring>

namespace tripath {

void DeviceArena::upload(cudaStream_t stream) {
  device_.ensure(host_.empty() ? 16 : host_.size());
  if (!host_.empty()) {
    TRIPATH_CUDA_CHECK(cudaMemcpyAsync(device_.as<char>(), host_.data(), host_.size(),
                                       cudaMemcpyHostToDevice, stream));
  }
}

DevicePlanOffsets add_common_plan_arrays(const StepPlan& plan, DeviceArena& arena) {
  DevicePlanOffsets o;
  o.block_table = arena.add(plan.block_table);
  o.cu_seqlens_q = arena.add(plan.cu_seqlens_q);
  o.context_lens = arena.add(plan.context_lens);
  o.slot_mapping = arena.add(plan.slot_mapping);
  return o;
}

}  // namespace tripath
