#!/usr/bin/env python3
"""llama_check.py: what transformers computes for tiny random Llama and Qwen2 models (test_llama_cpu reads
it).

For each case it writes OUT/<case>/:
  model/                the checkpoint, as save_pretrained writes it (safetensors; sharded, bf16 or fp16 where
                        the case says)
  widened/              half-precision cases only: the same values saved as fp32 (loaded, they must match
                        model/ exactly)
  expected.safetensors  "logits" (B, T, V) and "grad.<parameter name>" for every parameter, fp32
  meta.json             B, T, inputs and targets (B*T token ids), loss; AdamW cases: the hyperparameters
                        and the losses of 3 steps of torch.optim.AdamW plus the loss after them
The loss is the mean cross-entropy of logits against targets (not the model's shifted labels).
Everything is seeded: the same files every run. Attention runs transformers' "eager" path in fp32.

usage: python3 test/llama_check.py OUT
"""
import copy
import json
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM  # noqa: E402

torch.set_num_threads(2)
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 32}  # with T = 48: past the original length; wavelengths
# 2 pi (under 32/4: kept), 8.4 to 32 (interpolated) and above 32/1 (divided by 8): every band of the rule
ADAMW = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "steps": 3}

# name: kind, L, C, NH, NKV, hd, I, V, tied, extra config, B, T, save (fp32, shards, bf16, fp16), AdamW
QWEN2 = {"rope_theta": 1e6, "rms_norm_eps": 1e-6}
CASES = {
    "llama_gqa1_hs64_tied": ("llama", 2, 256, 4, 4, 64, 512, 300, True, {}, 2, 16, "fp32", False),
    "llama_gqa2_hs128_untied_shards": ("llama", 2, 256, 4, 2, 128, 384, 259, False, {}, 2, 16, "shards",
                                       False),
    "llama_gqa8_llama3": ("llama", 2, 256, 8, 1, 64, 320, 200, False, {"rope_scaling": LLAMA3}, 2, 48,
                          "fp32", True),
    "qwen2_bias": ("qwen2", 2, 256, 4, 2, 64, 448, 320, True, QWEN2, 2, 16, "fp32", True),
    "llama_bf16": ("llama", 1, 128, 2, 1, 64, 256, 200, False, {}, 2, 16, "bf16", False),
    "llama_fp16": ("llama", 1, 128, 2, 1, 64, 256, 200, True, {}, 2, 16, "fp16", False),
}


def make_model(kind, L, C, NH, NKV, hd, I, V, tied, extra, seed):
    torch.manual_seed(seed)
    common = dict(hidden_size=C, intermediate_size=I, num_hidden_layers=L, num_attention_heads=NH,
                  num_key_value_heads=NKV, vocab_size=V, max_position_embeddings=64, tie_word_embeddings=tied,
                  initializer_range=0.05, attn_implementation="eager")
    common.update(extra)
    if kind == "llama":
        model = LlamaForCausalLM(LlamaConfig(head_dim=hd, rms_norm_eps=1e-5, **common))
    else:
        model = Qwen2ForCausalLM(Qwen2Config(**common))
    with torch.no_grad():  # norms and biases away from their init (1 and 0), so their gradients matter
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
    return model.float()


def loss_of(model, inputs, targets):
    logits = model(input_ids=inputs).logits
    return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def adamw_losses(model, inputs, targets):
    """llm.c's groups: 2-D parameters (embedding, lm_head included) decay, the others do not."""
    params = [p for p in model.parameters()]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": ADAMW["weight_decay"]},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=ADAMW["lr"], betas=(ADAMW["beta1"], ADAMW["beta2"]), eps=ADAMW["eps"],
                            foreach=False)
    losses = []
    for _ in range(ADAMW["steps"]):
        opt.zero_grad(set_to_none=True)
        _, loss = loss_of(model, inputs, targets)
        loss.backward()
        losses.append(loss.item())
        opt.step()
    with torch.no_grad():
        losses.append(loss_of(model, inputs, targets)[1].item())
    return losses


def write_case(out, name, spec, seed):
    kind, L, C, NH, NKV, hd, I, V, tied, extra, B, T, save, adamw = spec
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    model = make_model(kind, L, C, NH, NKV, hd, I, V, tied, extra, seed)
    if save in ("bf16", "fp16"):  # the checkpoint in half precision; expected values from its exact widening
        dtype = torch.bfloat16 if save == "bf16" else torch.float16
        with torch.no_grad():  # the parameters only: .to(dtype) would round the RoPE inv_freq buffer too
            for p in model.parameters():
                p.copy_(p.to(dtype).float())
        copy.deepcopy(model).to(dtype).save_pretrained(os.path.join(d, "model"), safe_serialization=True)
        model.save_pretrained(os.path.join(d, "widened"), safe_serialization=True)
    else:
        shard = {"max_shard_size": "600KB"} if save == "shards" else {}
        model.save_pretrained(os.path.join(d, "model"), safe_serialization=True, **shard)
    gen = torch.Generator().manual_seed(seed + 1000)
    inputs = torch.randint(0, V, (B, T), generator=gen)
    targets = torch.randint(0, V, (B, T), generator=gen)
    model.zero_grad(set_to_none=True)
    logits, loss = loss_of(model, inputs, targets)
    loss.backward()
    tensors = {"logits": logits.detach().contiguous()}
    for pname, p in model.named_parameters():
        tensors["grad." + pname] = p.grad.detach().contiguous()
    save_file(tensors, os.path.join(d, "expected.safetensors"))
    meta = {"B": B, "T": T, "inputs": inputs.flatten().tolist(), "targets": targets.flatten().tolist(),
            "loss": loss.item()}
    if adamw:
        meta["adamw"] = dict(ADAMW, losses=adamw_losses(model, inputs, targets))
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f)
    print(f"{name}: loss {loss.item():.6f}", flush=True)


def main():
    out = sys.argv[1]
    for seed, (name, spec) in enumerate(CASES.items()):
        write_case(out, name, spec, seed)


if __name__ == "__main__":
    main()
