# Lull — two commands do everything on a fresh Debian machine:
#   make demo   runs the demo
#   make test   checks the folders' layering, builds with warnings as errors, builds every
#               documented Swift snippet, and runs the test suite
# Both install libevent-dev first when pkg-config cannot find it.
# make bench also installs inotify-tools (inotifywait, the peer of fs-tree-watch) if missing.
#
# Four packages: the library (this folder: all a client resolves is swift-log), and beside it,
# each depending on it by path, Examples/ (the example programs, swift-argument-parser),
# Tools/ (timerfires) and Benchmarks/ (lull-bench, swift-nio). make test builds the examples
# and tools first (make examples): the tests start them as child processes and find them in
# Examples/.build/debug and Tools/.build/debug (or LULL_EXECUTABLES_PATH). It never builds
# the benchmarks package, so it never builds SwiftNIO.
#
# Warnings are errors for Lull's own code here, not in the manifests (a client's newer
# toolchain must not break its build): WERROR is passed to every build of make test, CI's
# stages and make check-snippets. SwiftPM builds remote dependencies with their warnings
# suppressed, so the flag reaches only the project's own targets.
#
# make check-client (part of make test) fails if a client that depends on Lull by path
# resolves anything but swift-log.
# make check-snippets (part of make test) builds every ```swift block of README.md, the DocC
# articles, docs/*.md and the examples' READMEs, in one generated package under
# .build-snippets, and runs those marked <!-- snippet: run --> on the line before the fence.
# A block that is not a whole program is marked <!-- snippet: fragment --> and is not built
# (scripts/check-snippets.py and CONTRIBUTING.md say more).
# make docs renders the DocC catalog with the swift-docc-plugin, which the manifest declares
# only when LULL_DOCC is set (so that clients never resolve it).
# make test-tsan runs the suite under ThreadSanitizer (scratch path .build-tsan); make stress
# runs the interleaving stress harness long (Tests/LullTests/Stress), then again under
# AddressSanitizer (make stress-asan, scratch path .build-asan). A sanitizer report fails them.

SWIFT      ?= swift
SWIFTFLAGS ?=
WERROR     ?= -Xswiftc -warnings-as-errors
# The library's optional traits, on in every build of the tests so that their code is tested
# too (a client builds without them unless it asks; make check-client and make
# check-snippets build the library as a client does).
TRAITS     ?= --traits ServiceContext
BENCH_ARGS ?=
# A test run still going after this many seconds is hung: scripts/watchdog.sh prints every
# thread's stack and stops it, so the run fails with a diagnosis.
TEST_TIME_LIMIT ?= 1500
WATCHDOG = ./scripts/watchdog.sh $(TEST_TIME_LIMIT)
# Seeds of the long stress runs; each case runs in a child process of its own, so that a
# crash is logged with its seed and shrunk (see StressConfiguration.swift for LULL_STRESS_*).
STRESS_ROUNDS      ?= 400
STRESS_ASAN_ROUNDS ?= 150
# Sanitizer reports fail the run at once; leaks count too, except the toolchain XCTest
# runner's own (.ci/lsan-suppressions.txt); .ci/tsan-suppressions.txt holds the one race
# report the Swift runtime's uninstrumented continuation hand-off makes, with its proof.
TSAN_OPTIONS ?= halt_on_error=1:suppressions=$(CURDIR)/.ci/tsan-suppressions.txt
ASAN_OPTIONS ?= halt_on_error=1:detect_leaks=1
LSAN_OPTIONS ?= suppressions=$(CURDIR)/.ci/lsan-suppressions.txt
export TSAN_OPTIONS ASAN_OPTIONS LSAN_OPTIONS
STRESS_FILTER = InterleavingStressTests

.PHONY: all deps bench-deps build examples check-client test test-unprivileged test-tsan stress stress-asan demo bench check-layers check-snippets docs clean

all: build

deps:
	@./scripts/ensure-libevent.sh

bench-deps: deps
	@./scripts/ensure-inotify-tools.sh

build: deps
	$(SWIFT) build $(TRAITS) $(SWIFTFLAGS)

# The example programs and the tools, which the tests start as child processes (debug builds).
examples: deps
	$(SWIFT) build --package-path Examples $(WERROR) $(SWIFTFLAGS)
	$(SWIFT) build --package-path Tools $(WERROR) $(SWIFTFLAGS)

test: deps check-layers check-client examples check-snippets
	$(SWIFT) build $(TRAITS) --build-tests $(WERROR) $(SWIFTFLAGS)
	$(WATCHDOG) $(SWIFT) test $(TRAITS) --skip-build $(SWIFTFLAGS)
	@$(MAKE) --no-print-directory test-unprivileged

# The priority, signal and limit suites again as nobody (as root; otherwise it says it skips).
test-unprivileged:
	SWIFT="$(SWIFT)" SWIFTFLAGS="$(SWIFTFLAGS)" ./scripts/test-unprivileged.sh

test-tsan: deps examples
	$(SWIFT) build $(TRAITS) --build-tests --sanitize=thread --scratch-path .build-tsan $(WERROR) $(SWIFTFLAGS)
	$(WATCHDOG) $(SWIFT) test $(TRAITS) --skip-build --sanitize=thread --scratch-path .build-tsan $(SWIFTFLAGS)

stress: deps
	$(SWIFT) build $(TRAITS) --build-tests $(WERROR) $(SWIFTFLAGS)
	LULL_STRESS_ROUNDS=$(STRESS_ROUNDS) LULL_STRESS_ISOLATE=1 \
		$(SWIFT) test $(TRAITS) --skip-build $(SWIFTFLAGS) --filter $(STRESS_FILTER)
	$(MAKE) stress-asan

stress-asan: deps
	$(SWIFT) build $(TRAITS) --build-tests --sanitize=address --scratch-path .build-asan $(WERROR) $(SWIFTFLAGS)
	LULL_STRESS_ROUNDS=$(STRESS_ASAN_ROUNDS) LULL_STRESS_ISOLATE=1 \
		$(SWIFT) test $(TRAITS) --skip-build --sanitize=address --scratch-path .build-asan $(SWIFTFLAGS) --filter $(STRESS_FILTER)

demo: deps
	SWIFT="$(SWIFT)" ./scripts/demo.sh

# The folders of Sources/Lull as layers: prints their dependencies, fails on a cycle or on
# an edge against the order declared in the script.
check-layers:
	@./scripts/ensure-python3.sh
	python3 scripts/check-layers.py --quiet
	@# Mutex.withLock meets other threads inside the uninstrumented Synchronization library,
	@# where ThreadSanitizer cannot see it (a false race); the runtime and its tests lock
	@# through the annotated `locked` (Support/MutexAnnotations.swift).
	@! grep -rn --include='*.swift' '\.withLock\b' Sources/Lull Tests \
		| grep -v -e 'Support/MutexAnnotations.swift' -e 'Support/SpinFutexLock.swift' \
		|| { echo "check-layers: use locked, not Mutex.withLock (above)"; exit 1; }

# What a client of the library resolves: swift-log only (a throwaway client in .build-client).
check-client:
	SWIFT="$(SWIFT)" ./scripts/check-client-dependencies.sh

# Every documented Swift snippet, built in one generated package (incremental after the first).
check-snippets: deps
	@./scripts/ensure-python3.sh
	SWIFT="$(SWIFT)" SWIFTFLAGS="$(WERROR) $(SWIFTFLAGS)" python3 scripts/check-snippets.py

# The benchmarks package (Benchmarks/): Lull against Dispatch, SwiftNIO and libevent.
bench: bench-deps
	$(SWIFT) run -c release --package-path Benchmarks $(SWIFTFLAGS) lull-bench $(BENCH_ARGS)

# The DocC catalog rendered by swift-docc-plugin into .build/docs (declared when LULL_DOCC is set).
docs: deps
	LULL_DOCC=1 $(SWIFT) package --allow-writing-to-directory .build/docs \
		generate-documentation --target Lull --output-path .build/docs

clean:
	rm -rf .build .build-tsan .build-asan .build-snippets Examples/.build Tools/.build Benchmarks/.build
