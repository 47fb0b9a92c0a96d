""".npy reading and writing through the driver: numpy-written files of every
supported dtype and version, C-written files read by numpy, and rejections."""
import struct

import numpy as np
import pytest

from rt_testlib import run


def npy_raw(header, data=b"", version=(1, 0), length=None):
    """A .npy file from a header dict text (no padding added unless given)."""
    h = header.encode("latin1")
    n = len(h) if length is None else length
    if version[0] == 1:
        pre = b"\x93NUMPY" + bytes(version) + struct.pack("<H", n)
    else:
        pre = b"\x93NUMPY" + bytes(version) + struct.pack("<I", n)
    return pre + h + data


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_numpy_versions(fake, tmp_path, version):
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    with open(tmp_path / "x.npy", "wb") as f:
        np.lib.format.write_array(f, x, version=version)
    r = run(fake, "run", "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npy")
    assert r.returncode == 0, r.stderr
    from rt_testlib import INIT_B, INIT_W
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), x @ INIT_W.T + INIT_B, rtol=1e-6, atol=1e-6)


def test_every_dtype_roundtrips(fake, tmp_path):
    """mix passes each dtype through: numpy writes, C reads, C writes, numpy reads."""
    a = np.array([False, True, True, False])
    u = np.array([0, 7, 255, 1], np.uint8)
    d = np.array([np.pi, -1e300])
    n = np.array([-(2**31), 0, 2**31 - 1], np.int32)
    m = np.array([2**62, -(2**62)], np.int64)
    for k, v in zip("audnm", (a, u, d, n, m)):
        np.save(tmp_path / f"{k}.npy", v)
    # '<u1' is accepted for uint8 as well as '|u1'
    raw = (tmp_path / "u.npy").read_bytes().replace(b"'|u1'", b"'<u1'")
    (tmp_path / "u.npy").write_bytes(raw)
    outs = [x for k in "oekqz" for x in ("--output", tmp_path / f"{k}.out.npy")]
    r = run(fake, "run", "mix", *[x for k in "audnm" for x in ("--input", tmp_path / f"{k}.npy")], *outs)
    assert r.returncode == 0, r.stderr
    want = {"o": (a + u).astype(np.uint8), "e": 2 * d, "k": 2 * n.astype(np.int64),
            "q": (m + 1).astype(np.int32), "z": ~a}
    for k, w in want.items():
        p = tmp_path / f"{k}.out.npy"
        got = np.load(p)
        assert got.dtype == w.dtype and got.shape == w.shape and np.array_equal(got, w), k
        raw = p.read_bytes()
        assert raw[:8] == b"\x93NUMPY\x01\x00"
        (hl,) = struct.unpack("<H", raw[8:10])
        assert (10 + hl) % 64 == 0 and raw[10 + hl - 1:10 + hl] == b"\n"
        header = raw[10:10 + hl].decode()
        assert header.startswith("{'descr': '") and "'fortran_order': False" in header
        assert f"'shape': {w.shape}" in header


def test_scalar_and_2d_headers(fake, tmp_path):
    """0-d and n-d shapes as numpy writes them: '()' and '(2, 3)'."""
    np.save(tmp_path / "delta.npy", np.zeros(3, np.float32))
    np.save(tmp_path / "scale.npy", np.float32(2.0))
    r = run(fake, "run", "bump", "--input", tmp_path / "delta.npy", "--input", tmp_path / "scale.npy")
    assert r.returncode == 0, r.stderr
    np.save(tmp_path / "x.npy", np.zeros((2, 4), np.float32))
    assert run(fake, "run", "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npy").returncode == 0
    assert b"'shape': (2, 3), }" in (tmp_path / "y.npy").read_bytes()


def bad_npy_cases():
    f4 = np.zeros((2, 4), np.float32).tobytes()
    return [
        ("fortran", npy_raw("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 4), }\n", f4),
         "Fortran-order arrays are not supported"),
        ("bigendian", npy_raw("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 4), }\n", f4),
         "big-endian data (descr '>f4') is not supported"),
        ("f16", npy_raw("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 4), }\n", f4[:16]),
         "unsupported dtype (descr '<f2')"),
        ("object", npy_raw("{'descr': '|O', 'fortran_order': False, 'shape': (2, 4), }\n", f4),
         "unsupported dtype (descr '|O')"),
        ("structured", npy_raw("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2, 4), }\n", f4),
         "structured dtypes are not supported"),
        ("truncated", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }\n", f4[:-1]),
         "file is truncated: f32 [2, 4] needs 32 bytes of data, found 31"),
        ("trailing", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }\n", f4 + b"xx"),
         "2 unexpected bytes after the data"),
        ("magic", b"\x93NUMPX\x01\x00" + b"\x00" * 40, "not a .npy file"),
        ("short", b"\x93NUM", "not a .npy file"),
        ("version", npy_raw("{}", version=(4, 0)), "unsupported .npy version 4.0"),
        ("hlen", npy_raw("{'descr': '<f4'}", length=1000), "header length 1000 is larger than the rest"),
        ("hlen2", npy_raw("{'descr': '<f4'}", version=(2, 0), length=2**32 - 1), "header length 4294967295"),
        ("nokey", npy_raw("{'descr': '<f4', 'fortran_order': False, }\n"), "lacks 'shape'"),
        ("extrakey", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), 'x': 1}\n", f4),
         "unexpected or repeated key 'x'"),
        ("dupkey", npy_raw("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 4)}\n", f4),
         "unexpected or repeated key 'descr'"),
        ("notuple", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (8), }\n", f4),
         "the shape must be a tuple like (3,)"),
        ("list", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': [2, 4], }\n", f4),
         "the shape must be a tuple"),
        ("negative", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 4), }\n", f4),
         "negative dimension"),
        ("ndim", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,8), }\n", f4),
         "more than 8 dimensions"),
        ("overflow", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }\n",
                             f4), "is too large (size overflows)"),
        ("hugeint", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }\n"),
         "integer is too large"),
        ("unterminated", npy_raw("{'descr': '<f4"), "unterminated string"),
        ("garbage", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), } junk\n", f4),
         "unexpected characters after the dict"),
        ("bool", npy_raw("{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }\n", b"\x01\x02"),
         "bool data contains a byte other than 0 or 1"),
        ("empty", b"", "not a .npy file"),
    ]


@pytest.mark.parametrize("name,data,msg", bad_npy_cases(), ids=[c[0] for c in bad_npy_cases()])
def test_bad_npy_rejected(fake, tmp_path, name, data, msg):
    p = tmp_path / f"{name}.npy"
    p.write_bytes(data)
    r = run(fake, "run", "--input", p)
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith(f"{fake}: error: {p}: ") and msg in r.stderr, r.stderr


def test_numpy_fortran_and_bigendian_files(fake, tmp_path):
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.save(tmp_path / "f.npy", np.asfortranarray(x))
    np.save(tmp_path / "b.npy", x.astype(">f4"))
    r = run(fake, "run", "--input", tmp_path / "f.npy")
    assert r.returncode == 1 and "Fortran-order" in r.stderr
    r = run(fake, "run", "--input", tmp_path / "b.npy")
    assert r.returncode == 1 and "big-endian" in r.stderr
