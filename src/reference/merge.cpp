#include <vector>

#include "attend_row.h"
#include "tripath/error.h"
#include "tripath/reference.h"

namespace tripath::reference {

void merge_states(const TensorView& outs, const TensorView& lses, const TensorView& out,
                  const TensorView& lse) {
  TRIPATH_CHECK_ARG(outs.ndim == 3, "outs", outs.shape_text(), "shape [num_parts, rows, dim]");
  const int64_t parts = outs.shape[0], rows = outs.shape[1], dim = outs.shape[2];
  check_tensor(outs, "outs", {parts, rows, dim}, Device::kCPU);
  check_tensor(lses, "lses", {parts, rows}, Device::kCPU);
  check_tensor(out, "out", {rows, dim}, Device::kCPU);
  check_dtype(outs, "outs", {DType::kF32});
  check_dtype(lses, "lses", {DType::kF32});
  check_dtype(out, "out", {DType::kF32});
  if (lse.defined()) {
    check_tensor(lse, "lse", {rows}, Device::kCPU);
    check_dtype(lse, "lse", {DType::kF32});
  }
  const float* o = outs.ptr<float>();
  const float* l = lses.ptr<float>();
#pragma omp parallel
  {
    std::vector<float> row_outs(static_cast<size_t>(parts * dim)), row_lses(parts);
#pragma omp for
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t p = 0; p < parts; ++p) {
        row_lses[p] = l[p * rows + r];
        for (int64_t d = 0; d < dim; ++d) row_outs[p * dim + d] = o[(p * rows + r) * dim + d];
      }
      const float m = detail::merge_parts(row_outs.data(), row_lses.data(),
                                          static_cast<int>(parts), static_cast<int>(dim),
                                          out.ptr<float>() + r * dim);
      if (lse.defined()) lse.ptr<float>()[r] = m;
    }
  }
}

}  // namespace tripath::reference
