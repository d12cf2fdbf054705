#!/usr/bin/env bash
# Runs a command; if it is still running after a limit, prints where every thread of its
# processes is (gdb's backtraces when gdb is installed, the kernel's state and wait channel
# otherwise) and kills them, exiting 124. A hung test run then fails with a diagnosis
# instead of consuming the rest of CI's time with its output stuck in a pipe buffer.
#
#   scripts/watchdog.sh SECONDS COMMAND [ARGUMENT...]
set -uo pipefail

if [ $# -lt 2 ] || ! [[ $1 =~ ^[0-9]+$ ]]; then
    echo "usage: $0 SECONDS COMMAND [ARGUMENT...]" >&2
    exit 2
fi
limit=$1
shift

# The command's descendants, children first, from the kernel's children lists.
descendants() {
    local pid child
    for pid in "$@"; do
        for child in $(cat /proc/"$pid"/task/*/children 2>/dev/null); do
            echo "$child"
            descendants "$child"
        done
    done
}

report() {
    local pid=$1 task
    echo "--- process $pid: $(tr '\0' ' ' < /proc/"$pid"/cmdline 2>/dev/null | cut -c1-200)"
    if command -v gdb > /dev/null; then
        timeout 120 gdb -p "$pid" -batch -ex "thread apply all bt 30" 2>/dev/null \
            | grep -E '^(Thread|#)' | cut -c1-300
    else
        for task in /proc/"$pid"/task/*; do
            echo "thread ${task##*/} $(cat "$task"/comm 2>/dev/null):" \
                "state $(awk '{print $3}' "$task"/stat 2>/dev/null)," \
                "waiting in $(cat "$task"/wchan 2>/dev/null)"
        done
    fi
}

"$@" &
child=$!
trap 'kill -TERM "$child" 2> /dev/null' INT TERM
deadline=$((SECONDS + limit))
while kill -0 "$child" 2> /dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then
        echo "watchdog: '$*' is still running after $limit s; where its processes are:" >&2
        processes=$(descendants "$child")
        for pid in $processes; do report "$pid" >&2; done
        kill -KILL $processes "$child" 2> /dev/null
        wait "$child"
        exit 124
    fi
    sleep 2
done
wait "$child"
