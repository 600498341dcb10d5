// tripath/device.h in a build without CUDA: every call explains why it cannot run.
#include "tripath/device.h"
#include "tripath/error.h"

namespace tripath {
namespace {
[[noreturn]] void no_cuda() {
  throw Error("tripath: this build has no CUDA support (configure with -DTRIPATH_CUDA=ON)");
}
}  // namespace

DeviceAllocation::DeviceAllocation(size_t) { no_cuda(); }
DeviceAllocation::~DeviceAllocation() = default;
DeviceAllocation::DeviceAllocation(DeviceAllocation&&) noexcept = default;
DeviceAllocation& DeviceAllocation::operator=(DeviceAllocation&&) noexcept = default;
void copy_to_device(void*, const void*, size_t) { no_cuda(); }
void copy_to_host(void*, const void*, size_t) { no_cuda(); }
void device_synchronize() { no_cuda(); }
std::vector<double> time_gpu_calls(const std::function<void(void*)>&, int, int, bool, bool*,
                                   bool) {
  no_cuda();
}
GpuCeilings measure_gpu_ceilings() { no_cuda(); }
void launch_paged_gather(const PagedGatherArgs&, void*) { no_cuda(); }

}  // namespace tripath
