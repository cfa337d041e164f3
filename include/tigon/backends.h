// What this build of tigon contains.
#pragma once

namespace tigon {

// True when the library was compiled with its CUDA backend (it may still find no device at run
// time).
bool has_cuda_backend() noexcept;

// The library version, "major.minor.patch".
const char* version() noexcept;

}  // namespace tigon
