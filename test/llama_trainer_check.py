#!/usr/bin/env python3
"""llama_trainer_check.py: tiny random Llama and Qwen2 checkpoints for test_llama_trainer, and the loss
transformers computes on the first validation batch train_gpt_cpu reads.

For each case it writes OUT/<case>/model/ (save_pretrained, safetensors) and OUT/<case>/val_loss.txt: the mean
cross-entropy of the first (B, T) batch of SHARD, inputs tokens[0 : B*T] and targets tokens[1 : B*T + 1], as
dataloader.h reads batch 0. Weights are drawn wider than the default init (std 0.3) so the loss depends on
every part of the model, not only on log V. Seeded: the same files every run.

With `loss DIR SHARD B T` it prints the loss of the checkpoint in DIR (loaded with AutoModelForCausalLM, computed
in fp32) on that batch, and its class name.

usage: python3 test/llama_trainer_check.py OUT SHARD B T
       python3 test/llama_trainer_check.py loss DIR SHARD B T
"""
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen2Config,  # noqa: E402
                          Qwen2ForCausalLM)

torch.set_num_threads(2)
V = 50257  # the GPT-2 tokens of the shipped shards fit
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}
# name: kind, tied, extra config
CASES = {
    "llama_gqa2": ("llama", False, {"rope_theta": 500000.0, "rope_scaling": LLAMA3, "rms_norm_eps": 1e-5}),
    "qwen2_tied": ("qwen2", True, {"rope_theta": 1e6, "rms_norm_eps": 1e-6}),
}


def first_batch(shard, B, T):
    tok = np.fromfile(shard, dtype=np.uint16, offset=1024, count=B * T + 1).astype(np.int64)
    return torch.tensor(tok[: B * T]).view(B, T), torch.tensor(tok[1: B * T + 1]).view(B, T)


def main():
    if sys.argv[1] == "loss":
        x, y = first_batch(sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        model = AutoModelForCausalLM.from_pretrained(sys.argv[2], attn_implementation="eager").float().eval()
        with torch.no_grad():
            logits = model(input_ids=x).logits
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        print(f"{type(model).__name__} {loss.item():.9g}")
        return
    out, shard, B, T = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    x, y = first_batch(shard, B, T)
    for seed, (name, (kind, tied, extra)) in enumerate(CASES.items()):
        torch.manual_seed(seed)
        common = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=V, max_position_embeddings=64, tie_word_embeddings=tied,
                      initializer_range=0.3, attn_implementation="eager", **extra)
        model = (LlamaForCausalLM(LlamaConfig(**common)) if kind == "llama"
                 else Qwen2ForCausalLM(Qwen2Config(**common))).float().eval()
        with torch.no_grad():
            for pname, p in model.named_parameters():  # norms and biases away from 1 and 0
                if "norm" in pname:
                    p.add_(0.1 * torch.randn_like(p))
                elif pname.endswith("bias"):
                    p.copy_(0.1 * torch.randn_like(p))
            loss = F.cross_entropy(model(input_ids=x).logits.reshape(-1, V), y.reshape(-1))
        os.makedirs(f"{out}/{name}", exist_ok=True)
        model.save_pretrained(f"{out}/{name}/model", safe_serialization=True)
        with open(f"{out}/{name}/val_loss.txt", "w") as f:
            f.write(f"{loss.item():.9g}\n")


if __name__ == "__main__":
    main()
