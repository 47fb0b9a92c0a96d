"""safetensors: round trips between the C and Python (hand-written) readers and
writers, accepted edge cases, and every malformed-file rejection with its message."""
import json
import struct

import numpy as np
import pytest

import rt_testlib as lib
from rt_testlib import run


@pytest.fixture()
def x_npy(tmp_path):
    p = tmp_path / "x.npy"
    np.save(p, np.ones((2, 4), np.float32))
    return p


def load_and_save(fake, tmp_path, x_npy, st_bytes):
    """Loads a weights file into the fake model and saves it back; returns (result, tensors)."""
    (tmp_path / "w.st").write_bytes(st_bytes)
    r = run(fake, "run", "--weights", tmp_path / "w.st", "--input", x_npy, "--save", tmp_path / "out.st")
    got = lib.st_read(tmp_path / "out.st")[2] if r.returncode == 0 else None
    return r, got


def test_python_writer_c_reader_c_writer_python_reader(fake, tmp_path, x_npy):
    w = lib.random_weights(11)
    r, got = load_and_save(fake, tmp_path, x_npy, lib.st_bytes(w))
    assert r.returncode == 0, r.stderr
    for name, arr in w:
        assert got[name].dtype == arr.dtype and np.array_equal(got[name], arr), name


def test_c_header_layout(fake, tmp_path, x_npy):
    r, _ = load_and_save(fake, tmp_path, x_npy, lib.st_bytes(lib.random_weights()))
    assert r.returncode == 0, r.stderr
    raw = (tmp_path / "out.st").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0 and len(raw) == 8 + n + 48 + 12 + 8
    text = raw[8:8 + n].decode()
    assert text.rstrip(" ") == text.rstrip() and len(text) - len(text.rstrip(" ")) < 8
    header = json.loads(text)
    assert list(header) == ["fc.weight", "fc.bias", "steps"]
    assert header["fc.weight"] == {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]}
    assert header["fc.bias"] == {"dtype": "F32", "shape": [3], "data_offsets": [48, 60]}
    assert header["steps"] == {"dtype": "I64", "shape": [], "data_offsets": [60, 68]}


def test_accepted_variations(fake, tmp_path, x_npy):
    """Valid files that are not what our writer produces still load."""
    w = lib.random_weights(2)
    header, data = lib.st_header(w)
    variants = {
        "unpadded": lib.st_pack(json.dumps(header), data, pad=False),
        "pretty": lib.st_pack(json.dumps(header, indent=2) + "\n\t ", data),
        "metadata": lib.st_pack(json.dumps({"__metadata__": {"a": "b", "nested": [1, -2.5e-3, True, None,
                                                                             {"x": "\\u00e9\u00e9"}]},
                                            **header}), data),
        "escaped_name": lib.st_pack(json.dumps(header).replace('"fc.weight"', '"fc.\\u0077eight"'), data),
        "unknown_field": lib.st_pack(json.dumps({k: {**v, "extra": {"y": [1]}} for k, v in header.items()}),
                                     data),
        "reordered": lib.st_pack(json.dumps(dict(reversed(list(header.items())))), data),
        "unicode_extra": lib.st_pack(json.dumps({**header, "\u00fcber\U0001F600": header["steps"]},
                                                ensure_ascii=False), data),
        "surrogate_pair": lib.st_pack(json.dumps({**header, "\U0001F600": header["steps"]}), data),
    }
    for name, blob in variants.items():
        r, got = load_and_save(fake, tmp_path, x_npy, blob)
        assert r.returncode == 0, (name, r.stderr)
        assert np.array_equal(got["fc.weight"], w[0][1]), name


def tensor_json(dtype="F32", shape=(3, 4), offsets=(0, 48)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


def good_header(**over):
    h = {"fc.weight": tensor_json(), "fc.bias": tensor_json(shape=[3], offsets=[48, 60]),
         "steps": tensor_json("I64", [], [60, 68])}
    h.update(over)
    return h


DATA = bytes(68)


def bad_st_cases():
    H = good_header
    j = json.dumps
    return [
        ("short", b"\x10\x00\x00", "file is too short (3 bytes) to be safetensors"),
        ("empty", b"", "file is too short (0 bytes)"),
        ("hlen_beyond", lib.st_pack(j(H()), DATA, length=10**6), "header length 1000000 is larger than the rest"),
        ("hlen_huge", struct.pack("<Q", 2**64 - 1) + b"{}", "header length 18446744073709551615"),
        ("truncated_header", lib.st_pack(j(H()))[:50], "header length"),
        ("not_json", lib.st_pack("hello world"), "header is not valid JSON at byte 8"),
        ("zero_header", lib.st_pack("", pad=False), "header is not valid JSON"),
        ("array_top", lib.st_pack("[1, 2]"), "expected '{'"),
        ("unterminated", lib.st_pack('{"fc.weight": {"dtype": "F3'), "unterminated string"),
        ("missing_colon", lib.st_pack('{"a" {}}'), "expected ':'"),
        ("trailing_comma", lib.st_pack('{"a": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]},}', bytes(4)),
         "expected a string"),
        ("trailing_garbage", lib.st_pack(j(H()) + " x", DATA), "unexpected characters after the header object"),
        ("two_objects", lib.st_pack(j(H()) + "{}", DATA), "unexpected characters after the header object"),
        ("end_beyond", lib.st_pack(j(H(steps=tensor_json("I64", [], [60, 76]))), DATA),
         "tensor 'steps': data_offsets end 76 is beyond the end of the data (68 bytes)"),
        ("end_before_begin", lib.st_pack(j(H(steps=tensor_json("I64", [], [68, 60]))), DATA),
         "tensor 'steps': data_offsets [68, 60] end before they begin"),
        ("negative_offset", lib.st_pack(j(H(steps=tensor_json("I64", [], [-8, 0]))), DATA),
         "negative data_offsets"),
        ("shape_mismatch", lib.st_pack(j(H(**{"fc.weight": tensor_json(shape=[3, 5])})), DATA),
         "tensor 'fc.weight': data_offsets [0, 48] hold 48 bytes, but f32 [3, 5] needs 60"),
        ("dtype_mismatch", lib.st_pack(j(H(**{"fc.bias": tensor_json("F64", [3], [48, 60])})), DATA),
         "hold 12 bytes, but f64 [3] needs 24"),
        ("no_dtype", lib.st_pack(j(H(steps={"shape": [], "data_offsets": [60, 68]})), DATA),
         "tensor 'steps' has no \"dtype\""),
        ("no_shape", lib.st_pack(j(H(steps={"dtype": "I64", "data_offsets": [60, 68]})), DATA),
         "tensor 'steps' has no \"shape\""),
        ("no_offsets", lib.st_pack(j(H(steps={"dtype": "I64", "shape": []})), DATA),
         "tensor 'steps' has no \"data_offsets\""),
        ("not_object", lib.st_pack(j(H(steps=[1, 2])), DATA), "tensor 'steps': expected an object"),
        ("three_offsets", lib.st_pack(j(H(steps=tensor_json("I64", [], [60, 68, 70]))), DATA),
         "data_offsets must be [begin, end]"),
        ("one_offset", lib.st_pack(j(H(steps=tensor_json("I64", [], [60]))), DATA),
         "data_offsets must be [begin, end]"),
        ("overflow", lib.st_pack(j(H(steps=tensor_json("I64", [2**62, 2**62], [60, 68]))), DATA),
         "shape [4611686018427387904, 4611686018427387904] is too large (size overflows)"),
        ("overflow_bytes", lib.st_pack(j(H(steps=tensor_json("I64", [2**61, 4], [60, 68]))), DATA),
         "is too large (size overflows)"),
        ("int_too_large", lib.st_pack(j(H(steps=tensor_json("I64", [2**63], [60, 68]))), DATA),
         "integer is too large"),
        ("negative_dim", lib.st_pack(j(H(steps=tensor_json("I64", [-1, -8], [60, 68]))), DATA),
         "tensor 'steps' has a negative dimension (-1)"),
        ("too_many_dims", lib.st_pack(j(H(steps=tensor_json("I64", [1] * 9, [60, 68]))), DATA),
         "tensor 'steps' has more than 8 dimensions"),
        ("float_dim", lib.st_pack(j(H()).replace("[3, 4]", "[3.0, 4]"), DATA), "expected an integer"),
        ("leading_zero", lib.st_pack(j(H()).replace("[3, 4]", "[03, 4]"), DATA), "leading zero"),
        ("string_dim", lib.st_pack(j(H()).replace("[3, 4]", '["3", 4]'), DATA), "expected an integer"),
        ("duplicate", lib.st_pack(j(H()).replace('"fc.bias"', '"fc.weight"'), DATA),
         "duplicate tensor name 'fc.weight'"),
        ("duplicate_escaped", lib.st_pack(j(H()).replace('"fc.bias"', '"fc.\\u0077eight"'), DATA),
         "duplicate tensor name 'fc.weight'"),
        ("duplicate_field", lib.st_pack(j(H()).replace('"dtype": "I64"', '"dtype": "I64", "dtype": "I64"'), DATA),
         "tensor 'steps' has two \"dtype\" fields"),
        ("two_metadata", lib.st_pack('{"__metadata__": {}, "__metadata__": {}}'), "two \"__metadata__\""),
        ("metadata_not_object", lib.st_pack('{"__metadata__": "x"}'), "\"__metadata__\" must be an object"),
        ("metadata_deep", lib.st_pack('{"__metadata__": {"a": ' + "[" * 100 + "]" * 100 + "}}"),
         "nested too deeply"),
        ("metadata_very_deep", lib.st_pack('{"__metadata__": {"a": ' + "[" * 200000), "nested too deeply"),
        ("metadata_bad_literal", lib.st_pack('{"__metadata__": {"a": tru}}'), "invalid value"),
        ("metadata_bad_number", lib.st_pack('{"__metadata__": {"a": 1.}}'), "invalid number"),
        ("unsupported_dtype", lib.st_pack(j(H(steps=tensor_json("F8_E4M3", [8], [60, 68]))), DATA),
         "tensor 'steps' has dtype \"F8_E4M3\", which ctc does not support"),
        ("bad_escape", lib.st_pack('{"a\\x": {}}'), "invalid escape in string"),
        ("bad_unicode_escape", lib.st_pack('{"a\\u12g4": {}}'), "invalid \\u escape"),
        ("lone_low_surrogate", lib.st_pack('{"a\\udc00": {}}'), "unpaired surrogate"),
        ("lone_high_surrogate", lib.st_pack('{"a\\ud800x": {}}'), "unpaired surrogate"),
        ("nul_in_name", lib.st_pack('{"a\\u0000b": {}}'), "tensor name 'a\\x00b' contains a NUL byte"),
        ("control_char", lib.st_pack('{"a\nb": {}}'), "control character in string"),
        ("bad_utf8", lib.st_pack(b'{"a\xff": {}}'), "invalid UTF-8"),
        ("overlong_utf8", lib.st_pack(b'{"a\xc0\xafb": {}}'), "invalid UTF-8"),
        ("truncated_utf8", lib.st_pack(b'{"a\xe2\x82'), "invalid UTF-8"),
        ("bool_data", lib.st_pack(j(H(flag=tensor_json("BOOL", [2], [68, 70]))), DATA + b"\x01\x05"),
         "tensor 'flag': BOOL data contains a byte other than 0 or 1"),
    ]


@pytest.mark.parametrize("name,data,msg", bad_st_cases(), ids=[c[0] for c in bad_st_cases()])
def test_malformed_safetensors(fake, tmp_path, x_npy, name, data, msg):
    p = tmp_path / f"{name}.st"
    p.write_bytes(data)
    r = run(fake, "run", "--weights", p, "--input", x_npy, "--output", tmp_path / "y.npy")
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert r.stderr.startswith(f"{fake}: error: {p}: ") and msg in r.stderr, r.stderr
    assert not (tmp_path / "y.npy").exists()
