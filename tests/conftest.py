"""pytest configuration: builds ctc once per session; registers the `slow` marker
(exhaustive checks that CI still runs)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ctc_testlib  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: exhaustive checks (still run in CI)")


@pytest.fixture(scope="session", autouse=True)
def ctc_built():
    ctc_testlib.build_ctc()
    return ctc_testlib.CTC
