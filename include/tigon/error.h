// Errors thrown by the tigon API. The core never aborts or exits: every failure is a tigon::Error
// whose message names the operation, the argument, what was expected and what was given.
#pragma once

#include <stdexcept>
#include <string>

namespace tigon {

enum class ErrorCode {
  kInvalidArgument,     // a shape, stride, value or option is out of range
  kTypeError,           // an unsupported dtype or a dtype mismatch
  kBackendUnavailable,  // e.g. a CUDA tensor given to a build without the CUDA backend
  kCudaError,           // the CUDA runtime reported an error (launch failure, ...)
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace tigon
