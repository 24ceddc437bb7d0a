"""gpt2_reference.py — the PyTorch reference for the CPU GPT-2 (gpt2_cpu.h): builds a TINY GPT-2 with the
same math (pre-LN blocks, causal attention scaled by 1/sqrt(hs), tanh-GELU MLP of width 4C, final LayerNorm
eps 1e-5, lm_head tied to wte, padded vocab whose logits are sliced off before the loss), runs one
forward/backward in float64 and 10 AdamW steps, and writes the expected values as float32 fixtures for
test/test_gpt2_cpu.cpp. It does not train anything real and is not imported by any build.

Run from the repo root with the system Python that has torch (1.13, CPU):
    /usr/bin/python3 dev/ref/gpt2_reference.py
Writes:
  test/fixtures/tiny_model.bin    llm.c model file, version 3 (fp32), tensor-major order, padded wte rows 0
  test/fixtures/tiny_fixture.bin  all little-endian:
    int32  header[16]  = {FIXTURE_MAGIC 20241123, version 1, B, T, maxT, V, Vp, L, NH, C, adam_steps, 0...}
    float32 hyper[8]   = {lr, beta1, beta2, eps, weight_decay, grad_clip, 0, 0}
    int32  inputs[B*T], targets[B*T]
    float32 logits[B*T*Vp]           (padded columns included: zero wte rows give logits 0)
    float32 loss                     mean cross-entropy over the B*T positions
    float32 grads[...]               d loss / d every parameter, in llm.c file order (same sizes as the model file)
    float32 adam_losses[adam_steps]  loss BEFORE each of the AdamW steps, same batch every step
AdamW: torch.optim.AdamW(lr, betas, eps, weight_decay) with decay only on 2-D tensors (wte, wpe and the
weight matrices: llm.c's rule), torch.nn.utils.clip_grad_norm_(grad_clip) before each step, constant lr.
Everything is computed in float64 and rounded to float32 only when written.
"""
import math
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F

MODEL_MAGIC, MODEL_VERSION = 20240326, 3
FIXTURE_MAGIC, FIXTURE_VERSION = 20241123, 1
# tiny shape: C must be a multiple of 32 and Vp of 128 (gpt_config_check in model.h)
maxT, V, Vp, L, NH, C = 16, 100, 128, 2, 4, 32
B, T = 3, 12  # T < maxT on purpose; B*T = 36 is not a multiple of the matmul micro tile (8)
ADAM_STEPS, LR, BETAS, EPS, WD, CLIP = 10, 1e-3, (0.9, 0.95), 1e-8, 0.1, 1.0

LAYER_TENSORS = ["ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb"]


def layer_shapes():
    return {"ln1w": (C,), "ln1b": (C,), "qkvw": (3 * C, C), "qkvb": (3 * C,), "attprojw": (C, C), "attprojb": (C,),
            "ln2w": (C,), "ln2b": (C,), "fcw": (4 * C, C), "fcb": (4 * C,), "fcprojw": (C, 4 * C), "fcprojb": (C,)}


def make_params(gen):
    """Random weights, deliberately NOT GPT-2's init: larger matrices, LayerNorm weights != 1 and biases != 0,
    so attention is far from uniform and every tensor has a gradient worth comparing."""
    def randn(*shape, std):
        return torch.randn(*shape, generator=gen, dtype=torch.float64) * std
    P = {}
    wte = randn(Vp, C, std=0.3)
    wte[V:] = 0.0  # padded rows are zero, as gpt_init_params makes them
    P["wte"] = wte
    P["wpe"] = randn(maxT, C, std=0.3)
    for l in range(L):
        for name, shape in layer_shapes().items():
            if name in ("ln1w", "ln2w"):
                t = 1.0 + randn(*shape, std=0.1)
            elif len(shape) == 1:
                t = randn(*shape, std=0.1)
            else:
                t = randn(*shape, std=1.0 / math.sqrt(shape[1]))
            P[f"h{l}.{name}"] = t
    P["lnfw"] = 1.0 + randn(C, std=0.1)
    P["lnfb"] = randn(C, std=0.1)
    for t in P.values():
        t.requires_grad_(True)
    return P


def file_order():
    """Names in llm.c model-file order: wte wpe ln1w[L] ln1b[L] ... fcprojb[L] lnfw lnfb."""
    names = ["wte", "wpe"]
    for name in LAYER_TENSORS:
        names += [f"h{l}.{name}" for l in range(L)]
    return names + ["lnfw", "lnfb"]


def forward(P, idx, targets):
    """Returns logits (B, T, Vp) and the mean cross-entropy over the real vocab."""
    Bb, Tt = idx.shape
    hs = C // NH
    x = P["wte"][idx] + P["wpe"][:Tt]
    mask = torch.tril(torch.ones(Tt, Tt, dtype=torch.bool))
    for l in range(L):
        p = lambda n: P[f"h{l}.{n}"]
        h = F.layer_norm(x, (C,), p("ln1w"), p("ln1b"), eps=1e-5)
        qkv = h @ p("qkvw").T + p("qkvb")
        q, k, v = qkv.split(C, dim=2)
        q, k, v = [t.view(Bb, Tt, NH, hs).transpose(1, 2) for t in (q, k, v)]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(Bb, Tt, C)
        x = x + y @ p("attprojw").T + p("attprojb")
        h = F.layer_norm(x, (C,), p("ln2w"), p("ln2b"), eps=1e-5)
        h = F.gelu(h @ p("fcw").T + p("fcb"), approximate="tanh")
        x = x + h @ p("fcprojw").T + p("fcprojb")
    x = F.layer_norm(x, (C,), P["lnfw"], P["lnfb"], eps=1e-5)
    logits = x @ P["wte"].T  # tied lm_head over all Vp rows
    loss = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))
    return logits, loss


def f32(t):
    return t.detach().to(torch.float32).numpy().astype("<f4").tobytes()


def main():
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    out_dir = os.path.join(root, "test", "fixtures")
    os.makedirs(out_dir, exist_ok=True)
    gen = torch.Generator().manual_seed(1234)
    P = make_params(gen)
    idx = torch.randint(0, V, (B, T), generator=gen)
    tgt = torch.randint(0, V, (B, T), generator=gen)

    # the model file: the float32 rounding of the weights is what the C++ side starts from, so the
    # reference continues from exactly those rounded values
    with torch.no_grad():
        for t in P.values():
            t.copy_(t.to(torch.float32).to(torch.float64))
    header = np.zeros(256, dtype="<i4")
    header[:8] = [MODEL_MAGIC, MODEL_VERSION, maxT, V, L, NH, C, Vp]
    with open(os.path.join(out_dir, "tiny_model.bin"), "wb") as f:
        f.write(header.tobytes())
        for name in file_order():
            f.write(f32(P[name]))

    logits, loss = forward(P, idx, tgt)
    loss.backward()
    grads = {n: P[n].grad.clone() for n in P}

    # AdamW steps on the same batch, llm.c's decay rule (2-D tensors only)
    decay = [t for n, t in P.items() if t.dim() >= 2]
    no_decay = [t for n, t in P.items() if t.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS)
    adam_losses = []
    for step in range(ADAM_STEPS):
        opt.zero_grad()
        _, l_step = forward(P, idx, tgt)
        l_step.backward()
        torch.nn.utils.clip_grad_norm_(list(P.values()), CLIP)
        opt.step()
        adam_losses.append(l_step.item())

    fh = np.zeros(16, dtype="<i4")
    fh[:11] = [FIXTURE_MAGIC, FIXTURE_VERSION, B, T, maxT, V, Vp, L, NH, C, ADAM_STEPS]
    hyper = np.array([LR, BETAS[0], BETAS[1], EPS, WD, CLIP, 0, 0], dtype="<f4")
    with open(os.path.join(out_dir, "tiny_fixture.bin"), "wb") as f:
        f.write(fh.tobytes())
        f.write(hyper.tobytes())
        f.write(idx.to(torch.int32).numpy().astype("<i4").tobytes())
        f.write(tgt.to(torch.int32).numpy().astype("<i4").tobytes())
        f.write(f32(logits))
        f.write(struct.pack("<f", loss.item()))
        for name in file_order():
            f.write(f32(grads[name]))
        f.write(np.array(adam_losses, dtype="<f4").tobytes())
    print(f"loss {loss.item():.6f}; adam losses " + " ".join(f"{x:.6f}" for x in adam_losses))
    print(f"wrote {out_dir}/tiny_model.bin and tiny_fixture.bin")


if __name__ == "__main__":
    main()
