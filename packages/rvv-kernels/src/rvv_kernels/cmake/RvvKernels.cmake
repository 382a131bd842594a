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
# <op>/generic (the parents: RVVK_PARENT_<variant>, from the variants table
# include/rvvk/variants.def), so the driver's `#include "<op>_isa.h"` finds the
# most specific implementation. The partial variants (RVVK_PARTIAL_<variant>:
# x86_avx512_bf16, x86_amx) compile only the ops that have a folder
# <op>/<variant>/; their other kernels are those of their parent variant
# (runtime/dispatch.cpp declares which, from the table's RVVK_PARTIAL_KERNELS).
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

# The variants come from the variants table, include/rvvk/variants.def (one X(...) row
# per variant: name, arch, parent, kind, vlen, "flags", CPU test). A row is compiled
# when its arch is the target's, its option is on, its parent was compiled and the
# compiler builds its probe below (`_rvvk_probe_<variant>`, if any) with its flags.
# Sets RVVK_VARIANTS (table order), RVVK_FLAGS_<v>, RVVK_PARENT_<v> (empty for none)
# and RVVK_PARTIAL_<v> (TRUE for a partial variant).
set(_rvvk_probe_rvv "
#include <riscv_vector.h>
int main() { float x[4] = {1, 2, 3, 4}; size_t vl = __riscv_vsetvl_e32m1(4);
  vfloat32m1_t v = __riscv_vle32_v_f32m1(x, vl);
  vfloat32m1_t z = __riscv_vfmv_v_f_f32m1(0.0f, 1);
  return (int)__riscv_vfmv_f_s_f32m1_f32(__riscv_vfredusum_vs_f32m1_f32m1(v, z, vl)); }")
set(_rvvk_probe_rvv_zvfh "
#include <riscv_vector.h>
int main() { _Float16 h[2] = {1, 2}; float f[2]; size_t vl = __riscv_vsetvl_e16mf2(2);
  __riscv_vse32_v_f32m1(f, __riscv_vfwcvt_f_f_v_f32m1(__riscv_vle16_v_f16mf2(h, vl), vl), vl);
  return (int)f[1]; }")
set(_rvvk_probe_x86_avx2 "
#include <immintrin.h>
int main() { float x[8] = {1}; __m256 v = _mm256_maskload_ps(x, _mm256_set1_epi32(-1));
  __m256 h = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)x));
  __m256i i = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)x));
  return _mm256_extract_epi32(i, 0) + (int)_mm256_cvtss_f32(_mm256_fmadd_ps(v, h, v)); }")
set(_rvvk_probe_x86_avx512 "
#include <immintrin.h>
int main() { float x[16] = {1}; __m512 v = _mm512_maskz_loadu_ps(0x3, x);
  __m256i h = _mm256_maskz_loadu_epi16(0x3, x); __m128i b = _mm_maskz_loadu_epi8(0x3, x);
  return (int)_mm512_reduce_add_ps(_mm512_add_ps(v, _mm512_cvtph_ps(h)))
         + _mm_extract_epi8(b, 0); }")
set(_rvvk_probe_x86_avx512_bf16 "
#include <immintrin.h>
int main() { float x[16] = {1}; __m512bh p = (__m512bh)_mm512_loadu_si512(x);
  return (int)_mm512_reduce_add_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), p, p)); }")
set(_rvvk_probe_x86_amx "
#include <immintrin.h>
int main() { alignas(64) unsigned char cfg[64] = {1}; float x[32] = {1};
  _tile_loadconfig(cfg); _tile_zero(0); _tile_loadd(1, x, 64);
  _tile_loadd(2, x, 64); _tile_dpbf16ps(0, 1, 2); _tile_stored(0, x, 64); _tile_release();
  __m512bh p = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x), _mm512_loadu_ps(x));
  return (int)x[0] + (int)_mm512_reduce_add_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), p, p)); }")

if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(riscv64|rv64)")
  set(_rvvk_arch riscv64)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set(_rvvk_arch x86_64)
else()
  set(_rvvk_arch other)
endif()
set(RVVK_VARIANTS)
set(_rvvk_variants_def "${RVVK_SOURCE_DIR}/include/rvvk/variants.def")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_rvvk_variants_def}")
file(READ "${_rvvk_variants_def}" _rvvk_def)
string(REPLACE "\\\n" "\n" _rvvk_def "${_rvvk_def}")  # the macro's line continuations
string(REGEX MATCHALL "\n *X\\(A, [^\n]*" _rvvk_rows "${_rvvk_def}")
set(_rvvk_row_re
    "^\n *X\\(A, *([a-z0-9_]+), *([a-z0-9_]+), *([a-z0-9_]+), *(full|partial), *[^,]+, *\"([^\"]*)\",")
foreach(_row IN LISTS _rvvk_rows)
  if(NOT _row MATCHES "${_rvvk_row_re}")
    message(FATAL_ERROR "rvv-kernels: cannot read this row of ${_rvvk_variants_def}: ${_row}")
  endif()
  set(_v ${CMAKE_MATCH_1})
  set(_arch ${CMAKE_MATCH_2})
  set(_parent ${CMAKE_MATCH_3})
  set(_kind ${CMAKE_MATCH_4})
  string(REPLACE "|" ";" _alternatives "${CMAKE_MATCH_5}")
  if(NOT _arch STREQUAL "any" AND NOT _arch STREQUAL _rvvk_arch)
    continue()
  endif()
  if((_arch STREQUAL "riscv64" AND NOT RVVK_ENABLE_RVV)
     OR (_arch STREQUAL "x86_64" AND NOT RVVK_ENABLE_X86)
     OR (_v STREQUAL "rvv_zvfh" AND NOT RVVK_ENABLE_ZVFH))
    continue()
  endif()
  if(NOT _parent STREQUAL "none" AND NOT _parent IN_LIST RVVK_VARIANTS)
    continue()  # the parent's probe failed and said so
  endif()
  set(_flags)
  foreach(_alt IN LISTS _alternatives)
    separate_arguments(_alt_flags UNIX_COMMAND "${_alt}")
    if(DEFINED _rvvk_probe_${_v})
      string(MAKE_C_IDENTIFIER "RVVK_PROBE_${_v}_${_alt}" _var)
      rvvk_probe(${_var} "${_rvvk_probe_${_v}}" ${_alt_flags})
      if(NOT ${_var})
        continue()
      endif()
    endif()
    set(_flags ${_alt_flags})
    set(_found TRUE)
    break()
  endforeach()
  if(NOT _alternatives)
    set(_found TRUE)
  endif()
  if(NOT _found)
    if(_v STREQUAL "rvv")
      message(FATAL_ERROR
        "rvv-kernels: ${CMAKE_CXX_COMPILER} cannot compile RVV 1.0 intrinsics (__riscv_ prefix) "
        "with -march=rv64gcv. Use clang >= 16 (tools/provision.sh toolchain installs clang-16), "
        "or configure with -DRVVK_ENABLE_RVV=OFF for a portable-only build.")
    endif()
    message(WARNING "rvv-kernels: ${CMAKE_CXX_COMPILER} cannot compile the ${_v} variant's "
                    "intrinsics; no ${_v} variant (nor any variant built on it)")
    unset(_found)
    continue()
  endif()
  unset(_found)
  list(APPEND RVVK_VARIANTS ${_v})
  set(RVVK_FLAGS_${_v} ${_flags})
  if(_parent STREQUAL "none")
    set(RVVK_PARENT_${_v} "")
  else()
    set(RVVK_PARENT_${_v} ${_parent})
  endif()
  if(_kind STREQUAL "partial")
    set(RVVK_PARTIAL_${_v} TRUE)
  else()
    set(RVVK_PARTIAL_${_v} FALSE)
  endif()
endforeach()
if(NOT "portable" IN_LIST RVVK_VARIANTS)
  message(FATAL_ERROR "rvv-kernels: ${_rvvk_variants_def} has no portable row")
endif()
# The portable variant's flags are the user's; on riscv64 it is also the scalar
# baseline of the instruction counts: no vector unit, no auto-vectorisation.
list(APPEND RVVK_FLAGS_portable ${RVVK_PORTABLE_FLAGS})
if(_rvvk_arch STREQUAL "riscv64")
  list(APPEND RVVK_FLAGS_portable -march=rv64gc)
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    list(APPEND RVVK_FLAGS_portable -fno-vectorize -fno-slp-vectorize)
  endif()
endif()
message(STATUS "rvv-kernels variants: ${RVVK_VARIANTS}")



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
    if(RVVK_PARTIAL_${_v} AND NOT IS_DIRECTORY "${op_dir}/${_v}")
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
