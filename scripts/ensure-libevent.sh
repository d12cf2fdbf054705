#!/usr/bin/env bash
# Makes sure libevent 2.1 (with its pthreads glue) can be found through pkg-config.
# Installs Debian's libevent-dev when it is missing: as root directly, otherwise through sudo.
set -euo pipefail

PACKAGE=libevent-dev

have_libevent() {
    command -v pkg-config >/dev/null 2>&1 && pkg-config --exists 'libevent >= 2.1' libevent_pthreads
}

if have_libevent; then
    exit 0
fi

echo "lull: libevent 2.1 not found through pkg-config; installing $PACKAGE (and pkg-config)."
if ! command -v apt-get >/dev/null 2>&1; then
    echo "lull: this machine has no apt-get. Install libevent 2.1 development files" >&2
    echo "lull: (Debian/Ubuntu package: $PACKAGE; it must provide pkg-config 'libevent' and 'libevent_pthreads')," >&2
    echo "lull: then run this command again." >&2
    exit 1
fi

if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
    echo "lull: not root; using sudo for apt-get."
else
    echo "lull: not root and no sudo: install $PACKAGE as root (apt-get install $PACKAGE), then run this again." >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
echo "lull: running: ${SUDO:+$SUDO }apt-get update"
$SUDO apt-get update -q
echo "lull: running: ${SUDO:+$SUDO }apt-get install -y $PACKAGE pkg-config"
$SUDO apt-get install -y -q "$PACKAGE" pkg-config

if ! have_libevent; then
    echo "lull: $PACKAGE was installed but pkg-config still cannot find libevent/libevent_pthreads." >&2
    exit 1
fi
echo "lull: libevent $(pkg-config --modversion libevent) is ready."
