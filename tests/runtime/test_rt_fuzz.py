"""Random and mutated safetensors/.npy files (fixed seed): the program must
exit 0, 1 or 2 - never crash - and report every failure on stderr. The same
files also go through a build with ASan+UBSan, which catches out-of-bounds
reads, leaks and undefined behaviour that would not crash the plain build."""
import json
import os
import random
import struct
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import rt_testlib as lib

SEED = 20240601
JSON_CHARS = b'{}[]":,0123456789-+.eE \\u"abcdefFIUBOL_\x00\xff\x80'


def valid_st():
    return lib.st_bytes(lib.random_weights(), metadata={"format": "pt"})


def valid_npy():
    import io
    buf = io.BytesIO()
    np.save(buf, np.arange(8, dtype=np.float32).reshape(2, 4))
    return buf.getvalue()


def mutate(rng, blob, header_end):
    """One to four random edits, biased towards the header."""
    b = bytearray(blob)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        pos = rng.randrange(header_end) if rng.random() < 0.8 else rng.randrange(len(b) or 1)
        if op == 0 and b:                                   # replace a byte
            b[min(pos, len(b) - 1)] = rng.choice(JSON_CHARS)
        elif op == 1 and b:                                 # flip a bit
            b[min(pos, len(b) - 1)] ^= 1 << rng.randrange(8)
        elif op == 2:                                       # insert
            b[pos:pos] = bytes(rng.choice(JSON_CHARS) for _ in range(rng.randint(1, 3)))
        elif op == 3:                                       # delete
            del b[pos:pos + rng.randint(1, 3)]
        elif op == 4:                                       # truncate
            del b[rng.randrange(len(b) + 1):]
        else:                                               # replace a number in the header
            text = bytes(b)
            digits = [i for i in range(min(header_end, len(text))) if 48 <= text[i] <= 57]
            if digits:
                i = rng.choice(digits)
                b[i:i + 1] = str(rng.choice([0, 1, 7, 9, 48, 68, 255, 2**31, 2**32, 2**62, 2**63, 2**64])).encode()
    return bytes(b)


def random_st(rng):
    """Random bytes, sometimes behind a plausible header length."""
    body = bytes(rng.randrange(256) for _ in range(rng.randint(0, 200)))
    kind = rng.randrange(3)
    if kind == 0:
        return body[:rng.randint(0, 16)] if rng.random() < 0.2 else body
    if kind == 1:
        return struct.pack("<Q", len(body)) + body
    text = bytes(rng.choice(JSON_CHARS) for _ in range(rng.randint(0, 80)))
    return struct.pack("<Q", len(text) + rng.choice([0, 0, 1, 8])) + text + body[:16]


def random_npy(rng):
    body = bytes(rng.randrange(256) for _ in range(rng.randint(0, 150)))
    if rng.random() < 0.5:
        return body
    text = bytes(rng.choice(b"{}()[]':,0123456789 <|>fiub TrueFalse_descrshape\n") for _ in range(rng.randint(0, 70)))
    version = rng.choice([1, 2, 3])
    hlen = struct.pack("<H", len(text)) if version == 1 else struct.pack("<I", len(text))
    return b"\x93NUMPY" + bytes([version, 0]) + hlen + text + body[:40]


def make_corpus(tmp_path):
    """[(kind, path, must_fail)]: ~200 random files and ~200 mutated valid files."""
    rng = random.Random(SEED)
    st, npy = valid_st(), valid_npy()
    (st_hlen,) = struct.unpack("<Q", st[:8])
    npy_hlen = 10 + struct.unpack("<H", npy[8:10])[0]
    files = []
    for i in range(200):
        if i % 2:
            files.append(("st", random_st(rng), True))
        else:
            files.append(("npy", random_npy(rng), True))
    for i in range(200):
        if i % 2:
            files.append(("st", mutate(rng, st, 8 + st_hlen), False))
        else:
            files.append(("npy", mutate(rng, npy, npy_hlen), False))
    out = []
    for i, (kind, blob, must_fail) in enumerate(files):
        p = tmp_path / f"f{i:03d}.{kind}"
        p.write_bytes(blob)
        out.append((kind, p, must_fail))
    return out


def check_corpus(exe, tmp_path, env=None):
    x = tmp_path / "x.npy"
    np.save(x, np.ones((2, 4), np.float32))
    corpus = make_corpus(tmp_path)

    def one(item):
        kind, p, must_fail = item
        if kind == "st":
            args = ["run", "--weights", p, "--input", x]
        else:
            args = ["run", "--input", p, "--output", p.with_suffix(".out.npy")]
        r = lib.run(exe, *args, env=env)
        return item, r

    failures = []
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        for (kind, p, must_fail), r in pool.map(one, corpus):
            ok = r.returncode in ((1, 2) if must_fail else (0, 1, 2))
            if r.returncode != 0:
                ok = ok and ": error: " in r.stderr
            ok = ok and "Sanitizer" not in r.stderr and "runtime error" not in r.stderr
            if not ok:
                failures.append(f"{p}: rc={r.returncode}\n{r.stderr[-2000:]}")
    assert not failures, f"{len(failures)} bad results; first:\n" + failures[0]
    return corpus


def test_fuzz_plain(fake, tmp_path):
    check_corpus(fake, tmp_path)


def test_fuzz_asan_ubsan(fake_asan, tmp_path):
    exe, env = fake_asan
    check_corpus(exe, tmp_path, env=env)


@pytest.mark.parametrize("which", ["st", "npy"])
def test_specific_cases_under_asan(fake_asan, tmp_path, which):
    """The hand-made malformed files, plus valid runs, under the sanitizers."""
    exe, env = fake_asan
    x = tmp_path / "x.npy"
    np.save(x, np.ones((2, 4), np.float32))
    if which == "st":
        from test_rt_safetensors import bad_st_cases
        cases = bad_st_cases()
    else:
        from test_rt_npy import bad_npy_cases
        cases = bad_npy_cases()
    for name, data, msg in cases:
        p = tmp_path / f"{name}.{which}"
        p.write_bytes(data)
        args = ["run", "--weights", p, "--input", x] if which == "st" else ["run", "--input", p]
        r = lib.run(exe, *args, env=env)
        assert r.returncode == 1 and msg in r.stderr, (name, r.returncode, r.stderr[-2000:])
    # and a full valid run with every feature
    lib.st_write(tmp_path / "w.st", lib.random_weights())
    r = lib.run(exe, "run", "--weights", tmp_path / "w.st", f"--input=x={x}", "--output", tmp_path / "y.npy",
                "--save", tmp_path / "s.st", "--repeat", "3", "-v", env=env)
    assert r.returncode == 0, r.stderr
    assert lib.run(exe, "info", env=env).returncode == 0
    assert lib.run(exe, "--help", env=env).returncode == 0
    assert lib.run(exe, "run", "nosuch", env=env).returncode == 1
