#!/usr/bin/env bash
# The test command: installs missing dependencies (apt-get, needs root), builds ctc
# with ninja, and runs the whole pytest suite with Debian's python3 (PyTorch is the oracle),
# one pytest-xdist worker per core (whole test files per worker, so module fixtures that
# compile a program run once; CTC_TEST_JOBS=N overrides the count, 0 runs serially).
set -euo pipefail
cd "$(dirname "$0")"
scripts/install-deps.sh
ninja
exec /usr/bin/python3 -m pytest tests -q -n "${CTC_TEST_JOBS:-auto}" --dist loadfile "$@"
