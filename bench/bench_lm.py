"""Language-model speed of ctc's generated program against tuned PyTorch, in one run.

usage: /usr/bin/python3 bench/bench_lm.py [--tokens 256] [--rounds 3] [--threads 2] [--train-iters 10]

On the bench GPT (../shared/bench/models/gpt.py: 4 layers, 4 heads, 256 wide, a
128-token window), built by `ctc build` from the file bench/bench.py writes around
it (model, SGD-momentum train_step, example_inputs), with random weights from
torch.manual_seed(0) saved by torch.save and read by the program as they are:

  generation: `./net sample --prompt-tokens 1,2,3 --tokens N --top-k 1` (the decode
    entry ctc derives from forward: one call per token, keys and values cached; past
    the window, prefill of the slid window) against PyTorch running nanoGPT's
    `generate` on the same model (torch.no_grad(), the whole window through forward for
    every token, top-k 1 and multinomial), N new tokens from the same prompt;
    tokens per second, peak RSS, and how many of the N tokens agree (greedy decoding of
    the same weights; random weights give near-ties, so a late difference is rounding);
  training: the train step (B=8 windows of 128 tokens), tokens per second, from
    `./net bench train_step` and PyTorch's step as bench/bench.py times them.

Both run with --threads threads (PyTorch tuned as in bench/bench.py:
OMP_WAIT_POLICY=passive, OpenBLAS on its fast kernels), rounds alternating. Nothing
is asserted about speed."""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402  (bench/bench.py: the wrapper, the tuned torch environment, run_ctc, run_torch)

PROMPT = [1, 2, 3]
SAMPLE_LINE = re.compile(r"(\d+) tokens in ([0-9.]+) s \(([0-9.]+) tokens/s")


def run_with_rss(cmd, env):
    """Runs cmd; returns (stdout, stderr, peak RSS of that process in MiB)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        o, e = out.read().decode(), err.read().decode()
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{e[-2000:]}")
    return o, e, ru.ru_maxrss / 1024.0


def torch_generate_worker(a):
    """In its own process: nanoGPT's generate on the bench GPT; prints one JSON line."""
    import importlib.util

    import torch
    import torch.nn.functional as F

    torch.set_num_threads(a.threads)
    spec = importlib.util.spec_from_file_location("bench_model", os.path.join(bench.MODELS_DIR, "gpt.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    torch.manual_seed(0)
    model = m.make_model()
    model.load_state_dict(torch.load(a.weights))
    model.eval()
    block = m.BLOCK

    @torch.no_grad()
    def generate(idx, max_new_tokens, temperature=1.0, top_k=None):   # nanoGPT's model.py generate
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= block else idx[:, -block:]
            logits = model(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("Inf")
            probs = F.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx

    idx = torch.tensor([PROMPT], dtype=torch.long)
    generate(idx, 4, top_k=1)   # warm-up
    t = time.perf_counter()
    out = generate(idx, a.tokens, top_k=1)
    s = time.perf_counter() - t
    import resource
    print(json.dumps({"tokens": out[0, len(PROMPT):].tolist(), "s": s,
                      "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}))


def save_weights(path):
    code = ("import importlib.util, torch\n"
            f"spec = importlib.util.spec_from_file_location('m', {os.path.join(bench.MODELS_DIR, 'gpt.py')!r})\n"
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            f"torch.manual_seed(0); torch.save(m.make_model().state_dict(), {path!r})\n")
    subprocess.run([bench.SYSTEM_PYTHON, "-c", code], check=True, capture_output=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--train-iters", type=int, default=10)
    ap.add_argument("--torch-generate-worker", metavar="WEIGHTS", dest="weights", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.weights:
        return torch_generate_worker(a)
    bench.build_ctc()
    with tempfile.TemporaryDirectory(prefix="ctc_bench_lm_") as d:
        exe, compile_ms, vocab = bench.prepare("gpt", d, [])
        info = subprocess.run([exe, "info"], capture_output=True, text=True, check=True).stdout
        if "entry decode:" not in info:
            raise RuntimeError("the bench GPT has no decode entry:\n" + info)
        w = os.path.join(d, "w.pt")
        save_weights(w)
        env_c = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS=str(a.threads))
        env_t = bench.torch_env(a.threads)
        gen = {"ctc": [], "torch": []}
        agree = None
        for _ in range(a.rounds):
            out, err, rss = run_with_rss([exe, "sample", "--weights", w, "--prompt-tokens", ",".join(map(str, PROMPT)),
                                          "--tokens", str(a.tokens), "--top-k", "1", "--seed", "0"], env_c)
            m = SAMPLE_LINE.search(err)
            if not m:
                raise RuntimeError("no timing line from ./net sample:\n" + err)
            ctc_tokens = [int(t) for t in out.split()][len(PROMPT):]
            gen["ctc"].append({"tps": float(m.group(3)), "rss": rss})
            out, _, rss = run_with_rss([bench.SYSTEM_PYTHON, os.path.abspath(__file__), "--torch-generate-worker", w,
                                        "--tokens", str(a.tokens), "--threads", str(a.threads)], env_t)
            r = json.loads(out.strip().splitlines()[-1])
            gen["torch"].append({"tps": a.tokens / r["s"], "rss": rss})
            agree = 0
            while agree < min(len(ctc_tokens), len(r["tokens"])) and ctc_tokens[agree] == r["tokens"][agree]:
                agree += 1
        b = bench.parser().parse_args(["--iters", str(a.train_iters), "--warmup", "2", "--threads", str(a.threads)])
        train = {"ctc": [], "torch": []}
        for _ in range(a.rounds):
            train["ctc"].append(bench.run_ctc(exe, "train", vocab, b))
            train["torch"].append(bench.run_torch(bench.SYSTEM_PYTHON, "gpt", "train", b))
    bt = 8 * 128   # the bench GPT's make_inputs: 8 windows of 128 tokens
    g = {k: (statistics.median(x["tps"] for x in v), max(x["rss"] for x in v)) for k, v in gen.items()}
    t = {k: (bt / statistics.median(x["median"] for x in v) * 1e3, max(x["rss"] for x in v)) for k, v in train.items()}
    print(f"# bench GPT (L4 H4 C256, window 128), {a.threads} threads, {a.rounds} rounds; "
          f"greedy tokens that agree with PyTorch's: {agree} of {a.tokens}")
    print("| workload | PyTorch tokens/s | ctc tokens/s | ctc/PyTorch | PyTorch peak RSS | ctc peak RSS |")
    print("|---|---|---|---|---|---|")
    print(f"| generate {a.tokens} tokens (PyTorch: nanoGPT's generate; ctc: KV-cache decode) | {g['torch'][0]:.1f} | "
          f"{g['ctc'][0]:.1f} | {g['ctc'][0] / g['torch'][0]:.1f} | {g['torch'][1]:.0f} MiB | {g['ctc'][1]:.0f} MiB |")
    print(f"| train step (8 x 128 tokens) | {t['torch'][0]:.0f} | {t['ctc'][0]:.0f} | {t['ctc'][0] / t['torch'][0]:.2f} | "
          f"{t['torch'][1]:.0f} MiB | {t['ctc'][1]:.0f} MiB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
