#!/usr/bin/env bash
# The test command: installs missing dependencies (apt-get, needs root), builds ctc
# with ninja, and runs the pytest suite with Debian's python3 (PyTorch is the oracle),
# one pytest-xdist worker per core (whole test files per worker, so module fixtures that
# compile a program run once; CTC_TEST_JOBS=N overrides the count, 0 runs serially).
# CTC_TESTS=fast (the default) leaves out the tests marked `slow` (exhaustive checks:
# the fortunes training, sanitizer and fuzzer runs, the largest trajectories);
# CTC_TESTS=all runs everything (what CI runs, .ci/run); CTC_TESTS=slow only those.
set -euo pipefail
cd "$(dirname "$0")"
scripts/install-deps.sh
ninja
case "${CTC_TESTS:-fast}" in
  fast) select=(-m "not slow") ;;
  all) select=() ;;
  slow) select=(-m slow) ;;
  *) echo "run_tests.sh: CTC_TESTS must be fast, all or slow (got '${CTC_TESTS}')" >&2; exit 2 ;;
esac
exec /usr/bin/python3 -m pytest tests -q -n "${CTC_TEST_JOBS:-auto}" --dist loadfile "${select[@]}" "$@"
