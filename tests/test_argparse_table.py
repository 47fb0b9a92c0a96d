"""ctc's compile-time argparse (python/argparse.c) against CPython's own
argparse on a table of (parser, command line) pairs: for each, CPython's
parse_args() on the words and `ctc check --args '...'` on a file with the same
parser give the same namespace, or both refuse (CPython exits 2, ctc prints an
`argparse:` diagnostic at the parse_args line and exits 1)."""
import argparse
import contextlib
import io
import shlex
import subprocess

import pytest

from ctc_testlib import CTC

# Parsers, as lines of Python after `p = argparse.ArgumentParser(...)`.
PARSERS = {
    "basic": """p = argparse.ArgumentParser()
p.add_argument('--n', type=int, default=3)
p.add_argument('--lr', type=float, default=0.1)
p.add_argument('--name', default='net')
""",
    "verbose": """p = argparse.ArgumentParser()
p.add_argument('-v', '--verbose', action='count', default=0)
p.add_argument('-q', action='store_true')
p.add_argument('-n', type=int, default=1)
""",
    "prefix": """p = argparse.ArgumentParser()
p.add_argument('--verbose', action='store_true')
p.add_argument('--epochs', type=int, default=1)
p.add_argument('--epsilon', type=float, default=1e-5)
""",
    "noabbrev": """p = argparse.ArgumentParser(allow_abbrev=False)
p.add_argument('--verbose', action='store_true')
p.add_argument('--epochs', type=int, default=1)
""",
    "nargs": """p = argparse.ArgumentParser()
p.add_argument('--pair', type=int, nargs=2)
p.add_argument('--one', nargs=1)
p.add_argument('--opt', nargs='?', const='c', default='d')
p.add_argument('--star', type=int, nargs='*')
p.add_argument('--plus', type=float, nargs='+')
""",
    "positional": """p = argparse.ArgumentParser()
p.add_argument('src')
p.add_argument('rest', nargs='*', type=int)
p.add_argument('--k', type=int, default=0)
""",
    "negopt": """p = argparse.ArgumentParser()
p.add_argument('-1', dest='one', action='store_true')
p.add_argument('--n', type=int, default=0)
p.add_argument('x', nargs='?', default='none')
""",
    "misc": """p = argparse.ArgumentParser()
p.add_argument('--act', choices=['relu', 'tanh'], default='relu')
p.add_argument('--no-bias', action='store_false', dest='bias')
p.add_argument('--layer', action='append', type=int)
p.add_argument('--mode', action='store_const', const='fast', default='slow')
p.add_argument('--data', required=True)
p.add_argument('--size', type=int, default='7')
p.set_defaults(seed=5)
""",
}

CASES = [
    ("basic", "--n 5 --lr 0.5 --name x"),
    ("basic", "--n=5 --lr=2.5e-3"),
    ("basic", "--n -7"),                 # a negative number is a value when no option looks like one
    ("basic", "--lr -0.5"),
    ("basic", "--lr -.5"),
    ("basic", "--lr -1e-3"),             # not a negative number for argparse: an unknown option
    ("basic", "--lr 0x1p3"),             # float() refuses hex
    ("basic", "--n 0x10"),
    ("basic", "--n 1_000 --lr 1_0.5"),
    ("basic", "--lr inf --n +4"),
    ("basic", "--n"),
    ("basic", "--n 1 2"),
    ("basic", "--nope 1"),
    ("basic", "--name=a=b"),
    ("basic", "--"),
    ("verbose", "-vvv"),
    ("verbose", "-v -v --verbose"),
    ("verbose", "--verbose=2"),
    ("verbose", "-vqn5"),
    ("verbose", "-n5"),
    ("verbose", "-n=5"),
    ("verbose", "-n-5"),
    ("verbose", "-vx"),
    ("verbose", "-qv"),
    ("prefix", "--verb --epo 3"),
    ("prefix", "--ep 3"),                # ambiguous: --epochs, --epsilon
    ("prefix", "--eps=0.5"),
    ("prefix", "--verbose=1"),
    ("noabbrev", "--verb"),
    ("noabbrev", "--verbose --epochs 2"),
    ("nargs", "--pair 1 2"),
    ("nargs", "--pair=1 2"),
    ("nargs", "--pair 1"),
    ("nargs", "--one a"),
    ("nargs", "--opt"),
    ("nargs", "--opt x"),
    ("nargs", "--star"),
    ("nargs", "--star 1 2 3 --plus 1.5"),
    ("nargs", "--plus"),
    ("nargs", "--plus -1 -2.5 --opt=v"),
    ("nargs", "--star=4"),
    ("positional", "a 1 2 3"),
    ("positional", "a"),
    ("positional", ""),
    ("positional", "a --k 2 1 2"),
    ("positional", "--k 2 a 1 2"),
    ("positional", "a 1 -- -5 --k"),
    ("positional", "-- --k 1"),
    ("positional", "a -3 -4"),
    ("negopt", "-5"),                    # an option looks like a negative number: -5 is an unknown option
    ("negopt", "--n -5"),
    ("negopt", "-1 y"),
    ("negopt", "-- -5"),
    ("misc", "--data d --act tanh --no-bias --layer 1 --layer 2 --mode"),
    ("misc", "--data d --act gelu"),
    ("misc", "--act tanh"),
    ("misc", "--data d --size 9"),
    ("misc", "--data d --no-bias=1"),
    ("misc", "--data d --layer x"),
]


def cpython(src, words):
    """The namespace's (name, repr) pairs under CPython, or None when it exits."""
    env = {"argparse": argparse}
    exec(src, env)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            ns = env["p"].parse_args(words)
    except SystemExit as e:
        assert e.code == 2
        return None
    return sorted(vars(ns).items())


def test_table_is_large_enough():
    assert len(CASES) >= 30


@pytest.mark.parametrize("parser,argv", CASES, ids=[f"{p}:{a}" for p, a in CASES])
def test_argparse_matches_cpython(tmp_path, parser, argv):
    src = PARSERS[parser]
    want = cpython(src, shlex.split(argv))
    names = [n for n, _ in want] if want is not None else []
    f = tmp_path / "m.py"
    f.write_text("import argparse\nimport torch.nn as nn\n" + src + "a = p.parse_args()\n"
                 f"assert False, repr([{', '.join('a.' + n for n in names)}])\n"
                 "class Net(nn.Module):\n    def forward(self, x):\n        return x\n")
    r = subprocess.run([CTC, "check", str(f), "--input", "x=f32[2]", "--args", argv],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    if want is None:
        assert "error: argparse: " in r.stderr, f"CPython refuses {argv!r}; ctc: {r.stderr}"
    else:
        expect = repr([v for _, v in want])
        assert f"assertion failed at compile time: {expect}\n" in r.stderr, \
            f"CPython gives {expect} for {argv!r}; ctc: {r.stderr}"
