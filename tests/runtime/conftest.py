"""Fixtures for the runtime tests: the fake model program, built once per
session into a temporary directory (plain, and with ASan+UBSan)."""
import os
import subprocess

import pytest

import rt_testlib as lib


@pytest.fixture(scope="session")
def fake(tmp_path_factory):
    """Path of the fake model program linked against the runtime."""
    return lib.build_fake(tmp_path_factory.mktemp("fake"))


SAN_FLAGS = ["-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
             "-fno-omit-frame-pointer"]
# ASan's default exit status (1) would collide with ours: use distinct ones.
SAN_ENV = {"ASAN_OPTIONS": "exitcode=97:detect_leaks=1",
           "UBSAN_OPTIONS": "exitcode=98:halt_on_error=1:print_stacktrace=1"}


@pytest.fixture(scope="session")
def fake_asan(tmp_path_factory):
    """The fake model and runtime sources built with ASan+UBSan, and the env
    to run it with; skips when the sanitizers are not usable here."""
    d = tmp_path_factory.mktemp("fake_asan")
    probe_src = d / "probe.c"
    probe_src.write_text("#include <stdlib.h>\nint main(void){char *p = malloc(4); free(p); return 0;}\n")
    probe = d / "probe"
    r = subprocess.run([lib.CC, *SAN_FLAGS, str(probe_src), "-o", str(probe)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"ASan/UBSan not available: {r.stderr.strip()[:200]}")
    env = dict(SAN_ENV)
    r = subprocess.run([str(probe)], capture_output=True, text=True, env={**os.environ, **env})
    if r.returncode != 0:  # LeakSanitizer does not work under some ptrace setups
        env["ASAN_OPTIONS"] = "exitcode=97:detect_leaks=0"
        r = subprocess.run([str(probe)], capture_output=True, text=True, env={**os.environ, **env})
        if r.returncode != 0:
            pytest.skip(f"ASan binaries do not run here: {r.stderr.strip()[:200]}")
    exe = lib.compile_c(d / "fake", [lib.FAKE_SRC, *lib.RT_SOURCES], SAN_FLAGS)
    return exe, env
