# A BLAS for the CPU backend's matrix products (fused linear cross-entropy, MoE experts):
# cblas_sgemm, 32-bit integers (LP64), from any vendor FindBLAS knows whose library has the CBLAS
# interface. (CBLAS,
# not the Fortran sgemm_: libtorch_cpu exports the sgemm_ of the MKL inside it, which would bind
# the torch module to whichever of the two its link order lists first.) OpenBLAS is tried
# first (Debian: libopenblas-openmp-dev, the OpenMP build, which shares the caller's OpenMP
# threads: docs/ops/fused_linear_cross_entropy.md, "CPU"), then whatever FindBLAS finds (MKL,
# a generic libblas, ...); a BLA_VENDOR given by the caller is used as is. Without one the CPU
# backend keeps its plain loops. Sets TIGON_WITH_BLAS and TIGON_BLAS_VENDOR.
set(TIGON_BLAS AUTO CACHE STRING "CPU GEMMs through a BLAS: AUTO (when found), ON or OFF")
set_property(CACHE TIGON_BLAS PROPERTY STRINGS AUTO ON OFF)
set(TIGON_WITH_BLAS OFF)
set(TIGON_BLAS_VENDOR "")
if(NOT TIGON_BLAS STREQUAL "OFF")
  set(BLA_SIZEOF_INTEGER 4)
  if(DEFINED BLA_VENDOR)
    find_package(BLAS QUIET)
    set(TIGON_BLAS_VENDOR "${BLA_VENDOR}")
  else()
    set(BLA_VENDOR OpenBLAS)
    find_package(BLAS QUIET)
    set(TIGON_BLAS_VENDOR OpenBLAS)
    if(NOT BLAS_FOUND)
      set(BLA_VENDOR All)
      find_package(BLAS QUIET)
      set(TIGON_BLAS_VENDOR All)
    endif()
    unset(BLA_VENDOR)
  endif()
  if(BLAS_FOUND)
    include(CheckFunctionExists)
    set(CMAKE_REQUIRED_LIBRARIES ${BLAS_LIBRARIES})
    check_function_exists(cblas_sgemm TIGON_BLAS_HAS_CBLAS)
    unset(CMAKE_REQUIRED_LIBRARIES)
    if(NOT TIGON_BLAS_HAS_CBLAS)
      set(BLAS_FOUND FALSE)
    endif()
  endif()
  if(BLAS_FOUND)
    set(TIGON_WITH_BLAS ON)
    message(STATUS "tigon: BLAS (${TIGON_BLAS_VENDOR}): ${BLAS_LIBRARIES}")
  elseif(TIGON_BLAS STREQUAL "ON")
    message(FATAL_ERROR "TIGON_BLAS=ON but no BLAS was found (Debian: libopenblas-openmp-dev)")
  else()
    message(STATUS "tigon: no BLAS found; the CPU fused linear cross-entropy uses plain loops")
  endif()
endif()
