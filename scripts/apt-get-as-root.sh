#!/usr/bin/env bash
# Runs `apt-get "$@"` as root: directly when root, otherwise through sudo, saying so.
# Exits 3 (with the reason on stderr) when there is no apt-get, 4 when neither root nor
# sudo is available; otherwise with apt-get's status. Used by the ensure-*.sh scripts.
set -uo pipefail

if ! command -v apt-get >/dev/null 2>&1; then
    echo "lull: this machine has no apt-get." >&2
    exit 3
fi

if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
else
    echo "lull: not root and no sudo: cannot run apt-get $*." >&2
    exit 4
fi

export DEBIAN_FRONTEND=noninteractive
echo "lull: running: ${SUDO:+$SUDO }apt-get $*"
$SUDO apt-get "$@"
