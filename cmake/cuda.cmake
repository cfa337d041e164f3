# Decides whether the CUDA backend is built (TIGON_CUDA = AUTO / ON / OFF) and enables CUDA.
# Architectures are explicit (80 and 90 by default) so CI compiles the same code without a GPU.
set(TIGON_WITH_CUDA OFF)
if(NOT TIGON_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER)
    check_language(CUDA)
  endif()
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    # CMake releases older than the nvcc they meet (Debian 12's 3.25 with nvcc 13) know no flag for
    # CUDA C++20 and refuse CUDA_STANDARD 20; nvcc has taken -std=c++20 since 12.0.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION AND CMAKE_CUDA_COMPILER_ID STREQUAL "NVIDIA"
       AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(TIGON_WITH_CUDA ON)
  elseif(TIGON_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TIGON_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER)")
  endif()
endif()
message(STATUS "tigon: CUDA backend ${TIGON_WITH_CUDA} (TIGON_CUDA=${TIGON_CUDA}, architectures: ${CMAKE_CUDA_ARCHITECTURES})")
