# Thin front door over CMake. `make`, `make test`, `make bench`, `make install`.
BUILD   ?= build
PREFIX  ?= /usr/local
JOBS    ?= $(shell nproc)
CMAKE   ?= cmake
CTEST   ?= ctest

.PHONY: all build test test-release test-clang test-ubsan test-tsan format format-check bench install clean deps

all: build

$(BUILD)/CMakeCache.txt:
	$(CMAKE) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=$(PREFIX)

build: $(BUILD)/CMakeCache.txt
	$(CMAKE) --build $(BUILD) -j $(JOBS)

# Every test: release build with gcc, warnings-as-errors build with clang,
# the whole suite under UBSan, the multi-threaded tests under TSan, format.
test: format-check test-release test-clang test-ubsan test-tsan
	@echo "make test: all suites passed"

test-release: build
	cd $(BUILD) && $(CTEST) --output-on-failure -j $(JOBS)

test-clang:
	CC=clang CXX=clang++ $(CMAKE) -S . -B $(BUILD)-clang -DCMAKE_BUILD_TYPE=Release >/dev/null
	$(CMAKE) --build $(BUILD)-clang -j $(JOBS)
	cd $(BUILD)-clang && $(CTEST) --output-on-failure -j $(JOBS) -L quick

test-ubsan:
	$(CMAKE) -S . -B $(BUILD)-ubsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHOAL_SANITIZE=undefined >/dev/null
	$(CMAKE) --build $(BUILD)-ubsan -j $(JOBS)
	cd $(BUILD)-ubsan && SHOAL_TEST_SCALE=0.2 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 $(CTEST) --output-on-failure -j $(JOBS) -LE nosan

test-tsan:
	CC=clang CXX=clang++ $(CMAKE) -S . -B $(BUILD)-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHOAL_SANITIZE=thread >/dev/null
	$(CMAKE) --build $(BUILD)-tsan -j $(JOBS)
	cd $(BUILD)-tsan && SHOAL_TEST_SCALE=0.1 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" $(CTEST) --output-on-failure -j $(JOBS) -L threads -LE nosan

FORMAT_FILES = $(shell git ls-files '*.c' '*.h' '*.cpp' 2>/dev/null)
format:
	clang-format -i $(FORMAT_FILES)

format-check:
	@clang-format --dry-run --Werror $(FORMAT_FILES) && echo "format: clean"

# The C suite under every allocator, then (when fpc is here and no subset was
# asked for) the seeds' Pascal experiments under FPC's heap, cmem and ShoalMM.
bench: build
	python3 bench/run.py $(if $(FULL),--full) $(if $(ONLY),--only $(ONLY)) $(if $(ALLOC),--alloc $(ALLOC)) $(if $(RUNS),--runs $(RUNS))
	@if [ -z "$(ONLY)$(ALLOC)" ] && command -v fpc >/dev/null; then \
	  bash pascal/bench/run.sh bench/results/$$(date +%F)-pascal.md $(BUILD); \
	fi

install: build
	$(CMAKE) --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(BUILD)-clang $(BUILD)-ubsan $(BUILD)-tsan
