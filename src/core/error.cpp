#include "tripath/error.h"

namespace tripath {

void throw_arg_error(std::string_view argument, std::string_view value,
                     std::string_view expected) {
  std::string m = "tripath: invalid argument '";
  m.append(argument).append("': got ").append(value).append(", expected ").append(expected);
  throw Error(m);
}

}  // namespace tripath
