#!/usr/bin/env python3
"""make_test_tokenizers.py — test_chat_data's tokenizers, built offline from the shipped GPT-2 files
(dev/data/gpt2: encoder.json = vocab.json, vocab.bpe = merges.txt) with `tokenizers`. Not here: any check.

usage: python test/make_test_tokenizers.py OUT_DIR
writes OUT_DIR/<name>/tokenizer.json (+ tokenizer_config.json):
  gpt2      GPT-2's BPE, <|endoftext|> special; no chat template (chat_shards.py's plain one applies)
  big       gpt2 + 16000 added plain tokens "<w00000>".."<w15999>" (ids 50257..66256): ids past uint16
  chatml    gpt2 + <|im_start|> (50257) and <|im_end|> (50258), a ChatML template with no generation markers
  strict    chatml's tokens, a template that raises on a system message (a template that fails)
  scan      chatml with a first loop over the messages (counting them): chatml's text, but its loop does
            not fetch each message where that message's text begins (chat_shards.py's slow prefix path)
  llama3    gpt2 + <|begin_of_text|> <|start_header_id|> <|end_header_id|> <|eot_id|> (50257..50260), a
            Llama 3 style template (BOS, header tokens, trimmed content) with no generation markers
  bos       llama3 whose post-processor puts <|begin_of_text|> before every text, as Llama 3's own
            tokenizer.json (hellaswag.py's --bos auto)
"""
import json
import os
import sys

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

TURN = "{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>' + '\n' }}"
ASK = "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
CHATML = "{% for m in messages %}" + TURN + "{% endfor %}" + ASK
RAISE = "{{ raise_exception('no system messages here') }}"
NO_SYSTEM = "{% if m['role'] == 'system' %}" + RAISE + "{% endif %}"
STRICT = "{% for m in messages %}" + NO_SYSTEM + TURN + "{% endfor %}" + ASK
SCAN = "{% set n = namespace(k=0) %}{% for m in messages %}{% set n.k = n.k + 1 %}{% endfor %}" + CHATML
HEADER = "'<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n'"
ASK3 = "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
LLAMA3 = ("{{ bos_token }}{% for m in messages %}{{ " + HEADER + " + m['content'] | trim + '<|eot_id|>' }}"
          "{% endfor %}" + ASK3)


def gpt2(root):
    t = Tokenizer(models.BPE.from_file(os.path.join(root, "dev/data/gpt2/encoder.json"),
                                       os.path.join(root, "dev/data/gpt2/vocab.bpe")))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    t.post_processor = processors.ByteLevel(trim_offsets=False)
    t.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
    return t


def save(out, name, tok, config):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"))
    if config is not None:
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1024, **config}
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump(config, f)


def main():
    out, root = sys.argv[1], os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    eot = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}
    save(out, "gpt2", gpt2(root), eot)
    big = gpt2(root)
    big.add_tokens([AddedToken(f"<w{i:05d}>", special=False) for i in range(16000)])
    save(out, "big", big, eot)
    chatml = gpt2(root)
    chatml.add_special_tokens([AddedToken(t, special=True) for t in ("<|im_start|>", "<|im_end|>")])
    save(out, "chatml", chatml, {**eot, "eos_token": "<|im_end|>", "chat_template": CHATML})
    save(out, "strict", chatml, {**eot, "eos_token": "<|im_end|>", "chat_template": STRICT})
    save(out, "scan", chatml, {**eot, "eos_token": "<|im_end|>", "chat_template": SCAN})
    llama3 = gpt2(root)
    names = ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")
    llama3.add_special_tokens([AddedToken(t, special=True) for t in names])
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": LLAMA3}
    save(out, "llama3", llama3, config)
    llama3.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", 50257)])])
    save(out, "bos", llama3, config)
    print(f"tokenizers in {out}: gpt2 big chatml strict scan llama3 bos")


if __name__ == "__main__":
    main()
