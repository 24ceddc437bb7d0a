#!/usr/bin/env python3
"""hf_check.py: our Hugging Face import and export against the real transformers library (test_hf runs it).

Import: GPT2LMHeadModel checkpoints made by transformers with random weights (several shapes, vocabularies that
are not multiples of 128, fp32 / fp16 / bf16, single-file and sharded saves, GPT2Model's unprefixed names) are
read by build/hf_logits (the trainers' loader + the CPU reference forward pass); its logits must match
transformers' within REL. Checkpoints this model cannot compute (untied lm_head, exact-erf GELU, another
model type) must be refused with the reason.
Export: train_gpt_cpu trains a few steps from an imported checkpoint, ./export_hf writes the run as fp32 and as
sharded bf16, and transformers loads both offline (AutoModelForCausalLM, AutoTokenizer); its logits must match
ours on the same weights within REL, and the tokenizer must encode as GPT-2's does.

REL = 1e-4 of the largest logit, max over positions and vocabulary. Both sides compute in fp32 from the very
same fp32 weights (half-precision checkpoints widen exactly on both sides), so only the order of fp32 sums
differs: about 1e-7 relative per sum, growing with depth and C to well under 1e-5 at these shapes.

usage (repo root, after make export_hf train_gpt_cpu build/hf_logits): python3 test/hf_check.py [work dir]
Prints one line per check and ends with "hf_check: N passed, M failed"; exits 1 on any failure.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel  # noqa: E402

transformers.utils.logging.disable_progress_bar()
REL = 1e-4
TRAIN = "dev/data/tinyshakespeare/tiny_shakespeare_train.bin"
VAL = "dev/data/tinyshakespeare/tiny_shakespeare_val.bin"
results = []


def check(name, ok, detail=""):
    results.append(ok)
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)


def run(args):
    return subprocess.run(args, capture_output=True, text=True, timeout=1800)


def random_model(L, C, NH, T, V, seed):
    torch.manual_seed(seed)
    cfg = GPT2Config(n_layer=L, n_embd=C, n_head=NH, n_positions=T, vocab_size=V,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    m = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # every tensor random (the default init leaves biases 0 and LayerNorm weights 1)
        for name, p in m.named_parameters():
            p.add_(torch.randn_like(p) * (0.1 if ("ln_" in name or name.endswith("bias")) else 0.02))
    return m


def hf_logits(model_path, ids, work):
    out = os.path.join(work, "ours.f32")
    r = run(["build/hf_logits", model_path, out] + [str(i) for i in ids])
    if r.returncode != 0:
        return None, r.stderr.strip()
    return np.fromfile(out, dtype=np.float32).reshape(len(ids), -1), ""


def their_logits(path, ids):
    m = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        return m(torch.tensor([ids])).logits[0].numpy()


def compare(name, ours, theirs, why=""):
    if ours is None:
        check(name, False, "our loader refused it: " + why)
        return
    if ours.shape != theirs.shape:
        check(name, False, f"shapes {ours.shape} vs {theirs.shape}")
        return
    rel = float(np.abs(ours - theirs).max() / np.abs(theirs).max())
    check(name, rel <= REL, f"max |ours - transformers| / max |logit| = {rel:.2e} (bound {REL:.0e})")


def imports(work):
    cases = [  # L, C, NH, T, V, dtype, max_shard_size, unprefixed (GPT2Model's names)
        (2, 64, 4, 32, 1000, torch.float32, None, False),
        (3, 96, 3, 48, 50257, torch.bfloat16, "2MB", False),
        (2, 128, 2, 16, 77, torch.float16, "40KB", False),
        (1, 32, 1, 8, 300, torch.float32, None, True),
    ]
    for k, (L, C, NH, T, V, dtype, shard, bare) in enumerate(cases):
        d = os.path.join(work, f"import{k}")
        m = random_model(L, C, NH, T, V, seed=k)
        kw = {"safe_serialization": True}
        if shard:
            kw["max_shard_size"] = shard
        (m.transformer if bare else m).to(dtype).save_pretrained(d, **kw)
        files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
        ids = [(7 * i + 3) % V for i in range(T)]
        name = f"import L{L} C{C} NH{NH} T{T} V{V} {str(dtype)[6:]} {len(files)} file(s){' unprefixed' if bare else ''}"
        ours, why = hf_logits(d, ids, work)
        theirs = their_logits(d, ids)  # a GPT2Model save loads into GPT2LMHeadModel too, lm_head tied to wte
        compare(name, ours, theirs, why)
        if len(files) == 1:  # the .safetensors path itself works as well as its directory
            ours2, why2 = hf_logits(os.path.join(d, files[0]), ids, work)
            check(name + " (as a .safetensors path)", ours2 is not None and np.array_equal(ours, ours2), why2)
        else:
            ours2, why2 = hf_logits(os.path.join(d, "model.safetensors.index.json"), ids, work)
            check(name + " (as an index path)", ours2 is not None and np.array_equal(ours, ours2), why2)


def refusals(work):
    def refused(name, d, needle):
        r = run(["build/hf_logits", d, os.path.join(work, "x.f32"), "1", "2"])
        lines = r.stderr.strip().splitlines()
        ok = r.returncode == 1 and len(lines) == 1 and needle in lines[0]
        check("refuses " + name, ok, lines[0] if lines else f"exit {r.returncode}, no message")

    base = random_model(1, 32, 2, 8, 100, seed=9)
    d = os.path.join(work, "untied")
    cfg = GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=8, vocab_size=100, tie_word_embeddings=False)
    m = GPT2LMHeadModel(cfg)
    m.save_pretrained(d, safe_serialization=True)
    refused("an untied lm_head", d, "tie_word_embeddings is false")
    d = os.path.join(work, "erf")
    base.config.activation_function = "gelu"
    base.save_pretrained(d, safe_serialization=True)
    refused("exact-erf GELU", d, "activation_function 'gelu'")
    d = os.path.join(work, "other")
    base.config.activation_function = "gelu_new"
    base.save_pretrained(d, safe_serialization=True)
    c = json.load(open(os.path.join(d, "config.json")))
    c["model_type"] = "llama"
    json.dump(c, open(os.path.join(d, "config.json"), "w"))
    refused("another model type", d, "model_type 'llama'")
    d = os.path.join(work, "pickle")
    base.save_pretrained(d, safe_serialization=False)
    refused("a PyTorch pickle", d, "pytorch_model.bin")


def exports(work):
    # a tiny GPT-2 with GPT-2's vocabulary (the shipped shards' ids), trained 4 steps by the CPU trainer from it
    start = os.path.join(work, "start")
    random_model(2, 64, 4, 32, 50257, seed=5).save_pretrained(start, safe_serialization=True)
    run_dir = os.path.join(work, "run")
    r = run(["./train_gpt_cpu", "-e", start, "-b", "2", "-t", "32", "-x", "4", "-v", "0", "-g", "0", "-n", "4",
             "-o", run_dir, "-i", TRAIN, "-j", VAL])
    check("train_gpt_cpu trains 4 steps from a transformers checkpoint", r.returncode == 0,
          r.stderr.strip()[-300:] if r.returncode else "")
    model_bin = os.path.join(run_dir, "model_00000004.bin")
    ids = [464, 3290, 318, 257, 1332, 286, 262, 6641, 13, 50256, 0, 11]  # any ids < V
    ours, why = hf_logits(model_bin, ids, work)
    start_logits, _ = hf_logits(start, ids, work)
    check("training changed the weights", ours is not None and start_logits is not None
          and not np.array_equal(ours, start_logits))
    for name, args in [("fp32, from the run directory", ["-i", run_dir]),
                       ("bf16 in shards, from the model file", ["-i", model_bin, "-d", "bf16", "-s", "3MB"])]:
        out = os.path.join(work, "export_" + name.split(",")[0])
        r = run(["./export_hf"] + args + ["-o", out])
        if r.returncode != 0:
            check("export " + name, False, r.stderr.strip())
            continue
        files = sorted(os.listdir(out))
        shards = [f for f in files if f.endswith(".safetensors")]
        want = {"config.json", "generation_config.json", "vocab.json", "merges.txt", "tokenizer_config.json"}
        check(f"export {name}: {len(shards)} safetensors file(s) and the config and tokenizer files",
              want <= set(files) and len(shards) >= (2 if "shards" in name else 1), " ".join(files))
        theirs = their_logits(out, ids)
        if "bf16" in name:  # the weights were rounded to bf16: compare with our loader of the same files
            ours_bf16, why = hf_logits(out, ids, work)
            compare("export " + name + ": transformers' logits = ours on the exported weights", ours_bf16, theirs, why)
        else:
            compare("export " + name + ": transformers' logits = ours on the trained model file", ours, theirs, why)
        if "bf16" in name:  # each weight is the fp32 export's rounded to nearest even (torch's .to does that)
            from safetensors.torch import load_file
            a, b = {}, {}
            for f in shards:
                a.update(load_file(os.path.join(out, f)))
            b = load_file(os.path.join(work, "export_fp32", "model.safetensors"))
            same = a.keys() == b.keys() and all(torch.equal(a[k], b[k].to(torch.bfloat16)) for k in a)
            check(f"export {name}: every weight is the fp32 export's, rounded to bf16", same, f"{len(a)} tensors")
        tok = AutoTokenizer.from_pretrained(out)
        enc = tok("Hello world")["input_ids"]
        check(f"export {name}: AutoTokenizer encodes as GPT-2", enc == [15496, 995] and tok.eos_token_id == 50256
              and tok.decode(tok("ROMEO: O, she doth teach")["input_ids"]) == "ROMEO: O, she doth teach", str(enc))


def main():
    work = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="hf_check_")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, work dir {work}", flush=True)
    imports(work)
    refusals(work)
    exports(work)
    passed, failed = sum(results), len(results) - sum(results)
    print(f"hf_check: {passed} passed, {failed} failed")
    if failed == 0:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
