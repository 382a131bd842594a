# The single build description of rvv-kernels, used by this package's own test
# build and by every consumer (rvv-ops' native build and its riscv64 cross
# build) through find_package(rvv_kernels) or include().
#
# Defines the static library target `rvv_kernels` (alias rvv_kernels::rvv_kernels).
# Kernels live one folder per op, csrc/kernels/<op>/: the op's top-level *.cpp
# files (its driver) are compiled once per variant - `portable` always, when the
# target is riscv64 also `rvv` (-march=rv64gcv) and `rvv_zvfh` (+Zvfh), when it
# is x86-64 also `x86_avx2` (the vector layer on AVX2 + FMA + F16C), `x86_avx512`
# (the vector layer on AVX-512 intrinsics), `x86_avx512_bf16` (+ AVX512-BF16)
# and `x86_amx` (+ AMX tiles) - and the library picks the best variant for the
# running CPU at run time.
#
# ISA-specific code sits in csrc/kernels/<op>/<isa>/ (isa: generic or a variant
# name), only where it differs from the generic code. Compiling <op> for variant
# V puts on the include path, in order, <op>/V, <op>/parent(V), ... and
# <op>/generic (the parents: RVVK_PARENT_<variant> below), so the driver's
# `#include "<op>_isa.h"` finds the most specific implementation. The partial
# variants (RVVK_PARTIAL_VARIANTS: x86_avx512_bf16, x86_amx) compile only the
# ops that have a folder <op>/<variant>/; their other kernels are those of
# their parent variant (runtime/dispatch.cpp declares which).
#
# Options:
#   RVVK_ENABLE_RVV   (ON)  compile the RVV variants when targeting riscv64
#   RVVK_ENABLE_ZVFH  (ON)  also compile the Zvfh variant if the compiler can
#   RVVK_ENABLE_X86   (ON)  compile the x86_avx2 and x86_avx512 (and, if the
#                           compiler can, x86_avx512_bf16 and x86_amx) variants
#                           when targeting x86-64
#   RVVK_PORTABLE_FLAGS     extra flags for the portable variant
#
# Function: rvvk_add_op_objects(<prefix> <op_dir>) compiles an op folder's
# driver once per variant (defining RVVK_VARIANT, with the variant's ISA folder
# chain on the include path; for a partial variant only if <op_dir>/<variant>/
# exists) and returns the object libraries in ${<prefix>_TARGETS}.
include_guard(GLOBAL)
include(CheckCXXSourceCompiles)

set(RVVK_SOURCE_DIR "${CMAKE_CURRENT_LIST_DIR}/../csrc")
# One folder per op under kernels/ (its sources are globbed in rvvk_add_op_objects).
file(GLOB _rvvk_kernel_entries LIST_DIRECTORIES true CONFIGURE_DEPENDS "${RVVK_SOURCE_DIR}/kernels/*")
set(RVVK_OP_DIRS)
foreach(_e IN LISTS _rvvk_kernel_entries)
  if(IS_DIRECTORY "${_e}")
    list(APPEND RVVK_OP_DIRS "${_e}")
  endif()
endforeach()

# Sets the cache variable <var> to whether the compiler builds <source> with the
# flags that follow (each argument a flag or a space-separated string of them).
function(rvvk_probe var source)
  string(REPLACE ";" " " CMAKE_REQUIRED_FLAGS "${ARGN}")
  check_cxx_source_compiles("${source}" ${var})
endfunction()

option(RVVK_ENABLE_RVV "Compile the RVV variants when targeting riscv64" ON)
option(RVVK_ENABLE_ZVFH "Compile the RVV+Zvfh variant when the compiler supports it" ON)
option(RVVK_ENABLE_X86 "Compile the x86_avx2 and x86_avx512 variants when targeting x86-64" ON)

set(RVVK_VARIANTS portable)
set(RVVK_FLAGS_portable ${RVVK_PORTABLE_FLAGS})

if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(riscv64|rv64)")
  # The portable variant is the scalar baseline: no vector unit at all.
  list(APPEND RVVK_FLAGS_portable -march=rv64gc)
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    list(APPEND RVVK_FLAGS_portable -fno-vectorize -fno-slp-vectorize)
  endif()
  if(RVVK_ENABLE_RVV)
    set(_rvvk_probe_v "
#include <riscv_vector.h>
int main() { float x[4] = {1, 2, 3, 4}; size_t vl = __riscv_vsetvl_e32m1(4);
  vfloat32m1_t v = __riscv_vle32_v_f32m1(x, vl);
  vfloat32m1_t z = __riscv_vfmv_v_f_f32m1(0.0f, 1);
  return (int)__riscv_vfmv_f_s_f32m1_f32(__riscv_vfredusum_vs_f32m1_f32m1(v, z, vl)); }")
    rvvk_probe(RVVK_COMPILER_HAS_RVV "${_rvvk_probe_v}" -march=rv64gcv)
    if(NOT RVVK_COMPILER_HAS_RVV)
      message(FATAL_ERROR
        "rvv-kernels: ${CMAKE_CXX_COMPILER} cannot compile RVV 1.0 intrinsics (__riscv_ prefix) "
        "with -march=rv64gcv. Use clang >= 16 (tools/provision.sh toolchain installs clang-16), "
        "or configure with -DRVVK_ENABLE_RVV=OFF for a portable-only build.")
    endif()
    list(APPEND RVVK_VARIANTS rvv)
    set(RVVK_FLAGS_rvv -march=rv64gcv)
    if(RVVK_ENABLE_ZVFH)
      set(_rvvk_probe_zvfh "
#include <riscv_vector.h>
int main() { _Float16 h[2] = {1, 2}; float f[2]; size_t vl = __riscv_vsetvl_e16mf2(2);
  __riscv_vse32_v_f32m1(f, __riscv_vfwcvt_f_f_v_f32m1(__riscv_vle16_v_f16mf2(h, vl), vl), vl);
  return (int)f[1]; }")
      foreach(_flags "-march=rv64gcv_zfh_zvfh" "-march=rv64gcv_zfh_zvfh0p1 -menable-experimental-extensions")
        string(MAKE_C_IDENTIFIER "RVVK_ZVFH_${_flags}" _var)
        rvvk_probe(${_var} "${_rvvk_probe_zvfh}" "${_flags}")
        if(${_var})
          list(APPEND RVVK_VARIANTS rvv_zvfh)
          separate_arguments(RVVK_FLAGS_rvv_zvfh UNIX_COMMAND "${_flags}")
          break()
        endif()
      endforeach()
      if(NOT "rvv_zvfh" IN_LIST RVVK_VARIANTS)
        message(WARNING "rvv-kernels: the compiler cannot build Zvfh code; no rvv_zvfh variant")
      endif()
    endif()
  endif()
endif()
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$" AND RVVK_ENABLE_X86)
  set(_rvvk_avx2_flags -mavx2 -mfma -mf16c)
  set(_rvvk_probe_avx2 "
#include <immintrin.h>
int main() { float x[8] = {1}; __m256 v = _mm256_maskload_ps(x, _mm256_set1_epi32(-1));
  __m256 h = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)x));
  __m256i i = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)x));
  return _mm256_extract_epi32(i, 0) + (int)_mm256_cvtss_f32(_mm256_fmadd_ps(v, h, v)); }")
  rvvk_probe(RVVK_COMPILER_HAS_AVX2 "${_rvvk_probe_avx2}" ${_rvvk_avx2_flags})
  if(RVVK_COMPILER_HAS_AVX2)
    list(APPEND RVVK_VARIANTS x86_avx2)
    # -ffp-contract=off: see x86_avx512 below.
    set(RVVK_FLAGS_x86_avx2 ${_rvvk_avx2_flags} -ffp-contract=off -DRVVK_VEC_AVX2=1)
  else()
    message(WARNING "rvv-kernels: ${CMAKE_CXX_COMPILER} cannot compile AVX2 intrinsics; "
                    "no x86_avx2 variant")
  endif()
  set(_rvvk_avx512_flags -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c)
  set(_rvvk_probe_avx512 "
#include <immintrin.h>
int main() { float x[16] = {1}; __m512 v = _mm512_maskz_loadu_ps(0x3, x);
  __m256i h = _mm256_maskz_loadu_epi16(0x3, x); __m128i b = _mm_maskz_loadu_epi8(0x3, x);
  return (int)_mm512_reduce_add_ps(_mm512_add_ps(v, _mm512_cvtph_ps(h)))
         + _mm_extract_epi8(b, 0); }")
  rvvk_probe(RVVK_COMPILER_HAS_AVX512 "${_rvvk_probe_avx512}" ${_rvvk_avx512_flags})
  if(RVVK_COMPILER_HAS_AVX512)
    list(APPEND RVVK_VARIANTS x86_avx512)
    # No contraction of separate multiplies and adds into FMAs (GCC fuses even the
    # intrinsics' vector arithmetic by default): the kernels fuse where they say fmacc,
    # as the RVV intrinsics do, so both vector variants round alike.
    set(RVVK_FLAGS_x86_avx512 ${_rvvk_avx512_flags} -ffp-contract=off -DRVVK_VEC_AVX512=1)
    set(_rvvk_bf16_flags ${_rvvk_avx512_flags} -mavx512bf16)
    set(_rvvk_probe_bf16 "
#include <immintrin.h>
int main() { float x[16] = {1}; __m512bh p = (__m512bh)_mm512_loadu_si512(x);
  return (int)_mm512_reduce_add_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), p, p)); }")
    rvvk_probe(RVVK_COMPILER_HAS_AVX512_BF16 "${_rvvk_probe_bf16}" ${_rvvk_bf16_flags})
    if(RVVK_COMPILER_HAS_AVX512_BF16)
      list(APPEND RVVK_VARIANTS x86_avx512_bf16)
      set(RVVK_FLAGS_x86_avx512_bf16 ${_rvvk_bf16_flags} -ffp-contract=off -DRVVK_VEC_AVX512=1)
    else()
      message(WARNING "rvv-kernels: ${CMAKE_CXX_COMPILER} cannot compile AVX512-BF16 "
                      "intrinsics; no x86_avx512_bf16 or x86_amx variant")
    endif()
    set(_rvvk_amx_flags ${_rvvk_bf16_flags} -mamx-tile -mamx-bf16)
    set(_rvvk_probe_amx "
#include <immintrin.h>
int main() { alignas(64) unsigned char cfg[64] = {1}; float x[32] = {1};
  _tile_loadconfig(cfg); _tile_zero(0); _tile_loadd(1, x, 64);
  _tile_loadd(2, x, 64); _tile_dpbf16ps(0, 1, 2); _tile_stored(0, x, 64); _tile_release();
  __m512bh p = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x), _mm512_loadu_ps(x));
  return (int)x[0] + (int)_mm512_reduce_add_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), p, p)); }")
    if(RVVK_COMPILER_HAS_AVX512_BF16)  # x86_amx builds on x86_avx512_bf16
      rvvk_probe(RVVK_COMPILER_HAS_AMX "${_rvvk_probe_amx}" ${_rvvk_amx_flags})
    endif()
    if(RVVK_COMPILER_HAS_AMX)
      list(APPEND RVVK_VARIANTS x86_amx)
      set(RVVK_FLAGS_x86_amx ${_rvvk_amx_flags} -ffp-contract=off -DRVVK_VEC_AVX512=1
          -DRVVK_AMX=1)
    elseif(RVVK_COMPILER_HAS_AVX512_BF16)
      message(WARNING "rvv-kernels: ${CMAKE_CXX_COMPILER} cannot compile AMX intrinsics; "
                      "no x86_amx variant")
    endif()
  else()
    message(WARNING "rvv-kernels: ${CMAKE_CXX_COMPILER} cannot compile AVX-512 intrinsics; "
                    "no x86_avx512 variant")
  endif()
endif()
message(STATUS "rvv-kernels variants: ${RVVK_VARIANTS}")

# ---- Variant parents (the ISA-folder fallback chain) and partial variants ----
# RVVK_PARENT_<v>: the variant whose ISA folders <v> falls back to before
# generic (empty: a root variant, generic only). A partial variant compiles
# only the ops with a folder of its own; dispatch.cpp takes the rest from the
# parent.
set(RVVK_PARENT_portable "")
set(RVVK_PARENT_rvv "")
set(RVVK_PARENT_rvv_zvfh rvv)
set(RVVK_PARENT_x86_avx2 "")
set(RVVK_PARENT_x86_avx512 "")
set(RVVK_PARENT_x86_avx512_bf16 x86_avx512)
set(RVVK_PARENT_x86_amx x86_avx512_bf16)
set(RVVK_PARTIAL_VARIANTS x86_avx512_bf16 x86_amx)
# ---- end of variant parents ----


# <op_dir>/V, <op_dir>/parent(V), ... that exist, then <op_dir>/generic: the
# include directories of op folder <op_dir> for variant V, in ${<out>}.
function(rvvk_isa_dirs out op_dir variant)
  set(_dirs)
  set(_v ${variant})
  while(_v)
    if(IS_DIRECTORY "${op_dir}/${_v}")
      list(APPEND _dirs "${op_dir}/${_v}")
    endif()
    set(_v "${RVVK_PARENT_${_v}}")
  endwhile()
  if(IS_DIRECTORY "${op_dir}/generic")
    list(APPEND _dirs "${op_dir}/generic")
  endif()
  set(${out} ${_dirs} PARENT_SCOPE)
endfunction()

function(rvvk_add_op_objects prefix op_dir)
  get_filename_component(_op "${op_dir}" NAME)
  file(GLOB _sources CONFIGURE_DEPENDS "${op_dir}/*.cpp")
  set(_targets)
  foreach(_v IN LISTS RVVK_VARIANTS)
    if(_v IN_LIST RVVK_PARTIAL_VARIANTS AND NOT IS_DIRECTORY "${op_dir}/${_v}")
      continue()  # the parent variant's kernel serves this one
    endif()
    rvvk_isa_dirs(_dirs "${op_dir}" ${_v})
    set(_t ${prefix}_${_op}_${_v})
    add_library(${_t} OBJECT ${_sources})
    target_compile_features(${_t} PRIVATE cxx_std_17)
    target_include_directories(${_t} PRIVATE ${_dirs} "${RVVK_SOURCE_DIR}/include")
    target_compile_definitions(${_t} PRIVATE RVVK_VARIANT=${_v})
    target_compile_options(${_t} PRIVATE ${RVVK_FLAGS_${_v}})
    set_target_properties(${_t} PROPERTIES POSITION_INDEPENDENT_CODE ON)
    list(APPEND _targets ${_t})
  endforeach()
  set(${prefix}_TARGETS ${_targets} PARENT_SCOPE)
endfunction()

if(NOT TARGET rvv_kernels)
  set(_rvvk_objects)
  foreach(_d IN LISTS RVVK_OP_DIRS)
    rvvk_add_op_objects(rvv_kernels_kernels "${_d}")
    list(APPEND _rvvk_objects ${rvv_kernels_kernels_TARGETS})
  endforeach()
  add_library(rvv_kernels STATIC
    "${RVVK_SOURCE_DIR}/runtime/dispatch.cpp"
    "${RVVK_SOURCE_DIR}/runtime/cpuinfo.cpp")
  foreach(_t IN LISTS _rvvk_objects)
    target_sources(rvv_kernels PRIVATE $<TARGET_OBJECTS:${_t}>)
  endforeach()
  foreach(_v IN LISTS RVVK_VARIANTS)
    target_compile_definitions(rvv_kernels PRIVATE RVVK_HAVE_${_v}=1)
  endforeach()
  target_compile_features(rvv_kernels PUBLIC cxx_std_17)
  target_include_directories(rvv_kernels PUBLIC "${RVVK_SOURCE_DIR}/include")
  set_target_properties(rvv_kernels PROPERTIES POSITION_INDEPENDENT_CODE ON)
  add_library(rvv_kernels::rvv_kernels ALIAS rvv_kernels)
endif()
