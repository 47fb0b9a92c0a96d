#!/usr/bin/env bash
# The test command: installs missing dependencies (apt-get, needs root), builds ctc
# with ninja, and runs the whole pytest suite with Debian's python3 (PyTorch is the oracle).
set -euo pipefail
cd "$(dirname "$0")"
scripts/install-deps.sh
ninja
exec /usr/bin/python3 -m pytest tests -q "$@"
