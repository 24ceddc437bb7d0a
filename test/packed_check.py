#!/usr/bin/env python3
"""packed_check.py: what transformers computes for conversations run ALONE (test_packed reads it, packs them
into rows and checks that our CPU references give the same per-token losses and gradients).

For each case (a tiny random GPT2LMHeadModel, LlamaForCausalLM or Qwen2ForCausalLM) it writes OUT/<case>/:
  model/                the checkpoint (save_pretrained, safetensors, fp32)
  expected.safetensors  "grad.<parameter name>": the SUM over conversations of d(loss_c)/d(params), fp32,
                        with loss_c = (sum of conversation c's target-token cross-entropies) / (all targets)
  meta.json             B, T, the packed inputs, targets (-1: no loss) and pos (B*T each), the per-token
                        losses in packed order (0 where no target), the number of targets
Each row of T holds 2 or 3 conversations of different lengths; a conversation's first 3 tokens (its prompt)
and its last one have target -1. Everything is seeded. Attention: transformers' "eager" path in fp32.

usage: python3 test/packed_check.py OUT
"""
import json
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,  # noqa: E402
                          Qwen2Config, Qwen2ForCausalLM)

torch.set_num_threads(2)
ROWS = [[9, 14, 6], [12, 17]]  # conversation lengths per row: T = 29
V = 300

# name: kind, L, C, NH, NKV, hd
CASES = {
    "gpt2": ("gpt2", 2, 128, 4, 4, 32),
    "llama_gqa2": ("llama", 2, 128, 4, 2, 32),
    "qwen2_gqa4": ("qwen2", 2, 128, 4, 1, 32),
}


def make_model(kind, L, C, NH, NKV, hd, seed):
    torch.manual_seed(seed)
    if kind == "gpt2":
        cfg = GPT2Config(n_layer=L, n_embd=C, n_head=NH, n_positions=64, vocab_size=V, resid_pdrop=0.0,
                         embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="eager")
        model = GPT2LMHeadModel(cfg)
    else:
        common = dict(hidden_size=C, intermediate_size=3 * C, num_hidden_layers=L, num_attention_heads=NH,
                      num_key_value_heads=NKV, vocab_size=V, max_position_embeddings=64,
                      tie_word_embeddings=kind == "qwen2", initializer_range=0.05,
                      attn_implementation="eager")
        if kind == "llama":
            model = LlamaForCausalLM(LlamaConfig(head_dim=hd, rms_norm_eps=1e-5, **common))
        else:
            model = Qwen2ForCausalLM(Qwen2Config(rope_theta=1e6, rms_norm_eps=1e-6, **common))
    with torch.no_grad():  # norms and biases away from their init, so their gradients matter
        for name, p in model.named_parameters():
            if "norm" in name or "ln_" in name:
                p.add_(0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            elif kind == "gpt2":
                p.add_(0.02 * torch.randn_like(p))
    return model.float().eval()


def write_case(out, name, spec, seed):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    model = make_model(*spec, seed)
    model.save_pretrained(os.path.join(d, "model"), safe_serialization=True)
    gen = torch.Generator().manual_seed(seed + 1000)
    convs = []  # per row: (inputs, targets) of each conversation
    for lengths in ROWS:
        row = []
        for n in lengths:
            ids = torch.randint(0, V, (n + 1,), generator=gen)
            inputs, targets = ids[:-1].clone(), ids[1:].clone()
            targets[:3] = -1  # the prompt
            targets[-1] = -1  # the end of the conversation
            row.append((inputs, targets))
        convs.append(row)
    n_targets = sum(int((t >= 0).sum()) for row in convs for _, t in row)
    model.zero_grad(set_to_none=True)
    packed_in, packed_tg, packed_pos, losses = [], [], [], []
    for row in convs:
        for inputs, targets in row:
            logits = model(input_ids=inputs[None]).logits[0]  # the conversation alone: positions 0..n-1
            tok = F.cross_entropy(logits, targets, ignore_index=-1, reduction="none")
            (tok.sum() / n_targets).backward()  # gradients add up over the conversations
            packed_in += inputs.tolist()
            packed_tg += targets.tolist()
            packed_pos += list(range(len(inputs)))
            losses += tok.detach().tolist()
    tensors = {"grad." + n: p.grad.detach().contiguous() for n, p in model.named_parameters()}
    save_file(tensors, os.path.join(d, "expected.safetensors"))
    meta = {"B": len(ROWS), "T": sum(ROWS[0]), "inputs": packed_in, "targets": packed_tg, "pos": packed_pos,
            "losses": losses, "n_targets": n_targets}
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f)
    print(f"{name}: {n_targets} targets, mean loss {sum(losses) / n_targets:.6f}", flush=True)


def main():
    assert all(sum(r) == sum(ROWS[0]) for r in ROWS)
    out = sys.argv[1]
    for seed, (name, spec) in enumerate(CASES.items()):
        write_case(out, name, spec, seed)


if __name__ == "__main__":
    main()
