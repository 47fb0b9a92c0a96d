"""Generated code is reentrant (issue 12, item 6): two instances of one model, each
with its own arena, train in two threads at once under ThreadSanitizer, and end
with parameters bit-identical to the same steps run one instance after the other.
Any global mutable state in the generated code or the runtime it calls would be a
data race (TSan fails the run) or would make the results differ."""
import shutil

import pytest

from ctc_testlib import CTC, ROOT, run

MODEL = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 4 * 4, 10)
        self.drop = nn.Dropout(0.25)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        return self.fc(self.drop(torch.flatten(x, 1)))


model = Net()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(8, 1, 8, 8),),
                  "train_step": (torch.randn(8, 1, 8, 8), torch.randint(0, 10, (8,)))}
"""

MAIN = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "net.h"

/* Each instance trains STEPS steps on its own deterministic batches. */
#define STEPS 20
typedef struct Job { net_t m; unsigned char *arena; int seed; float loss; } Job;

static void batch(int seed, int step, float *x, int64_t *y) {
  unsigned s = (unsigned)(seed * 7919 + step * 104729 + 1);
  for (int i = 0; i < 8 * 64; i++) { s = s * 1103515245u + 12345u; x[i] = (float)((s >> 8) & 0xFFFF) / 65536.f - .5f; }
  for (int i = 0; i < 8; i++) { s = s * 1103515245u + 12345u; y[i] = (int64_t)((s >> 8) % 10); }
}

static void *train(void *p) {
  Job *j = p;
  float x[8 * 64];
  int64_t y[8];
  for (int k = 0; k < STEPS; k++) {
    batch(j->seed, k, x, y);
    if (net_train_step(&j->m, x, y, &j->loss)) abort();
  }
  return NULL;
}

static void setup(Job *j, int seed) {
  size_t n = net_arena_bytes();
  j->arena = aligned_alloc(64, (n + 63) / 64 * 64);
  if (!j->arena || net_init(&j->m, j->arena, n)) abort();
  j->seed = seed;
}

int main(void) {
  Job a, b, a2, b2;
  setup(&a, 1); setup(&b, 2); setup(&a2, 1); setup(&b2, 2);
  pthread_t ta, tb;   /* two instances at once */
  pthread_create(&ta, NULL, train, &a);
  pthread_create(&tb, NULL, train, &b);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  train(&a2);   /* the same, one after the other */
  train(&b2);
  size_t n = net_arena_bytes();
  int same = !memcmp(a.arena, a2.arena, n) && !memcmp(b.arena, b2.arena, n) && memcmp(a.arena, b.arena, n);
  printf("%s %g %g\n", same ? "identical" : "DIFFERENT", a.loss, b.loss);
  return !same;
}
"""


def test_two_instances_in_two_threads(tmp_path):
    if not shutil.which("gcc"):
        pytest.skip("gcc not installed")
    (tmp_path / "m.py").write_text(MODEL)
    run([CTC, "compile", tmp_path / "m.py", "-o", tmp_path / "net.c"])
    (tmp_path / "main.c").write_text(MAIN)
    rt = f"{ROOT}/runtime_min"
    exe = tmp_path / "two"
    run(["gcc", "-std=c11", "-O1", "-g", "-fsanitize=thread", "-D_POSIX_C_SOURCE=200809L", "-D_DEFAULT_SOURCE",
         "-I", rt, "-I", tmp_path, tmp_path / "main.c", tmp_path / "net.c", f"{rt}/rt_error.c", f"{rt}/rt_model.c",
         f"{rt}/rt_safetensors.c", f"{rt}/rt_npy.c", f"{rt}/rt_pt.c", "-lz", "-lm", "-lpthread", "-o", exe])
    r = run([exe], check=False)
    assert r.returncode == 0 and r.stdout.startswith("identical"), r.stdout + r.stderr
    assert "ThreadSanitizer" not in r.stderr, r.stderr
