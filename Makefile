# Lull — two commands do everything on a fresh Debian machine:
#   make demo   runs the demo
#   make test   builds with warnings as errors and runs the test suite
# Both install libevent-dev first when pkg-config cannot find it.
# make bench also installs inotify-tools (inotifywait, the peer of fs-tree-watch) if missing.

SWIFT      ?= swift
SWIFTFLAGS ?=
BENCH_ARGS ?=

.PHONY: all deps bench-deps build test test-tsan demo bench clean

all: build

deps:
	@./scripts/ensure-libevent.sh

bench-deps: deps
	@./scripts/ensure-inotify-tools.sh

build: deps
	$(SWIFT) build $(SWIFTFLAGS)

test: deps
	$(SWIFT) build --build-tests $(SWIFTFLAGS)
	$(SWIFT) test --skip-build $(SWIFTFLAGS)
	@$(MAKE) --no-print-directory test-unprivileged

# The priority, signal and limit suites again as nobody (as root; otherwise it says it skips).
test-unprivileged:
	SWIFT="$(SWIFT)" SWIFTFLAGS="$(SWIFTFLAGS)" ./scripts/test-unprivileged.sh

test-tsan: deps
	$(SWIFT) test --sanitize=thread --scratch-path .build-tsan $(SWIFTFLAGS)

demo: deps
	SWIFT="$(SWIFT)" ./scripts/demo.sh

bench: bench-deps
	$(SWIFT) run -c release $(SWIFTFLAGS) lull-bench $(BENCH_ARGS)

clean:
	rm -rf .build .build-tsan
