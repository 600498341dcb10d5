// Sets (or, with nullptr, unsets) an environment variable for one scope and restores what was
// there before: the backends read their variables (TRIPATH_BACKEND, the kernel variants such as
// TRIPATH_FLASH_TMA) when they are created, and a test must not leak its setting into the next.
#pragma once

#include <cstdlib>
#include <string>

namespace tripath::test_support {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

}  // namespace tripath::test_support
