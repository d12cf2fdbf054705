#!/usr/bin/env bash
# The Lull demo (`make demo`): builds the examples, then runs them one after the other,
# each under a heading — an echo server and its clients, a file watcher restarting a
# command, execution context across queues, QoS classes competing for the CPU, and the
# timers with their wake-ups. No arguments; about 20 s once built.
#
# Environment: SWIFT (default swift), DEMO_CONFIGURATION (default release).
set -euo pipefail
cd "$(dirname "$0")/.."

SWIFT=${SWIFT:-swift}
CONFIGURATION=${DEMO_CONFIGURATION:-release}
# The examples and the tools are packages of their own (Examples/, Tools/), beside the library.
PRODUCTS=(echo-server watch-run activities qos-demo timer-coalescing)

if [ -t 1 ]; then BOLD=$'\033[1m'; DIM=$'\033[2m'; PLAIN=$'\033[0m'; else BOLD=""; DIM=""; PLAIN=""; fi
STEP=0
STEPS=5
heading() {
    STEP=$((STEP + 1))
    printf '\n%s== %d/%d  %s%s\n' "$BOLD" "$STEP" "$STEPS" "$1" "$PLAIN"
    printf '%s%s%s\n\n' "$DIM" "$2" "$PLAIN"
}
say() { printf '%s%s%s\n' "$DIM" "$*" "$PLAIN"; }

WORK=$(mktemp -d /tmp/lull-demo-XXXXXX)
BACKGROUND=()
cleanup() {
    for pid in "${BACKGROUND[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

# Waits (at most 10 s) until FILE has a line containing TEXT.
wait_for() {
    local file=$1 text=$2
    for _ in $(seq 1 100); do
        if grep -qF -- "$text" "$file" 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "demo: gave up waiting for \"$text\" in the output" >&2
    return 1
}

echo "${BOLD}Lull demo${PLAIN}: building ${PRODUCTS[*]} timerfires ($CONFIGURATION; the first build takes a few minutes)"
quiet() { grep -vE '^\[[0-9]+/[0-9]+\]|^Building|^Build of product|^Compiling|^Write|^Planning' || true; }
"$SWIFT" build -c "$CONFIGURATION" --package-path Examples 2>&1 | quiet
"$SWIFT" build -c "$CONFIGURATION" --package-path Tools 2>&1 | quiet
BIN=$("$SWIFT" build -c "$CONFIGURATION" --package-path Examples --show-bin-path)
TOOLS_BIN=$("$SWIFT" build -c "$CONFIGURATION" --package-path Tools --show-bin-path)
STARTED=$SECONDS

# --------------------------------------------------------------------------------------
heading "echo-server: a TCP server on read, write, timer and signal sources" \
    "Examples/echo-server: a serial queue per connection, backpressure, idle timeouts with leeway, SIGINT to stop."
"$BIN/echo-server" --port 0 --idle-timeout 1 > >(tee "$WORK/echo.log") 2>&1 &
SERVER=$!
BACKGROUND+=("$SERVER")
wait_for "$WORK/echo.log" "listening on"
PORT=$(grep -o '127\.0\.0\.1:[0-9]*' "$WORK/echo.log" | head -1 | cut -d: -f2)

exec 3<>"/dev/tcp/127.0.0.1/$PORT"
for line in "hello, Lull" "one serial queue per connection" "bye"; do
    printf '%s\n' "$line" >&3
    IFS= read -r -t 5 answer <&3
    echo "client: sent \"$line\", the server echoed \"$answer\""
done
# 8 MiB in one go, read back while it is written: far more than the server's 64 KiB buffer,
# so the server stops reading whenever the client falls behind, and goes on when it catches up.
head -c 8388608 /dev/zero >&3 &
WRITER=$!
echoed=$(head -c 8388608 <&3 | wc -c)
wait "$WRITER"
echo "client: sent 8 MiB, got $echoed bytes back"
say "(now idle: the server closes the connection after 1 s without data)"
wait_for "$WORK/echo.log" "closed (idle"
exec 3>&-
kill -INT "$SERVER"
wait "$SERVER" || true
wait_for "$WORK/echo.log" "bye"

# --------------------------------------------------------------------------------------
heading "watch-run: run a command, restart it when the tree changes" \
    "Examples/watch-run: Lull's DirectoryTreeWatcher coalesces bursts; a process source sees the command exit."
TREE="$WORK/project"
mkdir -p "$TREE/src"
printf '*.log\n' > "$TREE/.gitignore"
"$BIN/watch-run" --watch "$TREE" --latency 150 \
    -- sh -c "echo \"  [command] building \$(ls '$TREE/src' | wc -l) source file(s)...\"; exec sleep 60" \
    > >(tee "$WORK/watch.log") 2>&1 &
WATCHER=$!
BACKGROUND+=("$WATCHER")
wait_for "$WORK/watch.log" "building 0 source"
say "(writing src/main.c 50 times in a burst: one restart)"
for i in $(seq 1 50); do echo "int x$i;" >> "$TREE/src/main.c"; done
wait_for "$WORK/watch.log" "building 1 source"
say "(writing build.log, which .gitignore ignores: no restart; then creating src/util.c)"
echo "noise" > "$TREE/build.log"
sleep 0.5
echo "int y;" > "$TREE/src/util.c"
wait_for "$WORK/watch.log" "building 2 source"
kill -TERM "$WATCHER"
wait "$WATCHER" || true

# --------------------------------------------------------------------------------------
heading "activities: what each block sees" \
    "Examples/activities: a request's activity and QoS followed across queues, detached work, timer handlers."
"$BIN/activities"

# --------------------------------------------------------------------------------------
heading "qos-demo: QoS classes compete for the CPU" \
    "Examples/qos-demo: the same CPU-bound job at five QoS classes; higher classes finish first."
"$BIN/qos-demo"

# --------------------------------------------------------------------------------------
heading "timers: coalescing and the wake-ups it saves" \
    "Examples/timer-coalescing under the timerfires tool: the same timers with leeway 0 and with leeway."
timers_step() {
    # The one place the timer step plugs in: `timerfires -- <timer-coalescing example>`.
    "$TOOLS_BIN/timerfires" -- "$BIN/timer-coalescing"
}
timers_step

printf '\n%sDemo finished in %d s.%s Examples/*/README.md say more; make test runs the tests.\n' \
    "$BOLD" "$((SECONDS - STARTED))" "$PLAIN"
