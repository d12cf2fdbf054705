#!/usr/bin/env bash
# Makes sure libevent 2.1 (with its pthreads glue) can be found through pkg-config.
# Installs Debian's libevent-dev when it is missing: as root directly, otherwise through sudo.
set -euo pipefail

PACKAGE=libevent-dev
APT="$(dirname "$0")/apt-get-as-root.sh"

have_libevent() {
    command -v pkg-config >/dev/null 2>&1 && pkg-config --exists 'libevent >= 2.1' libevent_pthreads
}

if have_libevent; then
    exit 0
fi

echo "lull: libevent 2.1 not found through pkg-config; installing $PACKAGE (and pkg-config)."
if ! "$APT" update -q || ! "$APT" install -y -q "$PACKAGE" pkg-config; then
    echo "lull: install libevent 2.1 development files as root (Debian/Ubuntu package: $PACKAGE; it must" >&2
    echo "lull: provide pkg-config 'libevent' and 'libevent_pthreads'), then run this command again." >&2
    exit 1
fi

if ! have_libevent; then
    echo "lull: $PACKAGE was installed but pkg-config still cannot find libevent/libevent_pthreads." >&2
    exit 1
fi
echo "lull: libevent $(pkg-config --modversion libevent) is ready."
