"""docs/supported.md is generated from the registration tables (torch.def, layers.def,
optim.def, builtins.def, ops.def) by scripts/gen_docs.py: regenerated into a temporary
file it must equal the committed one, so the tables cannot drift from the code; and the
tables hold what the .def rows say."""
import os
import re
import subprocess
import sys

from ctc_testlib import ROOT

GEN = os.path.join(ROOT, "scripts", "gen_docs.py")
DOC = os.path.join(ROOT, "docs", "supported.md")


def generate(tmp_path):
    out = tmp_path / "supported.md"
    r = subprocess.run([sys.executable, GEN, "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out.read_text(encoding="utf-8")


def test_supported_md_is_current(tmp_path):
    fresh = generate(tmp_path)
    with open(DOC, encoding="utf-8") as f:
        committed = f.read()
    assert committed == fresh, ("docs/supported.md is stale (a .def table changed): "
                                "run `python3 scripts/gen_docs.py` and commit docs/supported.md")


def test_check_mode_names_the_command(tmp_path):
    stale = tmp_path / "stale.md"
    stale.write_text("# old\n")
    r = subprocess.run([sys.executable, GEN, "--check", "-o", str(stale)], capture_output=True, text=True)
    assert r.returncode == 1 and "python3 scripts/gen_docs.py" in r.stderr
    stale.write_text(generate(tmp_path))
    assert subprocess.run([sys.executable, GEN, "--check", "-o", str(stale)]).returncode == 0


def test_tables_follow_the_rows(tmp_path):
    text = generate(tmp_path)
    with open(os.path.join(ROOT, "torchlib", "layers.def")) as f:
        layers = re.findall(r'^LAYER\(\w+, "(\w+)"', f.read(), flags=re.M)
    with open(os.path.join(ROOT, "torchlib", "optim.def")) as f:
        optim = f.read()
    assert len(layers) > 50
    for name in layers:
        assert "| `nn.%s` |" % name in text
    for name in re.findall(r'^OPTIM\(\w+, "(\w+)"', optim, flags=re.M):
        assert "| `torch.optim.%s` |" % name in text
    for name in re.findall(r'^SCHED\(\w+, "(\w+)"', optim, flags=re.M):
        assert "| `lr_scheduler.%s` |" % name in text
    # a name in several namespaces is one row (relu: torch.relu, x.relu(), F.relu)
    assert "| `relu` | ✓ | ✓ | ✓ |" in text
    assert "`nn.Dropout` | `p=0.5`, `inplace=False` |" in text
    assert "`torch.optim.SGD` | `lr`, `momentum=0`" in text
    # internal rows (names in angle brackets) are not user-visible
    assert "<grad mode>" not in text


def test_a_new_row_changes_the_output(tmp_path):
    """The generator reads the files it documents: a row added to a copy of the
    tree shows up in the copy's tables."""
    import shutil
    tree = tmp_path / "tree"
    for rel in ["scripts/gen_docs.py", "torchlib/torch.def", "torchlib/layers.def", "torchlib/optim.def",
                "torchlib/torch_int.h", "python/builtins.def", "python/py.h", "ir/ops.def"]:
        (tree / os.path.dirname(rel)).mkdir(parents=True, exist_ok=True)
        shutil.copy(os.path.join(ROOT, rel), tree / rel)
    with open(tree / "torchlib" / "optim.def", "a") as f:
        f.write('OPTIM(O_LION, "Lion", "lr=0.0001,betas=(0.9;0.99),weight_decay=0", opt_lion)\n')
    out = tmp_path / "s.md"
    subprocess.run([sys.executable, str(tree / "scripts" / "gen_docs.py"), "-o", str(out)], check=True)
    assert "| `torch.optim.Lion` | `lr=0.0001`, `betas=(0.9, 0.99)`, `weight_decay=0` |" in out.read_text()


def anchors(path):
    """GitHub's heading anchors of a Markdown file: lower case, punctuation but '-' and '_'
    dropped, spaces to '-'; a repeated heading gets -1, -2, ..."""
    seen, out = {}, set()
    in_code = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                in_code = not in_code
            m = None if in_code else re.match(r"^#{1,6} (.*)$", line.rstrip("\n"))
            if not m:
                continue
            a = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            n = seen.get(a, 0)
            seen[a] = n + 1
            out.add(a if n == 0 else "%s-%d" % (a, n))
    return out


def test_doc_links_resolve():
    """Every relative link of README.md, ARCHITECTURE.md and docs/*.md names a file that
    exists and, with #anchor, a heading of it."""
    docs = os.path.join(ROOT, "docs")
    files = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "ARCHITECTURE.md")]
    files += [os.path.join(docs, f) for f in sorted(os.listdir(docs)) if f.endswith(".md")]
    bad = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            text = re.sub(r"```.*?```", "", f.read(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue   # http:, https:, mailto:
            file, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            if not os.path.exists(dest):
                bad.append("%s: %s (no such file)" % (os.path.relpath(path, ROOT), target))
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                bad.append("%s: %s (no such heading)" % (os.path.relpath(path, ROOT), target))
    assert not bad, "\n".join(bad)
