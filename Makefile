# Thin front door over CMake. `make`, `make test`, `make bench`, `make install`, `make deb`.
BUILD   ?= build
PREFIX  ?= /usr/local
JOBS    ?= $(shell nproc)
CMAKE   ?= cmake
CTEST   ?= ctest

.PHONY: all build test test-release test-clang test-ubsan test-tsan format format-check bench install clean \
        deps-test deps-bench deps-deb deps-lazarus deps-windows deb deb-test lazarus-test \
        windows test-windows

all: build

$(BUILD)/CMakeCache.txt:
	$(CMAKE) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=$(PREFIX)

build: $(BUILD)/CMakeCache.txt
	$(CMAKE) --build $(BUILD) -j $(JOBS)

# What each command needs from Debian, installed first (tools/deps: the one
# list; as root it runs apt-get, otherwise it prints the sudo line and stops).
deps-test deps-bench deps-deb deps-lazarus deps-windows:
	@tools/deps $(@:deps-%=%)

# Every test: release build with gcc, warnings-as-errors build with clang,
# the whole suite under UBSan, the multi-threaded tests under TSan (both
# with the free lists' audits, SHOAL_AUDIT), format, and the Win64 build's
# tests under Wine.
test: deps-test deps-windows
	@$(MAKE) --no-print-directory format-check test-release test-clang test-ubsan test-tsan test-windows
	@echo "make test: all suites passed"

test-release: build
	cd $(BUILD) && $(CTEST) --output-on-failure -j $(JOBS)

test-clang:
	CC=clang CXX=clang++ $(CMAKE) -S . -B $(BUILD)-clang -DCMAKE_BUILD_TYPE=Release >/dev/null
	$(CMAKE) --build $(BUILD)-clang -j $(JOBS)
	cd $(BUILD)-clang && $(CTEST) --output-on-failure -j $(JOBS) -L quick

test-ubsan:
	$(CMAKE) -S . -B $(BUILD)-ubsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHOAL_SANITIZE=undefined \
	  -DSHOAL_AUDIT=ON >/dev/null
	$(CMAKE) --build $(BUILD)-ubsan -j $(JOBS)
	cd $(BUILD)-ubsan && SHOAL_TEST_SCALE=0.2 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 $(CTEST) --output-on-failure -j $(JOBS) -LE nosan

test-tsan:
	CC=clang CXX=clang++ $(CMAKE) -S . -B $(BUILD)-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHOAL_SANITIZE=thread \
	  -DSHOAL_AUDIT=ON >/dev/null
	$(CMAKE) --build $(BUILD)-tsan -j $(JOBS)
	cd $(BUILD)-tsan && SHOAL_TEST_SCALE=0.1 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" $(CTEST) --output-on-failure -j $(JOBS) -L threads -LE nosan

# Win64, cross-built with clang and MinGW-w64 (cmake/windows-x86_64.cmake):
# shoal.dll with its import library libshoal.dll.a, and libshoal.a.
WIN_BUILD ?= $(BUILD)-win
WINE      ?= /usr/lib/wine/wine64
WINESERVER ?= /usr/lib/wine/wineserver64
windows: deps-windows
	$(CMAKE) -S . -B $(WIN_BUILD) -DCMAKE_TOOLCHAIN_FILE=cmake/windows-x86_64.cmake \
	  -DCMAKE_BUILD_TYPE=Release >/dev/null
	$(CMAKE) --build $(WIN_BUILD) -j $(JOBS)

# The C tests that apply, then the Pascal tests as Win64 programs, under
# Wine, in one Wine prefix made once in the build folder.
test-windows: windows
	@test -f $(WIN_BUILD)/wine/system.reg || { echo "wineboot: a Wine prefix in $(WIN_BUILD)/wine (once)"; \
	  WINEPREFIX=$(abspath $(WIN_BUILD))/wine WINEDEBUG=-all $(WINE) wineboot -i >/dev/null 2>&1; }
	@# One Wine server for the whole run, kept 30 s past its last program: the tests start
	@# hundreds of short Wine programs, two at a time, and a program that starts while the
	@# server is going away with the last one fails ("recvmsg: Connection reset by peer").
	@# A server still up (wineboot's, just above) refuses -p30 and goes away 3 s after
	@# its last program: wait for it to go first.
	-@WINEPREFIX=$(abspath $(WIN_BUILD))/wine $(WINESERVER) -w 2>/dev/null; \
	  WINEPREFIX=$(abspath $(WIN_BUILD))/wine $(WINESERVER) -p30 2>/dev/null
	@rm -f $(WIN_BUILD)/wine-retries.log
	cd $(WIN_BUILD) && WINEPREFIX=$(abspath $(WIN_BUILD))/wine WINEDEBUG=-all $(CTEST) --output-on-failure -j $(JOBS)
	@! test -f $(WIN_BUILD)/wine-retries.log || cat $(WIN_BUILD)/wine-retries.log
	WINEPREFIX=$(abspath $(WIN_BUILD))/wine WINEDEBUG=-all WINE=$(WINE) pascal/windows/run_tests.sh $(WIN_BUILD)

FORMAT_FILES = $(shell git ls-files '*.c' '*.h' '*.cpp' 2>/dev/null)
format:
	clang-format -i $(FORMAT_FILES)

format-check:
	@clang-format --dry-run --Werror $(FORMAT_FILES) && echo "format: clean"

# The C suite under every allocator, then (when fpc is here and no subset was
# asked for) the seeds' Pascal experiments under FPC's heap, cmem and ShoalMM.
bench: deps-bench
	@$(MAKE) --no-print-directory build
	python3 bench/run.py $(if $(FULL),--full) $(if $(ONLY),--only $(ONLY)) $(if $(ALLOC),--alloc $(ALLOC)) $(if $(RUNS),--runs $(RUNS)) $(if $(JOURNAL),--journal $(JOURNAL))
	@if [ -z "$(ONLY)$(ALLOC)" ] && command -v fpc >/dev/null; then \
	  bash pascal/bench/run.sh bench/results/$$(date +%F)-pascal.md $(BUILD); \
	fi

install: build
	$(CMAKE) --install $(BUILD) --prefix $(PREFIX)

# Debian packages (libshoal0, libshoal-dev, shoal) into $(BUILD)/deb, built
# from a copy of the tree there and checked by lintian (tools/build-deb).
deb: deps-deb
	tools/build-deb $(BUILD)/deb

# Those packages installed over an older shoal, used, removed: nothing may be
# left behind (test/package.sh; root, as it installs packages).
deb-test: deb
	test/package.sh $(BUILD)/deb

# The Lazarus package pascal/lazshoalmm.lpk in a project built by lazbuild,
# which must run with ShoalMM as its memory manager. The package builds
# build/libshoal.a itself (make build), as it does for a Lazarus user.
lazarus-test: deps-lazarus
	pascal/tests/lazarus/run.sh

clean:
	rm -rf $(BUILD) $(BUILD)-clang $(BUILD)-ubsan $(BUILD)-tsan $(WIN_BUILD)
