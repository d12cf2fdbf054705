# Lull — two commands do everything on a fresh Debian machine:
#   make demo   runs the demo
#   make test   checks the folders' layering, builds with warnings as errors and runs the test suite
# Both install libevent-dev first when pkg-config cannot find it.
# make bench also installs inotify-tools (inotifywait, the peer of fs-tree-watch) if missing.
# make test-tsan runs the suite under ThreadSanitizer (scratch path .build-tsan); make stress
# runs the interleaving stress harness long (Tests/LullTests/Stress), then again under
# AddressSanitizer (make stress-asan, scratch path .build-asan). A sanitizer report fails them.

SWIFT      ?= swift
SWIFTFLAGS ?=
BENCH_ARGS ?=
# Seeds of the long stress runs; each case runs in a child process of its own, so that a
# crash is logged with its seed and shrunk (see StressConfiguration.swift for LULL_STRESS_*).
STRESS_ROUNDS      ?= 400
STRESS_ASAN_ROUNDS ?= 150
# Sanitizer reports fail the run at once; leaks count too, except the toolchain XCTest
# runner's own (.ci/lsan-suppressions.txt).
TSAN_OPTIONS ?= halt_on_error=1
ASAN_OPTIONS ?= halt_on_error=1:detect_leaks=1
LSAN_OPTIONS ?= suppressions=$(CURDIR)/.ci/lsan-suppressions.txt
export TSAN_OPTIONS ASAN_OPTIONS LSAN_OPTIONS
STRESS_FILTER = InterleavingStressTests

.PHONY: all deps bench-deps build test test-tsan stress stress-asan demo bench check-layers clean

all: build

deps:
	@./scripts/ensure-libevent.sh

bench-deps: deps
	@./scripts/ensure-inotify-tools.sh

build: deps
	$(SWIFT) build $(SWIFTFLAGS)

test: deps check-layers
	$(SWIFT) build --build-tests $(SWIFTFLAGS)
	$(SWIFT) test --skip-build $(SWIFTFLAGS)
	@$(MAKE) --no-print-directory test-unprivileged

# The priority, signal and limit suites again as nobody (as root; otherwise it says it skips).
test-unprivileged:
	SWIFT="$(SWIFT)" SWIFTFLAGS="$(SWIFTFLAGS)" ./scripts/test-unprivileged.sh

test-tsan: deps
	$(SWIFT) test --sanitize=thread --scratch-path .build-tsan $(SWIFTFLAGS)

stress: deps
	$(SWIFT) build --build-tests $(SWIFTFLAGS)
	LULL_STRESS_ROUNDS=$(STRESS_ROUNDS) LULL_STRESS_ISOLATE=1 \
		$(SWIFT) test --skip-build $(SWIFTFLAGS) --filter $(STRESS_FILTER)
	$(MAKE) stress-asan

stress-asan: deps
	$(SWIFT) build --build-tests --sanitize=address --scratch-path .build-asan $(SWIFTFLAGS)
	LULL_STRESS_ROUNDS=$(STRESS_ASAN_ROUNDS) LULL_STRESS_ISOLATE=1 \
		$(SWIFT) test --skip-build --sanitize=address --scratch-path .build-asan $(SWIFTFLAGS) --filter $(STRESS_FILTER)

demo: deps
	SWIFT="$(SWIFT)" ./scripts/demo.sh

# The folders of Sources/Lull as layers: prints their dependencies, fails on a cycle or on
# an edge against the order declared in the script.
check-layers:
	@./scripts/ensure-python3.sh
	python3 scripts/check-layers.py --quiet

bench: bench-deps
	$(SWIFT) run -c release $(SWIFTFLAGS) lull-bench $(BENCH_ARGS)

clean:
	rm -rf .build .build-tsan .build-asan
