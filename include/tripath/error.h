// The one error type of tripath. Every message names the argument, the bad value and what was
// expected, so a serving engine can log it and a user can fix the call without reading our code.
#pragma once

#include <locale>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tripath {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// The block pool has too few free blocks. Recoverable: the pool is unchanged, the engine can
// preempt a request and retry.
class OutOfBlocksError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename T>
std::string to_text(const T& value) {
  std::ostringstream s;
  s.imbue(std::locale::classic());  // "1024", whatever locale the host program set
  s << value;
  return s.str();
}
}  // namespace detail

// "invalid argument 'block_table[3][1]': got 4096, expected a block id in [0, 1024)"
[[noreturn]] void throw_arg_error(std::string_view argument, std::string_view value,
                                  std::string_view expected);

}  // namespace tripath

// Checks `cond`; on failure throws tripath::Error naming the argument, its value and the
// expectation. `value` may be any streamable expression.
#define TRIPATH_CHECK_ARG(cond, argument, value, expected)                                    \
  do {                                                                                        \
    if (!(cond)) ::tripath::throw_arg_error((argument), ::tripath::detail::to_text(value),    \
                                            (expected));                                      \
  } while (0)
