"""`./net bench` of the driver (rt_driver.c, cmd_bench) on the fake models: the
output line, the random-input rules and the exit codes. Never asserts on time."""
import re

import rt_testlib as lib
from rt_testlib import run

LINE = re.compile(r"^bench (\w+): median (\d+\.\d{4}) ms, min (\d+\.\d{4}) ms per call "
                  r"\((\d+) calls? after (\d+) warm-up\), peak RSS (\d+\.\d) MiB$")


def parse(stdout):
    lines = stdout.splitlines()
    assert len(lines) == 1, stdout
    m = LINE.match(lines[0])
    assert m, lines[0]
    entry, med, mn, iters, warm, rss = m.groups()
    return entry, float(med), float(mn), int(iters), int(warm), float(rss)


def test_default_entry_and_line_format(fake):
    r = run(fake, "bench")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    entry, med, mn, iters, warm, rss = parse(r.stdout)
    assert (entry, iters, warm) == ("forward", 20, 3)
    assert 0 <= mn <= med
    assert rss > 0.5  # ru_maxrss of a running process: at least the libc pages


def test_named_entry_iters_warmup_and_every_dtype(fake):
    # mix takes bool, u8, f64, i32 and i64 inputs
    r = run(fake, "bench", "mix", "--iters", "7", "--warmup=0", "--seed", "5", "--int-max", "200")
    assert r.returncode == 0, r.stderr
    entry, _, _, iters, warm, _ = parse(r.stdout)
    assert (entry, iters, warm) == ("mix", 7, 0)
    assert "(7 calls after 0 warm-up)" in r.stdout
    r = run(fake, "bench", "mix", "--iters", "1")
    assert r.returncode == 0 and "(1 call after 3 warm-up)" in r.stdout


def test_training_entry_labels_are_valid_by_default(fake):
    """The fake train_step fails on a label outside 0..2: the default integer range
    [0, 2) is valid for it; [0, 1000) is not (with seed 0 some of the 4 labels are >= 3)."""
    env = {"FAKE_MODEL": "train"}
    r = run(fake, "bench", "train_step", "--iters", "50", env=env)
    assert r.returncode == 0, r.stderr
    assert parse(r.stdout)[0] == "train_step"
    r = run(fake, "bench", "train_step", "--int-max", "3", env=env)
    assert r.returncode == 0, r.stderr
    r = run(fake, "bench", "train_step", "--int-max", "1000", env=env)
    assert r.returncode == 1 and r.stdout == ""
    assert "entry 'train_step' failed at call 1" in r.stderr


def test_weights(fake, tmp_path):
    lib.st_write(tmp_path / "w.st", lib.random_weights())
    r = run(fake, "bench", "--weights", tmp_path / "w.st", "--iters", "2")
    assert r.returncode == 0, r.stderr
    lib.st_write(tmp_path / "bad.st", [("fc.weight", lib.random_weights()[0][1][:2])])
    r = run(fake, "bench", "--weights", tmp_path / "bad.st")
    assert r.returncode == 1 and "fc.weight" in r.stderr
    r = run(fake, "bench", "--weights", tmp_path / "missing.st")
    assert r.returncode == 2 and "missing.st" in r.stderr


def test_errors_and_help(fake):
    r = run(fake, "bench", "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: ") and "--int-max" in r.stdout
    assert "bench [ENTRY]" in run(fake, "--help").stdout
    cases = [
        (["nope"], "unknown entry 'nope' (entries: forward, bump, mix, fail)"),
        (["forward", "mix"], "unexpected argument 'mix'"),
        (["--iters", "0"], "--iters needs an integer from 1 to"),
        (["--iters", "1", "--iters", "0"], "--iters needs an integer from 1 to"),
        (["--iters", "x"], "--iters needs an integer"),
        (["--warmup", "-1"], "--warmup needs an integer from 0 to"),
        (["--int-max", "0"], "--int-max needs an integer from 1 to"),
        (["--seed"], "option --seed needs a value"),
        (["--repeat", "3"], "unknown option '--repeat'"),
        (["--weights", "a", "--weights", "b"], "option --weights given twice"),
        (["mix", "--int-max", "256"], ""),  # u8 holds 0..255: fine
        (["mix", "--int-max", "257"], "--int-max 257: input 'u' is u8, whose values stop at 255"),
    ]
    for args, msg in cases:
        r = run(fake, "bench", "--iters", "1", *args)
        if not msg:
            assert r.returncode == 0, (args, r.stderr)
            continue
        assert r.returncode == 1, (args, r.stderr)
        assert msg in r.stderr, (args, r.stderr)
        assert r.stdout == ""
    r = run(fake, "bench", "fail")
    assert r.returncode == 1 and "entry 'fail' failed at call 1" in r.stderr


def test_bench_under_asan(fake_asan):
    """Every dtype's random fill, the timing loop and the error paths, with ASan+UBSan."""
    exe, env = fake_asan
    r = run(exe, "bench", "mix", "--iters", "4", "--warmup", "1", "--int-max", "256", env=env)
    assert r.returncode == 0, r.stderr
    assert parse(r.stdout)[0] == "mix"
    r = run(exe, "bench", "train_step", "--iters", "3", env={**env, "FAKE_MODEL": "train"})
    assert r.returncode == 0, r.stderr
    for args in (["fail"], ["nope"], ["--iters", "0"], ["mix", "--int-max", "257"]):
        r = run(exe, "bench", *args, env=env)
        assert r.returncode == 1, (args, r.stderr)
