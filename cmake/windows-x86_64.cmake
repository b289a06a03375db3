# Cross-build for 64-bit Windows from Linux (make windows uses it):
#   cmake -S . -B build-win -DCMAKE_TOOLCHAIN_FILE=cmake/windows-x86_64.cmake
# clang with the MinGW-w64 target, not MinGW's gcc: Debian's gcc-mingw-w64
# (win32 thread model) compiles _Thread_local as emulated TLS, a call to
# __emutls_get_address on every access of the fast paths; clang reads the
# thread's slot through _tls_index and gs:0x58, as MSVC does. Headers,
# libraries and binutils come from Debian's mingw-w64.
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
set(SHOAL_WINDOWS_TRIPLE x86_64-w64-mingw32)
set(CMAKE_C_COMPILER clang)
set(CMAKE_CXX_COMPILER clang++)
set(CMAKE_C_COMPILER_TARGET x86_64-w64-windows-gnu)
set(CMAKE_CXX_COMPILER_TARGET x86_64-w64-windows-gnu)
set(CMAKE_RC_COMPILER ${SHOAL_WINDOWS_TRIPLE}-windres)
set(CMAKE_AR ${SHOAL_WINDOWS_TRIPLE}-ar CACHE FILEPATH "")
set(CMAKE_RANLIB ${SHOAL_WINDOWS_TRIPLE}-ranlib CACHE FILEPATH "")
set(CMAKE_LINKER ${SHOAL_WINDOWS_TRIPLE}-ld CACHE FILEPATH "")
set(CMAKE_OBJCOPY ${SHOAL_WINDOWS_TRIPLE}-objcopy CACHE FILEPATH "")
set(CMAKE_NM ${SHOAL_WINDOWS_TRIPLE}-nm CACHE FILEPATH "")
set(CMAKE_FIND_ROOT_PATH /usr/${SHOAL_WINDOWS_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
# Programs run under Wine's wine64 (Debian keeps it off the PATH).
set(CMAKE_CROSSCOMPILING_EMULATOR /usr/lib/wine/wine64)
# clang finds MinGW's gcc libraries (libgcc, libstdc++) only in a folder
# named by a bare version; Debian names them <version>-posix and -win32.
# The posix ones: the tests' threads are winpthreads'.
file(GLOB SHOAL_MINGW_GCC_DIRS /usr/lib/gcc/${SHOAL_WINDOWS_TRIPLE}/*-posix)
list(GET SHOAL_MINGW_GCC_DIRS 0 SHOAL_MINGW_GCC_DIR)
set(CMAKE_CXX_FLAGS_INIT
    "-isystem ${SHOAL_MINGW_GCC_DIR}/include/c++ -isystem ${SHOAL_MINGW_GCC_DIR}/include/c++/${SHOAL_WINDOWS_TRIPLE}")
foreach(kind EXE SHARED MODULE)
  set(CMAKE_${kind}_LINKER_FLAGS_INIT "-fuse-ld=lld -L${SHOAL_MINGW_GCC_DIR}")
endforeach()
