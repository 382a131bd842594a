# find_package(rvv_kernels CONFIG) entry point; see RvvKernels.cmake.
include("${CMAKE_CURRENT_LIST_DIR}/RvvKernels.cmake")
set(rvv_kernels_FOUND TRUE)
