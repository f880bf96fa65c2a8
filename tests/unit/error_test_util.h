// error_of, shared by the tests of error messages: the message a call throws, so a test can check the
// one line a user would read.
#pragma once

#include <exception>
#include <functional>
#include <string>

namespace xtrain::test {

// error_of: the what() of the exception fn throws (xtrain::Error and UsageError, or any std::exception:
// a library's own), or "(no error)" when fn returns; a CHECK on the message then shows that the call
// did not throw. Exceptions not derived from std::exception propagate.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace xtrain::test
