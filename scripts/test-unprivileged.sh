#!/usr/bin/env bash
# Runs the suites that check priorities, signals and limits again as the unprivileged user
# nobody, the way most users run Lull (no CAP_SYS_NICE, RLIMIT_NICE 0, 1024 descriptors,
# no access to other users' files). Uses the test binary `make test` built.
#
# Needs root to switch users: as any other user it says so and does nothing.
# Environment: SWIFT, SWIFTFLAGS (as in the Makefile), LULL_UNPRIVILEGED_SUITES (a
# --filter regular expression over test ids, to run other suites).
set -euo pipefail
cd "$(dirname "$0")/.."

SUITES="${LULL_UNPRIVILEGED_SUITES:-QoSTests|QoSEnergyTests|QoSOverrideTests|AsyncAfterTests|TargetQueueTests|SignalSourceTests|SignalDispositionTests|ProcessSourceTests|SourceBadInputTests|FileSystemSourceTests|FileSystemWatcherTests|TimerSlackTests|BlockingWorkTests|ThreadCreationFailureTests|StartupFailureTests|SyscallFaultTests}"
USER_ID=65534  # nobody

if [ "$(id -u)" -ne 0 ]; then
    echo "lull: test-unprivileged skipped: it runs the tests as nobody, which needs root (this run is already unprivileged)."
    exit 0
fi

# shellcheck disable=SC2086 # SWIFTFLAGS is a list of flags
BIN="$(${SWIFT:-swift} build --show-bin-path ${SWIFTFLAGS:-})"
BINARY="$BIN/LullPackageTests.xctest"
if [ ! -e "$BINARY" ]; then
    echo "lull: $BINARY is missing: run 'swift build --build-tests' first." >&2
    exit 1
fi

if command -v runuser >/dev/null 2>&1; then
    AS_NOBODY=(runuser -u "$(id -nu "$USER_ID")" --)
else
    AS_NOBODY=(setpriv --reuid="$USER_ID" --regid="$USER_ID" --clear-groups)
fi

# nobody must reach the binary (and the executables next to it that tests start).
if ! "${AS_NOBODY[@]}" test -x "$BINARY"; then
    echo "lull: test-unprivileged skipped: nobody cannot reach $BINARY; put the checkout where every user may read it." >&2
    exit 0
fi

echo "lull: running the priority, signal and limit suites as nobody."
start=$(date +%s)
status=0
# Temporary files go to /tmp, which nobody may write; HOME is nobody's (it has none).
"${AS_NOBODY[@]}" env TMPDIR=/tmp HOME=/tmp \
    "$BINARY" --testing-library swift-testing --filter "$SUITES" || status=$?
echo "lull: the unprivileged run took $(( $(date +%s) - start )) s."
exit "$status"
