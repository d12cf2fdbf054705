#!/usr/bin/env bash
# Makes sure inotifywait (Debian's inotify-tools) is installed, for the fs-tree-watch
# benchmark's peer: `make bench` runs this; `make test` and `make demo` do not need it.
# Installs it when missing: as root directly, otherwise through sudo. Never fails the
# build: without it, lull-bench prints "skipped: install inotify-tools" for that peer.
set -uo pipefail

PACKAGE=inotify-tools
APT="$(dirname "$0")/apt-get-as-root.sh"

if command -v inotifywait >/dev/null 2>&1; then
    exit 0
fi

echo "lull: inotifywait not found; installing $PACKAGE (the peer of the fs-tree-watch benchmark)."
if "$APT" install -y -q "$PACKAGE" || { "$APT" update -q && "$APT" install -y -q "$PACKAGE"; }; then
    echo "lull: $(inotifywait --help 2>&1 | head -1) is ready."
else
    echo "lull: $PACKAGE could not be installed; fs-tree-watch skips its inotifywait peer (apt-get install $PACKAGE)." >&2
fi
exit 0
