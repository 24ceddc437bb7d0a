#!/usr/bin/env python3
"""sft_e2e.py: the two transformers ends of test_sft_trainer's end-to-end run.

  make OUT   a tiny random GPT-2 as save_pretrained writes it (OUT/gpt2_hf), the model a fine-tune starts from
  chat DIR   loads the exported DIR (model and tokenizer, as a user would), renders a question with the
             tokenizer's chat template and generates a greedy answer; prints the prompt's tail, the number of
             new tokens and the answer on three lines
Offline, seeded. usage: python3 test/sft_e2e.py make OUT | chat DIR
"""
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel  # noqa: E402

torch.set_num_threads(2)


def main():
    if sys.argv[1] == "make":
        torch.manual_seed(0)
        cfg = GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=128, vocab_size=50257)
        GPT2LMHeadModel(cfg).save_pretrained(os.path.join(sys.argv[2], "gpt2_hf"), safe_serialization=True)
        return
    d = sys.argv[2]
    tok = AutoTokenizer.from_pretrained(d)
    model = AutoModelForCausalLM.from_pretrained(d).eval()
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                     add_generation_prompt=True, tokenize=False)
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    new = []
    with torch.no_grad():  # greedy, by hand: generate() imports torch.distributed, broken in Debian's torch 1.13
        for _ in range(12):
            nxt = int(model(ids).logits[0, -1].argmax())
            new.append(nxt)
            ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
            if nxt == tok.eos_token_id:
                break
    print(repr(prompt[-16:]))
    print(len(new))
    print(repr(tok.decode(new)))


if __name__ == "__main__":
    main()
