# The Win64 tests: the C tests that apply on Windows, cross-built with the
# toolchain of cmake/windows-x86_64.cmake and linked with libshoal.a (its
# standard names replace the C runtime's in the program), run under Wine by
# `make test-windows` (WINEPREFIX and WINEDEBUG from there). Each add_test
# runs through CMAKE_CROSSCOMPILING_EMULATOR (wine64); the scripts get
# test/wine-run.sh, which hands them LF line ends and the exit status.
#
# Not here, and why:
#   fork, fork_signal      no fork on Windows
#   rlimit, enomem(_cxx)   RLIMIT_AS: Windows has no such limit to set (a job
#                          object's memory limit would be the way; not tried)
#   early, early_preload,  LD_PRELOAD, dlopen'd ELF modules, the shoal command
#   programs, tool,        and the installed .so/pkg-config: Linux mechanisms
#   install, packaging
#   stats_exit(_preload)   its script reads /proc and preloads the library;
#                          windows-diagnostics.sh checks SHOAL_STATS here
#   diagnostics (Linux's)  names call sites from ELF symbols and libgcc's
#                          unwinder; here: windows-diagnostics.sh (module+offset)
#   cxx, check's C++ half  shoal's own operator new/delete are not in
#                          libshoal.a on Windows (src/api/exports.c says why):
#                          cxx_static checks that libstdc++'s reach shoal
#   layers, unit           the same sources as on Linux: checked there
set(SHOAL_WINE_RUN ${CMAKE_CURRENT_SOURCE_DIR}/wine-run.sh ${CMAKE_CROSSCOMPILING_EMULATOR})

function(shoal_windows_program target source)
  add_executable(${target} ${source})
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror -fno-builtin)
  target_compile_definitions(${target} PRIVATE _GNU_SOURCE)
  target_include_directories(${target} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}
                                               ${PROJECT_SOURCE_DIR}/include)
  # Static: no libwinpthread-1.dll or libgcc DLL to find beside it under Wine.
  target_link_options(${target} PRIVATE -static)
  target_link_libraries(${target} PRIVATE shoal_static pthread)
endfunction()

function(shoal_windows_test name)
  shoal_windows_program(test_${name} ${name}.c)
  add_test(NAME ${name} COMMAND test_${name})
  set_tests_properties(${name} PROPERTIES LABELS "windows;${ARGN}" TIMEOUT 300)
endfunction()

shoal_windows_test(api)
# The program's exception table stays sorted and true with libshoal.a linked in.
shoal_windows_test(unwind_table)
shoal_windows_test(threads threads)
shoal_windows_test(stress threads)
shoal_windows_test(purge threads)
shoal_windows_test(stats_threads threads)
# Which requests the medium pool serves, under each SHOAL_MEDIUM_POOL value.
shoal_windows_test(medium_pool threads)
foreach(mode 0 1)
  add_test(NAME medium_pool_${mode} COMMAND test_medium_pool)
  set_tests_properties(medium_pool_${mode} PROPERTIES LABELS "windows;threads" TIMEOUT 300
                       ENVIRONMENT "SHOAL_MEDIUM_POOL=${mode}")
endforeach()
# The same programs with the medium pool over every medium size (SHOAL_MEDIUM_POOL=1).
foreach(name api stress threads)
  add_test(NAME ${name}_pool COMMAND test_${name})
  get_test_property(${name} LABELS labels)
  set_tests_properties(${name}_pool PROPERTIES LABELS "${labels}" TIMEOUT 300
                       ENVIRONMENT "SHOAL_MEDIUM_POOL=1")
endforeach()

# The same through shoal.dll, with the prefixed API only (these tests call
# shoal_*): thread exit in a DLL, its statistics. The DLL is copied beside
# the programs, where Windows looks first.
foreach(name threads stats_threads)
  add_executable(test_${name}_dll ${name}.c)
  target_compile_options(test_${name}_dll PRIVATE -Wall -Wextra -Werror -fno-builtin)
  target_compile_definitions(test_${name}_dll PRIVATE _GNU_SOURCE)
  target_include_directories(test_${name}_dll PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}
                                                      ${PROJECT_SOURCE_DIR}/include)
  target_link_options(test_${name}_dll PRIVATE -static)
  target_link_libraries(test_${name}_dll PRIVATE shoal pthread)
  add_custom_command(TARGET test_${name}_dll POST_BUILD
    COMMAND ${CMAKE_COMMAND} -E copy_if_different $<TARGET_FILE:shoal> $<TARGET_FILE_DIR:test_${name}_dll>)
  add_test(NAME ${name}_dll COMMAND test_${name}_dll)
  set_tests_properties(${name}_dll PROPERTIES LABELS "windows;threads" TIMEOUT 300)
endforeach()

shoal_windows_program(test_misuse misuse.c)
add_test(NAME misuse COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/misuse.sh ${SHOAL_WINE_RUN}
                             $<TARGET_FILE:test_misuse>)
set_tests_properties(misuse PROPERTIES LABELS windows TIMEOUT 300 ENVIRONMENT SHOAL_ABORT_STATUS=3)
add_test(NAME misuse_pool COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/misuse.sh ${SHOAL_WINE_RUN}
                                  $<TARGET_FILE:test_misuse>)
set_tests_properties(misuse_pool PROPERTIES LABELS windows TIMEOUT 300
                     ENVIRONMENT "SHOAL_ABORT_STATUS=3;SHOAL_MEDIUM_POOL=1")

# Checked mode and the default mode's catches: check.sh's catalogue, its C
# cases (Debian's MinGW C++ runtime for the C++ ones: see above).
shoal_windows_program(test_check_cases check_cases.c)
add_test(NAME check COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/check.sh
                            $<TARGET_FILE:test_check_cases> -)
set_tests_properties(check PROPERTIES LABELS windows TIMEOUT 300
  ENVIRONMENT "SHOAL_TEST_RUNNER=${CMAKE_CURRENT_SOURCE_DIR}/wine-run.sh ${CMAKE_CROSSCOMPILING_EMULATOR};SHOAL_ABORT_STATUS=3")

# C++ with libstdc++ linked statically: its new and delete reach shoal.
add_executable(test_cxx_static cxx_static.cpp)
target_compile_options(test_cxx_static PRIVATE -Wall -Wextra -Werror -fno-builtin)
target_include_directories(test_cxx_static PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}
                                                   ${PROJECT_SOURCE_DIR}/include)
target_link_options(test_cxx_static PRIVATE -static)
target_link_libraries(test_cxx_static PRIVATE shoal_static pthread)
add_test(NAME cxx_static COMMAND test_cxx_static)
set_tests_properties(cxx_static PROPERTIES LABELS windows TIMEOUT 300)

# The same two programs built by MinGW's own g++ and GNU ld, the other
# toolchain that links libshoal.a (README): its C++ runtime's new reaches
# shoal, its exceptions unwind, its exception table is whole.
find_program(SHOAL_MINGW_GXX NAMES ${SHOAL_WINDOWS_TRIPLE}-g++-posix ${SHOAL_WINDOWS_TRIPLE}-g++)
if(SHOAL_MINGW_GXX)
  foreach(file cxx_static.cpp unwind_table.c)
    get_filename_component(name ${file} NAME_WE)
    set(source ${CMAKE_CURRENT_SOURCE_DIR}/${file})
    set(language -x c++) # g++ takes a .c file for C++ too
    if(file MATCHES "\\.c$")
      set(language -x c -std=c11 -D_GNU_SOURCE)
    endif()
    set(program ${CMAKE_CURRENT_BINARY_DIR}/test_${name}_gnu.exe)
    add_custom_command(OUTPUT ${program}
      COMMAND ${SHOAL_MINGW_GXX} ${language} -O2 -Wall -Wextra -Werror -fno-builtin
              -I${CMAKE_CURRENT_SOURCE_DIR} -I${PROJECT_SOURCE_DIR}/include ${source} -x none
              $<TARGET_FILE:shoal_static> -static -o ${program}
      DEPENDS ${source} shoal_static $<TARGET_FILE:shoal_static>
      COMMENT "Building test_${name}_gnu.exe with MinGW's g++ and GNU ld" VERBATIM)
    add_custom_target(test_${name}_gnu ALL DEPENDS ${program})
    add_test(NAME ${name}_gnu COMMAND ${CMAKE_CROSSCOMPILING_EMULATOR} ${program})
    set_tests_properties(${name}_gnu PROPERTIES LABELS windows TIMEOUT 300)
  endforeach()
endif()

# Leak report and statistics at exit on a program with known leaks; call
# sites as module+offset, checked against the program's symbols.
add_executable(test_diag_leaks diag_leaks.c)
target_compile_options(test_diag_leaks PRIVATE -Wall -Wextra -Werror -g -fno-optimize-sibling-calls
                                               -fno-inline)
target_link_options(test_diag_leaks PRIVATE -static)
target_link_libraries(test_diag_leaks PRIVATE shoal_static pthread)
add_test(NAME diagnostics COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/windows-diagnostics.sh ${CMAKE_NM}
                                  ${SHOAL_WINE_RUN} $<TARGET_FILE:test_diag_leaks>)
set_tests_properties(diagnostics PROPERTIES LABELS windows TIMEOUT 300)
