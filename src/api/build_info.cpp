#include <omp.h>

#include "tripath/backend.h"

namespace tripath {

BuildInfo build_info() {
  BuildInfo info;
  info.version = TRIPATH_VERSION;
#ifdef TRIPATH_WITH_CUDA
  info.with_cuda = true;
#endif
  info.num_threads = omp_get_max_threads();
  // GPU discovery arrives with the CUDA backends; a CPU-only build never finds one.
  return info;
}

}  // namespace tripath
