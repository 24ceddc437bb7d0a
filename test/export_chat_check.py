#!/usr/bin/env python3
"""export_chat_check.py: does an export_hf checkpoint of a chat model stop generating at its end of turn in
transformers? (test_hf's ExportedChatModelStopsAtItsEndOfTurn)

`make OUT` writes
  OUT/tok/    a ChatML tokenizer: GPT-2's BPE, <|endoftext|> (50256, its eos and bos, as a base model's),
              <|im_start|> (50257), <|im_end|> (50258, the template's end of turn, not the tokenizer's eos)
  OUT/model/  a tiny LlamaForCausalLM (V 50304) whose greedy choice is always <|im_end|>: every embedding has
              channel 0 at 50, the final norm keeps only channel 0, and lm_head reads it into <|im_end|>'s row
              alone. Its config says eos 50256, its generation_config.json eos 50256 and temperature 0.7.
`generate DIR` loads DIR with AutoModelForCausalLM, renders a question with the chat template, and decodes
greedily as generate() does (it stops at generation_config's eos_token_id; generate() itself imports
torch.distributed, broken in Debian's torch 1.13), at most 20 new tokens. It prints
  new <count> last <id> eos <eos ids> temperature <t>

usage: python3 test/export_chat_check.py make OUT
       python3 test/export_chat_check.py generate DIR
"""
import json
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_test_tokenizers as mtt  # noqa: E402  defines: gpt2, save, CHATML

torch.set_num_threads(2)
IM_END = 50258


def make(out):
    from tokenizers import AddedToken
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    tok = mtt.gpt2(root)
    tok.add_special_tokens([AddedToken(t, special=True) for t in ("<|im_start|>", "<|im_end|>")])
    mtt.save(out, "tok", tok, {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
                               "chat_template": mtt.CHATML})
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=50304, max_position_embeddings=128,
                      tie_word_embeddings=False, bos_token_id=50256, eos_token_id=50256)
    model = LlamaForCausalLM(cfg).float().eval()
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 50.0
        model.model.norm.weight.zero_()
        model.model.norm.weight[0] = 1.0
        model.lm_head.weight.zero_()
        model.lm_head.weight[IM_END, 0] = 1.0
    model.generation_config.temperature = 0.7
    model.generation_config.do_sample = True
    model.save_pretrained(os.path.join(out, "model"), safe_serialization=True)
    print("made", out)


def generate(d):
    tok = AutoTokenizer.from_pretrained(d)
    model = AutoModelForCausalLM.from_pretrained(d).float().eval()
    g = model.generation_config
    eos = g.eos_token_id if isinstance(g.eos_token_id, list) else ([] if g.eos_token_id is None
                                                                   else [g.eos_token_id])
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                     add_generation_prompt=True, tokenize=False)
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    new = []
    with torch.no_grad():
        for _ in range(20):
            nxt = int(model(ids).logits[0, -1].argmax())
            new.append(nxt)
            ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
            if nxt in eos:
                break
    print("new", len(new), "last", new[-1], "eos", json.dumps(eos).replace(" ", ""), "temperature",
          g.temperature)


if __name__ == "__main__":
    {"make": make, "generate": generate}[sys.argv[1]](sys.argv[2])
