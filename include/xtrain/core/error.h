// Errors: one exception type carrying file:line, the failing expression and the library's message,
// plus the XT_*_CHECK macros (flashlight / tiny-cuda-nn style), all built on XT_STATUS_CHECK.
// CUDA/cuBLAS/NCCL checks live in src/backend/cuda/cuda_check.h so that this header stays free of GPU includes.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace xtrain {

// Thrown for every runtime failure. what() is one line: "<file>:<line>: <message>" for internal
// checks, or a plain user-facing message for input errors (see input_error).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A usage error (bad option, bad combination of options): main exits with code 2 and prints usage.
class UsageError : public Error {
 public:
  using Error::Error;
};

// A failure every rank detected identically (e.g. a non-finite global loss, or an input check whose
// outcome was agreed with a collective). The message was already printed once, by rank 0 or by the
// lowest failing rank; main ends every rank with exit_code without MPI_Abort.
class AgreedFailure : public Error {
 public:
  explicit AgreedFailure(int exit_code) : Error("agreed failure"), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

namespace detail {
[[noreturn]] inline void throw_check(const char* file, int line, const char* expr, const std::string& msg) {
  std::ostringstream os;
  os << file << ":" << line << ": check failed: " << expr;
  if (!msg.empty()) os << ": " << msg;
  throw Error(os.str());
}
}  // namespace detail

}  // namespace xtrain

// XT_CHECK(cond, msg_stream): throws xtrain::Error with file:line when cond is false.
// Example: XT_CHECK(n > 0, "count " << n << " must be positive");
#define XT_CHECK(cond, msg)                                                      \
  do {                                                                           \
    if (!(cond)) {                                                               \
      std::ostringstream xt_check_os_;                                           \
      xt_check_os_ << msg;                                                       \
      ::xtrain::detail::throw_check(__FILE__, __LINE__, #cond, xt_check_os_.str()); \
    }                                                                            \
  } while (0)

// XT_FAIL(msg_stream): throws a user-facing xtrain::Error without file:line (bad input files etc.).
#define XT_FAIL(msg)                     \
  do {                                   \
    std::ostringstream xt_fail_os_;      \
    xt_fail_os_ << msg;                  \
    throw ::xtrain::Error(xt_fail_os_.str()); \
  } while (0)

// XT_STATUS_CHECK(call, ok, message): the one status check behind every library's check (ggml's
// CUDA_CHECK_GEN): evaluates call once into `xt_rc_`; when the expression `ok` (in terms of xt_rc_)
// is false, throws xtrain::Error with file:line, the call's text and `message` (a std::string or
// const char* built from xt_rc_, i.e. the library's own error text).
#define XT_STATUS_CHECK(call, ok, message)                                        \
  do {                                                                            \
    const auto xt_rc_ = (call);                                                   \
    if (!(ok)) ::xtrain::detail::throw_check(__FILE__, __LINE__, #call, (message)); \
  } while (0)

namespace xtrain::detail {
// mpi_error_string: MPI_Error_string of an MPI return code (defined in src/comm/mpi/mpi_context.cpp, so this
// header needs no <mpi.h>).
std::string mpi_error_string(int rc);
}  // namespace xtrain::detail

// XT_MPI_CHECK(call): throws with the MPI error string when an MPI call does not return MPI_SUCCESS
// (needs <mpi.h> where it is used).
#define XT_MPI_CHECK(call) XT_STATUS_CHECK(call, xt_rc_ == MPI_SUCCESS, ::xtrain::detail::mpi_error_string(xt_rc_))
