#!/usr/bin/env bash
# Makes sure python3 is installed, for the layer check (scripts/check-layers.py) that
# `make test` runs. Installs Debian's python3-minimal when missing: as root directly,
# otherwise through sudo; fails with the reason when it cannot.
set -uo pipefail

command -v python3 >/dev/null 2>&1 && exit 0
APT="$(dirname "$0")/apt-get-as-root.sh"
echo "lull: python3 not found; installing python3-minimal (for the layer check of make test)."
if "$APT" install -y -q python3-minimal || { "$APT" update -q && "$APT" install -y -q python3-minimal; }; then
    exit 0
fi
echo "lull: python3 could not be installed (apt-get install python3-minimal); make test needs it for scripts/check-layers.py." >&2
exit 1
