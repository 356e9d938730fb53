// Shared by both builds of cuda_gemm.
#include <string>

#include "model/cuda_gemm.hpp"

namespace sluice::model::detail {

std::size_t operand_floats(int rows, int cols, int ld) {
  if (rows <= 0) return 0;
  return static_cast<std::size_t>(rows - 1) * static_cast<std::size_t>(ld) +
         static_cast<std::size_t>(cols);
}

core::Status check_operand(const char* name, int rows, int cols, int ld, std::size_t size) {
  if (rows < 0 || cols < 0) return core::invalid_argument(std::string("sgemm: negative size"));
  if (ld < (cols > 1 ? cols : 1)) {
    return core::invalid_argument("sgemm: leading dimension " + std::to_string(ld) + " of " + name +
                                  " is below its " + std::to_string(cols) + " columns");
  }
  const std::size_t need = operand_floats(rows, cols, ld);
  if (need > size) {
    return core::invalid_argument(std::string("sgemm: ") + name + " needs " + std::to_string(need) +
                                  " floats, its buffer has " + std::to_string(size));
  }
  return {};
}

}  // namespace sluice::model::detail
