#!/usr/bin/env python3
"""sft_e2e.py: the transformers ends of test_sft_trainer's end-to-end runs.

  make OUT   a tiny random GPT-2 as save_pretrained writes it (OUT/gpt2_hf), the model a fine-tune starts from
  chat DIR   loads the exported DIR (model and tokenizer, as a user would), renders a question with the
             tokenizer's chat template and generates a greedy answer; prints the prompt's tail, the number of
             new tokens and the answer on three lines
  qwen OUT   the stand-in for the README's Qwen2.5-0.5B-Instruct: a tiny random Qwen2ForCausalLM (L2 C64 NH4
             KV2, tied, q/k/v biases, V 51200: 941 rows past its tokenizer's ids, more than 1/64, as a small
             model's padding can be) with, in the same directory as on the Hub, a tokenizer: GPT-2's
             BPE + <|im_start|> (50257) <|im_end|> (50258), eos <|im_end|>, and a Qwen2.5-style ChatML template
             that adds a default system prompt; config bos 50256, eos 50258, as Qwen2.5-Instruct's
  eos DIR    loads DIR with transformers (model, tokenizer, generation_config) and prints
             "eos <generation_config's eos ids> end_of_turn <<|im_end|>'s id> new <n>" after a greedy answer of at
             most 8 tokens that stops at those ids
Offline, seeded. usage: python3 test/sft_e2e.py make OUT | chat DIR | qwen OUT | eos DIR
"""
import json
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
import torch  # noqa: E402
from transformers import (AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel,  # noqa: E402
                          Qwen2Config, Qwen2ForCausalLM)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_test_tokenizers as mtt  # noqa: E402  defines: gpt2, save

torch.set_num_threads(2)


SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
QWEN25 = ("{%- if messages[0]['role'] == 'system' %}"
          "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
          "{%- else %}{{- '<|im_start|>system\\n" + SYSTEM + "<|im_end|>\\n' }}{%- endif %}"
          "{%- for m in messages %}{%- if not (m['role'] == 'system' and loop.first) %}"
          "{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' + '\\n' }}"
          "{%- endif %}{%- endfor %}"
          "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def qwen(out):
    from tokenizers import AddedToken
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    tok = mtt.gpt2(root)
    tok.add_special_tokens([AddedToken(t, special=True) for t in ("<|im_start|>", "<|im_end|>")])
    torch.manual_seed(0)
    cfg = Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=51200, max_position_embeddings=512,
                      tie_word_embeddings=True, bos_token_id=50256, eos_token_id=50258)
    Qwen2ForCausalLM(cfg).save_pretrained(out, safe_serialization=True)
    mtt.save(os.path.dirname(out) or ".", os.path.basename(out), tok,
             {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "chat_template": QWEN25})


def eos(d):
    tok = AutoTokenizer.from_pretrained(d)
    model = AutoModelForCausalLM.from_pretrained(d).float().eval()
    g = model.generation_config
    ids = g.eos_token_id if isinstance(g.eos_token_id, list) else ([] if g.eos_token_id is None
                                                                    else [g.eos_token_id])
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                     add_generation_prompt=True, tokenize=False)
    x = tok(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    new = 0
    with torch.no_grad():
        for _ in range(8):
            nxt = int(model(x).logits[0, -1].argmax())
            new += 1
            x = torch.cat([x, torch.tensor([[nxt]])], dim=1)
            if nxt in ids:
                break
    end = tok.convert_tokens_to_ids("<|im_end|>")
    print("eos", json.dumps(ids).replace(" ", ""), "end_of_turn", end, "new", new)


def main():
    if sys.argv[1] == "qwen":
        return qwen(sys.argv[2])
    if sys.argv[1] == "eos":
        return eos(sys.argv[2])
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
