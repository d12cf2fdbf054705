#!/usr/bin/env bash
# Makes sure inotifywait (Debian's inotify-tools) is installed, for the fs-tree-watch
# benchmark's peer: `make bench` runs this; `make test` and `make demo` do not need it.
# Installs it when missing: as root directly, otherwise through sudo. Never fails the
# build: without it, lull-bench prints "skipped: install inotify-tools" for that peer.
set -uo pipefail

PACKAGE=inotify-tools

if command -v inotifywait >/dev/null 2>&1; then
    exit 0
fi

echo "lull: inotifywait not found; installing $PACKAGE (the peer of the fs-tree-watch benchmark)."
if ! command -v apt-get >/dev/null 2>&1; then
    echo "lull: this machine has no apt-get; install $PACKAGE by hand to compare with inotifywait -r." >&2
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
    echo "lull: not root; using sudo for apt-get."
else
    echo "lull: not root and no sudo: install $PACKAGE as root (apt-get install $PACKAGE) to compare with inotifywait -r." >&2
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
echo "lull: running: ${SUDO:+$SUDO }apt-get install -y $PACKAGE"
if ! $SUDO apt-get install -y -q "$PACKAGE"; then
    echo "lull: running: ${SUDO:+$SUDO }apt-get update"
    $SUDO apt-get update -q && $SUDO apt-get install -y -q "$PACKAGE"
fi

if command -v inotifywait >/dev/null 2>&1; then
    echo "lull: $(inotifywait --help 2>&1 | head -1) is ready."
else
    echo "lull: $PACKAGE could not be installed; fs-tree-watch will skip its inotifywait peer." >&2
fi
exit 0
