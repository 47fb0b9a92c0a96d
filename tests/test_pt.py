"""PyTorch checkpoints (issue 17 item 1): runtime_min/rt_pt.c reads the files the
installed torch.save writes (the zip archive and the legacy format) through a
restricted unpickler; every generated program's --weights takes ckpt.pt and
ckpt.pt:KEY; `ctc convert` turns .pt into .safetensors and back into a .pt that
torch.load(weights_only=True) reads. PyTorch 1.13 is the oracle. Malformed files
(truncated, bad opcodes, forbidden globals, offsets past the end) are an error
naming the problem, exit 1, never a crash (also under ASan+UBSan)."""
import collections
import io
import os
import pickle
import re
import struct
import subprocess
import zipfile

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, ROOT, compare, ctc_build, load_module, run, st_dtypes, st_read, st_write

GPT = os.path.join(ROOT, "tests", "user_files", "gpt_model.py")
GPT_EXPR = "GPT(GPTConfig(n_layer=2, n_head=2, n_embd=16, vocab_size=32, block_size=8, dropout=0.0))"


def convert(src, dst, status=0):
    r = subprocess.run([CTC, "convert", str(src), "-o", str(dst)], capture_output=True, text=True, timeout=60)
    assert r.returncode == status, f"ctc convert {src}: exit {r.returncode}\n{r.stderr}"
    return r


def as_np(t):
    """A torch tensor as numpy in the dtype ctc reads it as (i8/i16 -> i32; f16 and bf16 kept,
    bf16 as st_read gives it: its float32 values)."""
    if t.dtype == torch.bfloat16:
        t = t.float()
    elif t.dtype in (torch.int8, torch.int16):
        t = t.int()
    return t.contiguous().numpy()


def assert_same(got, want):
    """got: {name: np.ndarray or torch.Tensor} read back; want: {name: torch.Tensor}; exact, in order."""
    assert list(got) == list(want)
    got = {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in got.items()}
    for k, v in want.items():
        w = as_np(v)
        assert got[k].dtype == w.dtype and got[k].shape == w.shape, (k, got[k].dtype, got[k].shape, w.dtype, w.shape)
        assert np.array_equal(got[k], w, equal_nan=True), k


def small_module():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
    m(torch.randn(5, 3))  # running stats and num_batches_tracked (int64) move
    return m


# ---- reading what torch.save writes ---------------------------------------------------------

def test_state_dict_zip_legacy_and_deflated(tmp_path):
    sd = small_module().state_dict()
    torch.save(sd, tmp_path / "zip.pt")
    torch.save(sd, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    # the same archive with its records deflated (torch.load reads it too)
    with zipfile.ZipFile(tmp_path / "zip.pt") as src, \
            zipfile.ZipFile(tmp_path / "deflated.pt", "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info.filename))
    for name in ("zip.pt", "legacy.pt", "deflated.pt"):
        assert_same(torch.load(tmp_path / name), sd)  # (the oracle agrees the files hold sd)
        convert(tmp_path / name, tmp_path / (name + ".safetensors"))
        assert_same(st_read(tmp_path / (name + ".safetensors")), sd)


def test_dtypes_views_and_tied_storages(tmp_path):
    torch.manual_seed(1)
    base = torch.randn(6, 5)
    w = torch.randn(4, 3)
    sd = collections.OrderedDict([
        ("f32", torch.randn(2, 3)), ("f64", torch.randn(3, 2, dtype=torch.float64)),
        ("f16", torch.randn(3, 4).half()), ("bf16", torch.randn(2, 5).bfloat16()),
        ("f16_special", torch.tensor([6.1e-5, 1e-7, -0.0, 65504, float("inf"), float("nan")]).half()),
        ("tied_a", w), ("tied_b", w),                                    # one storage, two names
        ("transposed", base.t()),                                        # strides (1, 5)
        ("slice", base[1:5:2, 1::2]),                                    # storage offset and steps
        ("view_of_f16", torch.randn(4, 6).half()[:, 2:].t()),
        ("expanded", torch.randn(3, 1).expand(3, 4)),                   # stride 0
        ("scalar", torch.tensor(2.5)), ("empty", torch.zeros(0, 3)),
        ("i64", torch.arange(-3, 3)), ("i32", torch.tensor([7, -8], dtype=torch.int32)),
        ("i16", torch.tensor([-300, 2], dtype=torch.int16)), ("i8", torch.tensor([-5, 6], dtype=torch.int8)),
        ("u8", torch.tensor([0, 255], dtype=torch.uint8)), ("bool", torch.tensor([[True, False]])),
    ])
    for legacy in (False, True):
        p = tmp_path / f"d{int(legacy)}.pt"
        torch.save(sd, p, _use_new_zipfile_serialization=not legacy)
        convert(p, tmp_path / "d.safetensors")
        assert_same(st_read(tmp_path / "d.safetensors"), sd)
        # 16-bit floats stay 16-bit, as the checkpoint holds them
        dts = st_dtypes(tmp_path / "d.safetensors")
        assert (dts["f16"], dts["bf16"], dts["view_of_f16"], dts["f32"]) == ("F16", "BF16", "F16", "F32"), dts


def nanogpt_checkpoint(model, iters=1):
    """What nanoGPT's train.py saves: the model's state_dict under 'model' beside the
    optimizer's state, the config and the counters."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    idx = torch.randint(0, 32, (2, 8), generator=torch.Generator().manual_seed(0))
    for _ in range(iters):
        opt.zero_grad()
        model(idx).square().mean().backward()
        opt.step()
    model_args = dict(n_layer=2, n_head=2, n_embd=16, block_size=8, bias=True, vocab_size=32, dropout=0.0)
    return {"model": model.state_dict(), "optimizer": opt.state_dict(), "model_args": model_args,
            "iter_num": 5, "best_val_loss": torch.tensor(2.25),
            "config": {"out_dir": "out", "learning_rate": 1e-3, "compile": False, "init_from": "scratch",
                       "wandb_log": False, "beta2": 0.95, "max_iters": 5000, "gradient_accumulation_steps": 40,
                       "big": 2 ** 40, "neg": -7, "none": None, "betas": (0.9, 0.95), "ids": [1, 2, 3]}}


def gpt_model():
    mod = load_module(GPT, "gpt_model_pt")
    torch.manual_seed(0)
    return mod, eval(GPT_EXPR, vars(mod))


def test_nested_checkpoint_keys(tmp_path):
    _, model = gpt_model()
    ck = nanogpt_checkpoint(model)
    p = tmp_path / "ckpt.pt"
    torch.save(ck, p)
    for spec in (p, f"{p}:model"):
        convert(spec, tmp_path / "w.safetensors")
        assert_same(st_read(tmp_path / "w.safetensors"), ck["model"])
    r = convert(f"{p}:optimizer", tmp_path / "x.safetensors", status=1)
    assert "'optimizer' in the checkpoint is a dict with no tensor values (not a state_dict)" in r.stderr
    r = convert(f"{p}:iter_num", tmp_path / "x.safetensors", status=1)
    assert "'iter_num' in the checkpoint is an int, not a dict of tensors" in r.stderr
    r = convert(f"{p}:nope", tmp_path / "x.safetensors", status=1)
    assert ("the checkpoint has no key 'nope' (its keys: 'model', 'optimizer', 'model_args', 'iter_num', "
            "'best_val_loss', 'config')") in r.stderr
    assert not (tmp_path / "x.safetensors").exists()
    # two dicts of tensors: a key must choose (a program chooses by its names)
    torch.save({"model": ck["model"], "ema": {"a": torch.ones(2)}}, tmp_path / "two.pt")
    r = convert(tmp_path / "two.pt", tmp_path / "x.safetensors", status=1)
    assert "the checkpoint holds several dicts of tensors ('model', 'ema'): name one as FILE:KEY" in r.stderr
    convert(f"{tmp_path / 'two.pt'}:ema", tmp_path / "ema.safetensors")
    assert_same(st_read(tmp_path / "ema.safetensors"), {"a": torch.ones(2)})


def test_safetensors_to_pt_and_back(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {"w": rng.standard_normal((3, 4)).astype(np.float32), "d": rng.standard_normal(5),
              "steps": np.array(7, np.int64), "ids": np.array([-1, 2**31 - 1], np.int32),
              "mask": np.array([[True], [False]]), "px": np.arange(6, dtype=np.uint8).reshape(2, 3),
              "empty": np.zeros((0, 2), np.float32), "big": np.array([2**40, -2**35], np.int64),
              "nan": np.array([np.nan, -np.inf], np.float32), "ünï.cödé": np.ones(1, np.float32)}
    st_write(tmp_path / "a.safetensors", arrays)
    convert(tmp_path / "a.safetensors", tmp_path / "a.pt")
    sd = torch.load(tmp_path / "a.pt", weights_only=True)
    assert type(sd) is collections.OrderedDict and list(sd) == list(arrays)
    for k, a in arrays.items():
        t = sd[k]
        assert t.is_contiguous() and t.storage_offset() == 0 and t.numpy().dtype == a.dtype and t.shape == a.shape, k
        assert np.array_equal(t.numpy(), a, equal_nan=True), k
    with zipfile.ZipFile(tmp_path / "a.pt") as z:
        assert z.testzip() is None  # every CRC right
        assert z.read("archive/version") == b"3\n"
    # .pt -> .safetensors -> the same values; .pt -> .pt (a state_dict re-saved by torch)
    convert(tmp_path / "a.pt", tmp_path / "b.safetensors")
    got = st_read(tmp_path / "b.safetensors")
    assert list(got) == list(arrays) and all(np.array_equal(got[k], a, equal_nan=True) for k, a in arrays.items())
    _, model = gpt_model()
    torch.save(model.state_dict(), tmp_path / "m.pt")
    convert(tmp_path / "m.pt", tmp_path / "m2.pt")
    back = torch.load(tmp_path / "m2.pt", weights_only=True)
    assert_same({k: v.numpy() for k, v in back.items()}, model.state_dict())
    r = convert(tmp_path / "m.pt", tmp_path / "m.npz", status=1)
    assert "cannot tell the output format from" in r.stderr


# ---- a generated program with --weights ckpt.pt ----------------------------------------------

@pytest.fixture(scope="module")
def gpt_exe(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpt")
    exe = str(d / "gpt")
    ctc_build(GPT, exe, "--model", GPT_EXPR, "--input", "idx=i64[2,8]")
    return exe


def infer(exe, tmp_path, weights, idx, status=0):
    np.save(tmp_path / "idx.npy", idx)
    r = subprocess.run([exe, "infer", "--weights", str(weights), "--input", str(tmp_path / "idx.npy"), "--output",
                        str(tmp_path / "out.npy")], capture_output=True, text=True, timeout=60)
    assert r.returncode == status, r.stderr
    return np.load(tmp_path / "out.npy") if status == 0 else r


def test_program_runs_nanogpt_checkpoint(gpt_exe, tmp_path):
    """The checkpoint of a nanoGPT-shaped loop (tied wte/lm_head: one storage under two
    names) loads into the program by name, nested or by key, and gives PyTorch's logits."""
    mod, model = gpt_model()
    ck = nanogpt_checkpoint(model, iters=2)
    model.eval()
    idx = np.random.default_rng(5).integers(0, 32, size=(2, 8)).astype(np.int64)
    with torch.no_grad():
        want = model(torch.from_numpy(idx)).numpy()
    p = tmp_path / "ckpt.pt"
    torch.save(ck, p)
    for spec in (p, f"{p}:model"):
        compare(str(spec), infer(gpt_exe, tmp_path, spec, idx), want, rtol=1e-5, atol=1e-5)
    # the legacy format, and names from a torch.compile'd model ('_orig_mod.' prefix)
    torch.save({"model": {"_orig_mod." + k: v for k, v in ck["model"].items()}, "iter_num": 5},
               tmp_path / "compiled.pt", _use_new_zipfile_serialization=False)
    compare("compiled.pt", infer(gpt_exe, tmp_path, tmp_path / "compiled.pt", idx), want, rtol=1e-5, atol=1e-5)
    # run ENTRY, bench and --save take the same weights; --save writes safetensors
    r = run([gpt_exe, "run", "forward", "--weights", f"{p}:model", "--input", tmp_path / "idx.npy",
             "--save", tmp_path / "saved.safetensors"])
    saved = st_read(tmp_path / "saved.safetensors")
    assert np.array_equal(saved["transformer.wte.weight"], ck["model"]["lm_head.weight"].numpy())
    r = run([gpt_exe, "bench", "--weights", p, "--iters", "1", "--warmup", "0"])
    assert "ms" in r.stdout + r.stderr


def test_program_converts_half_precision(gpt_exe, tmp_path):
    """float16, bfloat16 and float64 checkpoints load into the f32 program (converted)."""
    mod, model = gpt_model()
    model.eval()
    idx = np.random.default_rng(6).integers(0, 32, size=(2, 8)).astype(np.int64)
    for dt in (torch.float16, torch.bfloat16, torch.float64):
        sd = {k: v.to(dt) for k, v in model.state_dict().items()}
        torch.save(sd, tmp_path / "h.pt")
        ref = eval(GPT_EXPR, vars(mod))
        ref.load_state_dict({k: v.float() for k, v in sd.items()})
        ref.eval()
        with torch.no_grad():
            want = ref(torch.from_numpy(idx)).numpy()
        compare(str(dt), infer(gpt_exe, tmp_path, tmp_path / "h.pt", idx), want, rtol=1e-5, atol=1e-5)


def test_program_reports_checkpoint_errors(gpt_exe, tmp_path):
    idx = np.zeros((2, 8), np.int64)
    torch.save({"model": {"fc.weight": torch.ones(2)}, "iter_num": 1}, tmp_path / "other.pt")
    r = infer(gpt_exe, tmp_path, tmp_path / "other.pt", idx, status=1)
    assert re.search(r"error: .*other\.pt: tensor 'transformer\.wte\.weight' is missing", r.stderr), r.stderr
    _, model = gpt_model()
    sd = model.state_dict()
    sd["transformer.wpe.weight"] = torch.zeros(9, 16)
    torch.save(sd, tmp_path / "shape.pt")
    r = infer(gpt_exe, tmp_path, tmp_path / "shape.pt", idx, status=1)
    assert "tensor 'transformer.wpe.weight' has shape [9, 16], expected [8, 16]" in r.stderr
    path, _ = MALFORMED["forbidden_os_system"](tmp_path)
    r = infer(gpt_exe, tmp_path, path, idx, status=1)
    assert "the pickle names the global 'posix.system', which ctc does not allow" in r.stderr
    path, _ = MALFORMED["truncated_half"](tmp_path)
    r = infer(gpt_exe, tmp_path, path, idx, status=1)
    assert "the zip archive is truncated" in r.stderr
    r = infer(gpt_exe, tmp_path, f"{tmp_path / 'idx.npy'}:model", idx, status=1)
    assert "':model' names a key of a PyTorch checkpoint, but this is not one" in r.stderr


# ---- malformed files -------------------------------------------------------------------------

class Storage:
    """A storage as torch.save's persistent_id names it."""

    def __init__(self, key, numel, typ=torch.FloatStorage):
        self.key, self.numel, self.typ = key, numel, typ


class Tensor:
    def __init__(self, storage, offset, size, stride):
        self.args = (storage, offset, tuple(size), tuple(stride))

    def __reduce__(self):
        return torch._utils._rebuild_tensor_v2, (*self.args, False, collections.OrderedDict())


class Evil:
    def __init__(self, fn, arg):
        self.fn, self.arg = fn, arg

    def __reduce__(self):
        return self.fn, (self.arg,)


def pickle_bytes(obj):
    f = io.BytesIO()
    p = pickle.Pickler(f, protocol=2)
    p.persistent_id = lambda o: ("storage", o.typ, o.key, "cpu", o.numel) if isinstance(o, Storage) else None
    p.dump(obj)
    return f.getvalue()


def write_zip(path, pkl, records):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pkl)
        for k, b in records.items():
            z.writestr(f"archive/data/{k}", b)
        z.writestr("archive/version", "3\n")
    return path


def crafted(tmp_path, obj, records=None, name="c.pt"):
    data = np.arange(12, dtype=np.float32).tobytes()
    return write_zip(tmp_path / name, pickle_bytes(obj), {"0": data} if records is None else records)


def ok_obj():
    return collections.OrderedDict(w=Tensor(Storage("0", 12), 2, (2, 3), (1, 2)))


def truncated(tmp_path, cut, legacy=False):
    p = tmp_path / "full.pt"
    torch.save(small_module().state_dict(), p, _use_new_zipfile_serialization=not legacy)
    b = p.read_bytes()
    (tmp_path / "t.pt").write_bytes(b[:cut(len(b))])
    return tmp_path / "t.pt"


def replace_in_zip(tmp_path, find, repl):
    p = tmp_path / "full.pt"
    torch.save(small_module().state_dict(), p)
    b = p.read_bytes()
    assert b.count(find) == 1
    (tmp_path / "r.pt").write_bytes(b.replace(find, repl))
    return tmp_path / "r.pt"


def cd_offset_past_end(tmp_path):
    p = tmp_path / "full.pt"
    torch.save(small_module().state_dict(), p)
    b = bytearray(p.read_bytes())
    z = b.rfind(b"PK\x06\x06")  # the ZIP64 end of central directory record: its cd offset at +48
    b[z + 48:z + 56] = struct.pack("<Q", len(b) + 1000)
    (tmp_path / "cd.pt").write_bytes(bytes(b))
    return tmp_path / "cd.pt"


def flip_storage_byte(tmp_path):
    p = tmp_path / "full.pt"
    torch.save({"w": torch.arange(8.0)}, p)
    b = bytearray(p.read_bytes())
    i = bytes(b).find(np.arange(8, dtype=np.float32).tobytes())
    b[i + 5] ^= 0x40
    (tmp_path / "crc.pt").write_bytes(bytes(b))
    return tmp_path / "crc.pt"


# name -> (tmp_path -> (path, the message expected))
MALFORMED = {
    "truncated_half": lambda t: (truncated(t, lambda n: n // 2),
                                 "the zip archive is truncated or damaged (no end of central directory record)"),
    "truncated_tail": lambda t: (truncated(t, lambda n: n - 1), "the zip archive is truncated or damaged"),
    "truncated_head": lambda t: (truncated(t, lambda n: 30), "the zip archive is truncated or damaged"),
    "truncated_legacy": lambda t: (truncated(t, lambda n: n - 3, legacy=True),
                                   "the checkpoint is truncated: storage"),
    "truncated_legacy_pickle": lambda t: (truncated(t, lambda n: 200, legacy=True), "is truncated"),
    "cd_past_end": lambda t: (cd_offset_past_end(t), "its central directory lies past the end of the file"),
    "crc": lambda t: (flip_storage_byte(t), "record 'full/data/0' fails its CRC check"),
    "not_an_opcode": lambda t: (write_zip(t / "op.pt", b"\x80\x02}q\x00(X\x01\x00\x00\x00a\xffu.", {}),
                                "data.pkl: byte 12 holds 0xff, which is not a pickle opcode"),
    "protocol0_opcode": lambda t: (write_zip(t / "p0.pt", pickle.dumps({"a": 1.5}, protocol=0), {}),
                                   "data.pkl: the pickle opcode PUT (0x70) at byte 2 is not allowed"),
    "bytes_opcode": lambda t: (write_zip(t / "by.pt", pickle.dumps({"a": b"xy"}, protocol=3), {}),
                               "the pickle opcode SHORT_BINBYTES (0x43)"),
    "unset_memo": lambda t: (write_zip(t / "memo.pt", b"\x80\x02h\x05.", {}),
                             "data.pkl: BINGET at byte 2 reads memo key 5, which was never set"),
    "no_stop": lambda t: (write_zip(t / "stop.pt", pickle_bytes(ok_obj())[:-1], {"0": bytes(48)}),
                          "data.pkl is truncated (no STOP opcode)"),
    "forbidden_os_system": lambda t: (crafted(t, {"w": Evil(os.system, "touch " + str(t / "PWNED"))}),
                                      "the pickle names the global 'posix.system', which ctc does not allow"),
    "forbidden_eval": lambda t: (crafted(t, {"w": Evil(eval, "open('PWNED', 'w')")}),
                                 "the pickle names the global '__builtin__.eval', which ctc does not allow"),
    "whole_module": lambda t: (torch.save(torch.nn.Linear(2, 2), t / "mod.pt") or t / "mod.pt",
                               "the global 'torch.nn.modules.linear.Linear', which ctc does not allow"),
    "offset_past_end": lambda t: (crafted(t, {"w": Tensor(Storage("0", 12), 9, (4,), (1,))}),
                                  "data.pkl: a tensor of shape [4] at storage offset 9 reads past the end of "
                                  "storage '0' (12 float32 values)"),
    "strides_past_end": lambda t: (crafted(t, {"w": Tensor(Storage("0", 12), 0, (3, 4), (5, 1))}),
                                   "a tensor of shape [3, 4] at storage offset 0 reads past the end of storage '0'"),
    "record_too_short": lambda t: (crafted(t, {"w": Tensor(Storage("0", 16), 0, (16,), (1,))}),
                                   "record 'archive/data/0' holds 48 bytes, but storage '0' has 16 float32 values "
                                   "(64 bytes)"),
    "missing_record": lambda t: (crafted(t, {"w": Tensor(Storage("3", 12), 0, (12,), (1,))}),
                                 "the archive has no record 'archive/data/3' for storage '3'"),
    "negative_stride": lambda t: (crafted(t, {"w": Tensor(Storage("0", 12), 11, (2,), (-1,))}),
                                  "a tensor of shape [2] has a negative size or stride"),
    "not_a_dict": lambda t: (crafted(t, [Tensor(Storage("0", 12), 0, (12,), (1,))]),
                             "the checkpoint holds a list, not a dict of tensors (a state_dict)"),
    "no_tensors": lambda t: (crafted(t, {"iter_num": 5, "cfg": {"lr": 0.1}}),
                             "the checkpoint holds no dict of tensors, at the top level or under a key "
                             "(its keys: 'iter_num', 'cfg')"),
    "not_a_checkpoint": lambda t: ((t / "x.pt").write_bytes(b"\x80\x02hello") and t / "x.pt",
                                   "x.pt: neither a PyTorch checkpoint (torch.save) nor a safetensors file: file is "
                                   "too short (7 bytes) to be safetensors"),
}


def test_crafted_file_is_valid(tmp_path):
    """The base the malformed cases change: crafted by hand, read by torch and by ctc alike."""
    p = crafted(tmp_path, ok_obj())
    want = torch.load(p)
    assert want["w"].tolist() == [[2, 4, 6], [3, 5, 7]]
    convert(p, tmp_path / "ok.safetensors")
    assert_same(st_read(tmp_path / "ok.safetensors"), want)


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed(tmp_path, case):
    path, want = MALFORMED[case](tmp_path)
    r = convert(path, tmp_path / "out.safetensors", status=1)
    assert want in r.stderr, r.stderr
    assert r.stderr.startswith("ctc: error: convert: ") and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "out.safetensors").exists()
    assert not (tmp_path / "PWNED").exists() and not os.path.exists("PWNED")


def test_malformed_under_asan(tmp_path):
    """The sanitized ctc (ASan+UBSan, as test_fuzz_backend builds it) reads every malformed
    case, a nested checkpoint and a round trip without a report."""
    from test_fuzz_backend import build_asan
    from test_sanitizers import ENV, clean
    asan_ctc = build_asan()
    ok = tmp_path / "ok"
    ok.mkdir()
    _, model = gpt_model()
    torch.save(nanogpt_checkpoint(model), ok / "ckpt.pt")
    torch.save(small_module().state_dict(), ok / "legacy.pt", _use_new_zipfile_serialization=False)
    for name in ("ckpt.pt", "legacy.pt"):
        for out in ("w.safetensors", "w.pt"):
            r = subprocess.run([asan_ctc, "convert", ok / name, "-o", ok / out], capture_output=True, text=True,
                               env=ENV, timeout=120)
            clean(r, f"{name} -> {out}")
            assert r.returncode == 0, r.stderr
    for case in sorted(MALFORMED):
        d = tmp_path / case
        d.mkdir()
        path, want = MALFORMED[case](d)
        r = subprocess.run([asan_ctc, "convert", path, "-o", d / "out.safetensors"], capture_output=True, text=True,
                           env=ENV, timeout=120)
        clean(r, case)
        assert r.returncode == 1 and want in r.stderr, (case, r.stderr)
