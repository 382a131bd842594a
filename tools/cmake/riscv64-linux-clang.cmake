# CMake toolchain file: cross-compile for riscv64 Linux with Debian 12's clang-16 and lld-16.
#
#   cmake -G Ninja -DCMAKE_TOOLCHAIN_FILE=tools/cmake/riscv64-linux-clang.cmake ...
#
# Variables (as -D cache variables or environment variables of the same name):
#   RVV_SYSROOT   a riscv64 root to build against, e.g. the Debian 13 root provisioned at
#                 ~/.cache/rvv-sglang/riscv64-root (python3.13, libtorch, libstdc++ 14).
#                 Default: none, i.e. Debian 12's cross packages (/usr/riscv64-linux-gnu,
#                 libstdc++ 12, found by clang on its own).
#   RVV_QEMU      path of a qemu-riscv64 binary: sets CMAKE_CROSSCOMPILING_EMULATOR (used by
#                 try_run, add_test and ctest) to "RVV_QEMU -L <sysroot> -cpu RVV_QEMU_CPU".
#   RVV_QEMU_CPU  the -cpu string; default for QEMU >= 8: rv64,v=true,vlen=256,zfh=true,zvfh=true
#                 and for QEMU 7.2: rv64,v=true,vlen=256,elen=64,vext_spec=v1.0,Zfh=true
#                 (7.2 has no zvfh property; with Zfh it runs fp16 vector arithmetic)
#
# The default ISA is rv64gc (lp64d). Targets with RVV code add the flags themselves:
#   target_compile_options(t PRIVATE ${RVV_MARCH_V})     # -march=rv64gcv
#   target_compile_options(t PRIVATE ${RVV_MARCH_ZVFH})  # + Zfh/Zvfh (experimental in clang 16)
# (the later -march on the command line wins).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR riscv64)
set(CMAKE_LIBRARY_ARCHITECTURE riscv64-linux-gnu)

set(RVV_TRIPLE riscv64-linux-gnu)
set(RVV_MARCH_V -march=rv64gcv)
set(RVV_MARCH_ZVFH -march=rv64gcv_zfh_zvfh0p1 -menable-experimental-extensions)

find_program(RVV_CLANG NAMES clang-16 REQUIRED)
find_program(RVV_CLANGXX NAMES clang++-16 REQUIRED)
find_program(RVV_LLVM_AR NAMES llvm-ar-16 REQUIRED)
find_program(RVV_LLVM_RANLIB NAMES llvm-ranlib-16 REQUIRED)
set(CMAKE_C_COMPILER ${RVV_CLANG})
set(CMAKE_CXX_COMPILER ${RVV_CLANGXX})
set(CMAKE_ASM_COMPILER ${RVV_CLANG})
set(CMAKE_C_COMPILER_TARGET ${RVV_TRIPLE})
set(CMAKE_CXX_COMPILER_TARGET ${RVV_TRIPLE})
set(CMAKE_ASM_COMPILER_TARGET ${RVV_TRIPLE})
# the host's GNU ar does not know riscv64 objects
set(CMAKE_AR ${RVV_LLVM_AR} CACHE FILEPATH "archiver" FORCE)
set(CMAKE_RANLIB ${RVV_LLVM_RANLIB} CACHE FILEPATH "ranlib" FORCE)

set(CMAKE_C_FLAGS_INIT "-march=rv64gc")
set(CMAKE_CXX_FLAGS_INIT "-march=rv64gc")
set(CMAKE_ASM_FLAGS_INIT "-march=rv64gc")
foreach(kind EXE SHARED MODULE)
    set(CMAKE_${kind}_LINKER_FLAGS_INIT "-fuse-ld=lld")
endforeach()

# sysroot: the -D variable, else the environment variable, else Debian's cross packages
if(NOT RVV_SYSROOT AND DEFINED ENV{RVV_SYSROOT})
    set(RVV_SYSROOT "$ENV{RVV_SYSROOT}")
endif()
if(NOT RVV_QEMU AND DEFINED ENV{RVV_QEMU})
    set(RVV_QEMU "$ENV{RVV_QEMU}")
endif()
if(NOT RVV_QEMU_CPU AND DEFINED ENV{RVV_QEMU_CPU})
    set(RVV_QEMU_CPU "$ENV{RVV_QEMU_CPU}")
endif()
# pass them on to try_compile projects
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES RVV_SYSROOT RVV_QEMU RVV_QEMU_CPU)

if(RVV_SYSROOT)
    # A Debian multiarch root: clang finds crt files, libgcc, libstdc++ headers (GCC 14) and
    # usr/include/riscv64-linux-gnu in it by itself.
    set(CMAKE_SYSROOT "${RVV_SYSROOT}")
    set(CMAKE_FIND_ROOT_PATH "${RVV_SYSROOT}")
    set(RVV_RUN_PREFIX "${RVV_SYSROOT}")
    # executables linking libraries from the root need their DT_NEEDED found there too
    foreach(kind EXE SHARED MODULE)
        string(APPEND CMAKE_${kind}_LINKER_FLAGS_INIT
            " -Wl,-rpath-link,${RVV_SYSROOT}/usr/lib/riscv64-linux-gnu")
    endforeach()
else()
    # Debian 12's cross packages: no --sysroot (clang pairs /usr/riscv64-linux-gnu with
    # /usr/lib/gcc-cross/riscv64-linux-gnu/12 itself); find_* look there.
    set(CMAKE_FIND_ROOT_PATH /usr/riscv64-linux-gnu)
    set(RVV_RUN_PREFIX /usr/riscv64-linux-gnu)
endif()
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

if(RVV_QEMU)
    if(NOT RVV_QEMU_CPU)
        execute_process(COMMAND "${RVV_QEMU}" --version OUTPUT_VARIABLE _rvv_qemu_version
            RESULT_VARIABLE _rvv_rc ERROR_QUIET)
        if(NOT _rvv_rc EQUAL 0)
            message(FATAL_ERROR "RVV_QEMU=${RVV_QEMU} does not run")
        endif()
        if(_rvv_qemu_version MATCHES "version [1-7]\\.")
            set(RVV_QEMU_CPU "rv64,v=true,vlen=256,elen=64,vext_spec=v1.0,Zfh=true")
        else()
            set(RVV_QEMU_CPU "rv64,v=true,vlen=256,zfh=true,zvfh=true")
        endif()
    endif()
    set(CMAKE_CROSSCOMPILING_EMULATOR "${RVV_QEMU};-L;${RVV_RUN_PREFIX};-cpu;${RVV_QEMU_CPU}")
endif()
