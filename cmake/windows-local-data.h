/* windows-local-data.h — forced into every file of libshoal on Windows
 * (CMakeLists.txt). Declarations made hidden are known to be in the same
 * module, so clang reaches shoal's own globals directly instead of through
 * a MinGW `.refptr` pointer in a COMDAT section of its own, which Free
 * Pascal's internal linker cannot link (libshoal_fpc.a). Exports are chosen
 * by shoal.def, not by visibility, on Windows. */
#pragma GCC visibility push(hidden)
