"""Whole models: ctc's generated C against PyTorch running the same file.

Tolerance: float32 forward, rtol 1e-4 / atol 1e-5. The generated code sums in
a different order than PyTorch's kernels (blocked GEMM, im2col), which moves
results by a few ulps per accumulation; 1e-4 relative leaves room for that
over the K <= 784 long dot products here, and still catches any wrong index,
missing bias or wrong activation (those give O(1) errors)."""
import os

import numpy as np
import pytest
import torch

from ctc_testlib import BENCH, EXAMPLES, compare, load_module, run_forward

RTOL, ATOL = 1e-4, 1e-5


def check_model(tmp_path, path, make, inputs, opts=()):
    mod = load_module(path)
    torch.manual_seed(0)
    model = make(mod)
    model.eval()
    with torch.no_grad():
        want = model(*[torch.from_numpy(x.copy()) for x in inputs])
    if isinstance(want, torch.Tensor):
        want = (want,)
    got = run_forward(str(tmp_path), path, model, inputs, opts)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        d = compare(f"{os.path.basename(path)} output {i}", g, w.numpy(), RTOL, ATOL)
        print(f"{os.path.basename(path)}: output {i} {tuple(g.shape)} max abs diff vs torch {d:.3g}")


def randn(*shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_bench_mlp(tmp_path):
    check_model(tmp_path, os.path.join(BENCH, "mlp.py"), lambda m: m.MLP(), [randn(64, 1, 28, 28)],
                ["--model", "MLP", "--input", "x=f32[64,1,28,28]"])


def test_bench_lenet(tmp_path):
    check_model(tmp_path, os.path.join(BENCH, "lenet.py"), lambda m: m.Network(), [randn(64, 1, 28, 28)],
                ["--model", "Network", "--input", "t=f32[64,1,28,28]"])


def test_example_seed_cnn(tmp_path):
    check_model(tmp_path, os.path.join(EXAMPLES, "seed_cnn.py"), lambda m: m.Network(), [randn(64, 1, 28, 28)])


def test_example_cifar_net(tmp_path):
    check_model(tmp_path, os.path.join(EXAMPLES, "cifar_net.py"), lambda m: m.Net(), [randn(16, 3, 32, 32)])


def test_example_mlp_sequential(tmp_path):
    check_model(tmp_path, os.path.join(EXAMPLES, "mlp_sequential.py"), lambda m: m.MLP(), [randn(32, 1, 28, 28)])


def test_example_inputs_overridden_by_command_line(tmp_path):
    """--input wins over example_inputs: compile the seed CNN for batch 8."""
    check_model(tmp_path, os.path.join(EXAMPLES, "seed_cnn.py"), lambda m: m.Network(), [randn(8, 1, 28, 28)],
                ["--input", "t=f32[8,1,28,28]"])


@pytest.mark.slow
def test_bench_gpt(tmp_path):
    """nanoGPT-style model: embeddings, LayerNorm, causal attention with a
    registered mask buffer, GELU(tanh), weight matrices up to 256x1024."""
    mod = load_module(os.path.join(BENCH, "gpt.py"))
    idx = np.random.default_rng(3).integers(0, mod.VOCAB, size=(2, 32)).astype(np.int64)
    check_model(tmp_path, os.path.join(BENCH, "gpt.py"), lambda m: m.GPT(), [idx],
                ["--model", "GPT", "--input", "idx=i64[2,32]"])
