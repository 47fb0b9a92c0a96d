"""bench/bench.py runs end to end on the smallest workload and prints its table
(one round, one call: a smoke test of the script, never of the speed)."""
import os
import re
import subprocess
import sys

import pytest

from ctc_testlib import BENCH, ROOT

pytest.importorskip("torch")


def import_bench():
    """bench/bench.py as a module (its table and environment functions)."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        import bench
    finally:
        sys.path.pop(0)
    return bench


def summary_row():
    """A row's summaries as bench.main() makes them: torch 2.00 ms, ctc 1.00, torch.compile 3.00."""
    return {"torch": {"median": 2.0, "min": 1.5, "rss": 100}, "ctc": {"median": 1.0, "min": 1.0, "rss": 10},
            "compile": {"median": 3.0, "min": 2.5, "rss": 0}, "torch_version": "1.13"}


@pytest.mark.skipif(not os.path.exists(os.path.join(BENCH, "mlp.py")), reason="../shared/bench/models missing")
def test_bench_script_prints_the_table():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench.py"), "--models", "mlp", "--rounds", "1",
                        "--iters", "1", "--warmup", "0", "--no-compile-column"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("# 1 rounds x 1 calls") and "torch.compile: skipped" in lines[0], lines[0]
    assert "OMP_WAIT_POLICY=passive" in lines[0]
    assert re.fullmatch(r"# sgemm rate \(OpenBLAS cblas_sgemm 1024\^3, 2 threads, best of 5\): [0-9.]+ GFLOP/s", lines[1]), lines[1]
    two = len(os.sched_getaffinity(0)) > 1
    if two:   # 2 threads: the placement probe's line, and its column (each side's round trip)
        cpus = sorted(os.sched_getaffinity(0))[:2]
        assert re.fullmatch(rf"# a cache line's round trip between CPUs {cpus[0]} and {cpus[1]}: [1-9][0-9]* ns "
                            r"\(tens: one core complex; hundreds: two, where 2-thread times depend on the placement\)",
                            lines[2]), lines[2]
        lines = lines[:1] + lines[3:]
    else:
        lines = lines[:1] + lines[2:]
    tail = " round trip ns (ctc / torch) |" if two else ""
    steal = lines[1].endswith(" host steal % (ctc / torch) |")   # (a VM whose host took 1% of its CPU time or more)
    assert lines[1].startswith("| workload | torch ") and lines[1].endswith(
        "| torch/ctc of mins | torch peak RSS | ctc peak RSS | ctc compile (wall / CPU) |" + tail
        + (" host steal % (ctc / torch) |" if steal else "")), lines[1]
    num = r"[0-9]+\.[0-9]{2}"
    ms = rf"{num} \(min {num}\)"
    trip = r" [1-9][0-9]* / [1-9][0-9]*( \*)? \|" if two else ""
    trip += r" [0-9]+\.[0-9] / [0-9]+\.[0-9]( !)? \|" if steal else ""
    for mode, line in zip(("forward", "train"), lines[3:5]):
        assert re.fullmatch(rf"\| mlp {mode} \| {ms} \| {ms} \| {num} \| {num} \| [0-9]+ MiB \| [0-9]+ MiB \| [0-9]+ / [0-9]+ ms \|"
                            + trip, line), line
    rest = lines[5:]   # the notes under the table when a row's sides ran in different placements or under steal
    assert rest == [] or (rest[0] == "" and all(n.startswith(("(*: that row's sides ran in different placements",
                                                              "(!: the host took over 5%",
                                                              "(measured again while marked: ")) for n in rest[1:])), r.stdout


@pytest.mark.skipif(not os.path.exists(os.path.join(BENCH, "mlp.py")), reason="../shared/bench/models missing")
def test_bench_script_bf16_autocast():
    """--dtype bf16: the file ctc builds runs its forward ('infer') and train step under CPU autocast,
    as PyTorch's side does; both rows print."""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench.py"), "--models", "mlp", "--rounds", "1",
                        "--iters", "1", "--warmup", "0", "--no-compile-column", "--dtype", "bf16", "--threads", "1"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "both under CPU autocast to bfloat16" in r.stdout.splitlines()[0], r.stdout
    for mode in ("forward", "train"):
        assert re.search(rf"^\| mlp {mode} \| [0-9.]+ \(min", r.stdout, re.M), r.stdout


@pytest.mark.skipif(not os.path.exists(os.path.join(BENCH, "gpt.py")), reason="../shared/bench/models missing")
def test_gpu_bench_script_emulated():
    """bench/bench_gpu.py with --emulate (the program built for the CPU, PyTorch on the
    CPU) on its tiny configuration: the table the GPU run prints, with the device named."""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench_gpu.py"), "--emulate", "--configs", "tiny",
                        "--rounds", "1", "--iters", "1", "--warmup", "0"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "on CPU (--emulate), torch " in r.stdout, r.stdout
    assert re.search(r"^\| tiny \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$", r.stdout, re.M), r.stdout


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(os.path.join(BENCH, "gpt.py")), reason="../shared/bench/models missing")
def test_lm_bench_script_prints_its_table():
    """bench/bench_lm.py (generation and the train step against PyTorch) on 4 tokens and one train
    call: it runs through bench.py's helpers, whose options it takes from bench.py's own parser (it
    had fallen behind them: prepare()'s cflags, ctc_bench's --avx2), and the greedy tokens agree."""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench_lm.py"), "--tokens", "4", "--rounds", "1",
                        "--train-iters", "1", "--threads", "1"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "greedy tokens that agree with PyTorch's: 4 of 4" in r.stdout, r.stdout
    assert re.search(r"^\| generate 4 tokens .* \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|", r.stdout, re.M), r.stdout
    assert re.search(r"^\| train step \(8 x 128 tokens\) \| [0-9]+ \| [0-9]+ \| [0-9.]+ \|", r.stdout, re.M), r.stdout


def test_gemm_summary_counts_the_gemm_kernels_of_a_trace():
    """--gemm-rate's numbers from a --profile trace: the GEMM kernels (`matmul`, `gemm: ...`) of
    thread 1's complete events, their share of all kernels' time and flops / time; entry events
    (thread 0), the threads' own events and convolutions are not GEMMs."""
    bench = import_bench()
    ev = [{"name": "entry train_step", "ph": "X", "tid": 0, "dur": 1000.0},
          {"name": "gemm: matmul+add", "ph": "X", "tid": 1, "dur": 300.0, "args": {"flops": 6e6}},
          {"name": "matmul", "ph": "X", "tid": 1, "dur": 100.0, "args": {"flops": 2e6}},
          {"name": "conv2d", "ph": "X", "tid": 1, "dur": 400.0, "args": {"flops": 9e9}},
          {"name": "row: reduce_sum", "ph": "X", "tid": 1, "dur": 200.0, "args": {"flops": 1e3}},
          {"name": "matmul", "ph": "X", "tid": 2, "dur": 90.0, "args": {"flops": 2e6}},
          {"name": "thread_name", "ph": "M", "tid": 1}]
    share, gflops, calls = bench.gemm_summary({"traceEvents": ev})
    assert calls == 2 and abs(share - 0.4) < 1e-12 and abs(gflops - 8e6 / 400 / 1e3) < 1e-12
    assert bench.gemm_summary({"traceEvents": ev[3:5]}) is None


@pytest.mark.skipif(not os.path.exists(os.path.join(BENCH, "mlp.py")), reason="../shared/bench/models missing")
def test_bench_script_gemm_rate_table():
    """--gemm-rate: after the main table, each row's GEMM kernels from a --profile build's run."""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench.py"), "--models", "mlp", "--modes", "forward",
                        "--rounds", "1", "--iters", "1", "--warmup", "0", "--no-compile-column", "--threads", "1",
                        "--gemm-rate"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    tail = r.stdout.split("\n\n")[-1].splitlines()
    assert tail[0] == "| workload | GEMM kernels' share of kernel time | their GFLOP/s (1 thread) | of the sgemm probe |", r.stdout
    # the mlp's forward is three Linear layers: three GEMM kernels (with their bias and relu epilogues)
    assert re.fullmatch(r"\| mlp forward \| [0-9]+% \(3 calls\) \| [0-9]+\.[0-9] \| ([0-9]+%|-) \|", tail[2]), r.stdout


def test_avx2_caps_every_torch_kernel_library(monkeypatch):
    """--avx2 caps PyTorch's oneDNN convolutions and MKL GEMMs at AVX2 as well as ATen:
    ATEN_CPU_CAPABILITY alone left oneDNN's jit:avx512_core convolutions and MKL's AVX-512
    sgemm running on an AVX-512 machine. Without --avx2 none of the caps is set."""
    bench = import_bench()
    env = bench.torch_env(2, avx2=True)
    assert env["ATEN_CPU_CAPABILITY"] == "avx2"
    assert env["ONEDNN_MAX_CPU_ISA"] == env["DNNL_MAX_CPU_ISA"] == "AVX2"
    assert env["MKL_ENABLE_INSTRUCTIONS"] == "AVX2"
    plain = bench.torch_env(2)
    for k in ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS"):
        assert plain.get(k) == os.environ.get(k)
    # OpenBLAS's kernels are the CPU's choice (AVX2's with --avx2), not an OPENBLAS_CORETYPE of the
    # environment's: PyTorch is timed at its best
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Prescott")
    assert bench.torch_env(2).get("OPENBLAS_CORETYPE") == bench.openblas_coretype()
    assert bench.torch_env(2, avx2=True)["OPENBLAS_CORETYPE"] == "Haswell"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench.py"), "--help"], capture_output=True,
                       text=True, timeout=60)
    assert "--ctc-wait-policy" in r.stdout and "--venv-python" in r.stdout, r.stdout


def test_ncu_summary_sums_launches_by_kernel(tmp_path):
    """bench/ncu_summary.py over Nsight Compute's CSV (as `ncu --csv --metrics
    gpu__time_duration.sum` writes it): launches of one kernel summed, units converted,
    largest first; a file that is not such a CSV is refused with a message."""
    head = '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",' \
           '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"\n'
    rows = [("0", "net_i3_dkv(unsigned char *)", "(16, 1, 1)", "usecond", "2,500.5"),
            ("1", "net_k7(unsigned char *)", "(64, 1, 1)", "nsecond", "1,500"),
            ("2", "net_k7(unsigned char *)", "(64, 1, 1)", "nsecond", "500"),
            ("3", "net_i3_dkv(unsigned char *)", "(16, 1, 1)", "msecond", "0.5")]
    body = "".join(f'"{i}","1","net","h","{k}","1","7","(256, 1, 1)","{g}","0","9.0","Command line profiler metrics",'
                   f'"gpu__time_duration.sum","{u}","{v}"\n' for i, k, g, u, v in rows)
    (tmp_path / "ncu.csv").write_text("==PROF== Connected to process\n" + head + body)
    script = os.path.join(ROOT, "bench", "ncu_summary.py")
    r = subprocess.run([sys.executable, script, tmp_path / "ncu.csv"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "4 launches of 2 kernels, 3.002 ms of kernel time", lines
    assert re.match(r"\s+3\.001 ms\s+2x  grid\s+\(16, 1, 1\)  net_i3_dkv$", lines[1]), lines
    assert re.match(r"\s+0\.002 ms\s+2x  grid\s+\(64, 1, 1\)  net_k7$", lines[2]), lines
    (tmp_path / "bad.csv").write_text("not a profile\n")
    r = subprocess.run([sys.executable, script, tmp_path / "bad.csv"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "no 'Kernel Name' / 'Metric Value' header" in r.stderr


def test_a_torch_compile_failure_marks_its_row_only(capsys):
    """An inductor error on one workload (torch.compile 2.15 on lenet's train step under --avx2:
    "index out of bounds" in a generated kernel) marks that row's cells, and the other rows keep
    their torch.compile times; the column is left out only when no row has one."""
    bench = import_bench()
    ok = summary_row()
    bad = {k: v for k, v in ok.items() if k != "compile"}
    bench.print_table([("mlp", "train", (19, 18), ok), ("lenet", "train", (23, 22), bad)], "2.15")
    lines = capsys.readouterr().out.splitlines()
    assert "| torch.compile 2.15 ms | compile/ctc |" in lines[0], lines[0]
    assert lines[2].startswith("| mlp train | 2.00 (min 1.50) | 1.00 (min 1.00) | 2.00 | 3.00 (min 2.50) | 3.00 | 1.50 |"), lines[2]
    assert lines[3].startswith("| lenet train | 2.00 (min 1.50) | 1.00 (min 1.00) | 2.00 | failed | - | 1.50 |"), lines[3]
    bench.print_table([("lenet", "train", (23, 22), bad)], None)
    assert "torch.compile" not in capsys.readouterr().out


def test_rows_whose_sides_ran_in_different_placements_are_marked(capsys):
    """Each side's round trip (measured before and after its runs) in the last column; a row where one side's is
    over twice another's (a VM's vCPUs moved between core complexes) is marked, with a note."""
    bench = import_bench()
    row = summary_row()
    same = dict(row, trip={"ctc": 52.0, "torch": 55.0, "compile": 60.0})
    moved = dict(row, trip={"ctc": 52.0, "torch": 55.0, "compile": 331.0})
    bench.print_table([("gpt", "train", (19, 18), same)], "2.15")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("| round trip ns (ctc / torch / compile) |"), lines[0]
    assert lines[2].endswith("| 52 / 55 / 60 |") and len(lines) == 3, lines
    bench.print_table([("gpt", "train", (19, 18), same), ("resnet", "train", (19, 18), moved)], "2.15")
    lines = capsys.readouterr().out.splitlines()
    assert lines[3].endswith("| 52 / 55 / 331 * |"), lines[3]
    assert lines[4] == "" and lines[5].startswith("(*: that row's sides ran in different placements"), lines
    bench.print_table([("gpt", "train", (19, 18), row)], "2.15")   # 1 thread: no column
    assert "round trip" not in capsys.readouterr().out


def test_rows_run_while_the_host_took_the_cpus_are_marked(capsys, monkeypatch):
    """Each side's share of the machine's CPU time the host took while it ran (steal, from
    /proc/stat's first line): a column where some side's reached 1%, a row marked where one
    side's was over 5%, with a note; stolen() adds the ticks over a call."""
    bench = import_bench()
    row = summary_row()
    quiet = dict(row, steal={"ctc": 0.2, "torch": 0.0, "compile": 0.4})
    bench.print_table([("gpt", "train", (19, 18), quiet)], "2.15")
    assert "steal" not in capsys.readouterr().out   # under 1% everywhere: no column
    busy = dict(row, steal={"ctc": 12.5, "torch": 1.0, "compile": 0.0})
    bench.print_table([("gpt", "train", (19, 18), quiet), ("mlp", "forward", (19, 18), busy)], "2.15")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("| host steal % (ctc / torch / compile) |"), lines[0]
    assert lines[2].endswith("| 0.2 / 0.0 / 0.4 |") and lines[3].endswith("| 12.5 / 1.0 / 0.0 ! |"), lines
    assert lines[4] == "" and lines[5].startswith("(!: the host took over 5% of the machine's CPU time"), lines
    ticks = iter([(100, 1000), (130, 1400)])
    monkeypatch.setattr(bench, "cpu_jiffies", lambda: next(ticks))
    acc = [0, 0]
    assert bench.stolen(lambda: "ran", acc) == "ran" and acc == [30, 400]


def test_a_marked_row_is_measured_again(capsys):
    """--remeasure: a row whose sides ran in different placements (*) or while the host took the CPUs (!)
    is measured again, up to N more times; the first measurement without a mark is kept (else the last),
    and the table says which rows were measured again."""
    bench = import_bench()
    row = summary_row()
    moved = dict(row, trip={"ctc": 52.0, "torch": 331.0, "compile": 60.0})
    stole = dict(row, steal={"ctc": 12.5, "torch": 0.0, "compile": 0.0})
    clean = dict(row, trip={"ctc": 52.0, "torch": 55.0, "compile": 60.0}, steal={"ctc": 0.2, "torch": 4.9, "compile": 0})
    assert bench.row_marks(moved) == ["*"] and bench.row_marks(stole) == ["!"] and bench.row_marks(clean) == []
    assert bench.row_marks(dict(moved, steal=stole["steal"])) == ["*", "!"] and bench.row_marks(row) == []

    def runs(*summaries):   # measure() returning these in turn (copies: the loop adds "measured")
        it = iter(summaries)
        calls = []
        return (lambda: calls.append(1) or dict(next(it))), calls

    measure, calls = runs(moved, stole, clean, moved)
    s = bench.measure_unmarked(measure, 2, "gpt train")
    assert s["trip"] == clean["trip"] and s["measured"] == 3 and len(calls) == 3
    err = capsys.readouterr().err
    assert "# gpt train: marked * (measurement 1)" in err and "# gpt train: marked ! (measurement 2)" in err, err
    measure, calls = runs(moved, moved, moved, clean)
    s = bench.measure_unmarked(measure, 2, "gpt train")   # never clean within 2 more: the last is kept, marked
    assert s["trip"] == moved["trip"] and s["measured"] == 3 and len(calls) == 3
    measure, calls = runs(moved, clean)
    assert bench.measure_unmarked(measure, 0, "gpt train")["measured"] == 1 and len(calls) == 1   # --remeasure 0
    capsys.readouterr()

    again = dict(clean, measured=3)
    bench.print_table([("mlp", "forward", (19, 18), dict(clean, measured=1)), ("gpt", "train", (19, 18), again)], "2.15")
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2] == "" and lines[-1].startswith("(measured again while marked: gpt train 3 times;"), lines
    bench.print_table([("mlp", "forward", (19, 18), dict(clean, measured=1))], "2.15")
    assert "measured again" not in capsys.readouterr().out
