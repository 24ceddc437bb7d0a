#!/usr/bin/env python3
"""hf_tokenize.py — text files -> llm.c token shards with a model's own tokenizer.json (Hugging Face
`tokenizers`), as llm.c's data scripts do. Not here: downloading, shuffling, chat data (chat_shards.py).

Documents: each file's text is cut right AFTER every "\\n\\n" (tokenize.cpp's and llm.c's rule), and every
document is preceded by one delimiter token (--doc-token): by default the tokenizer's BOS
(tokenizer_config.json's bos_token, else <|begin_of_text|> or <s> if the vocabulary has it), else
<|endoftext|>. So GPT-2 gets <|endoftext|> (50256) and Llama 3 <|begin_of_text|> (128000), as in llm.c.
Special-token text inside the input (e.g. a literal "<|endoftext|>") is encoded as plain characters, never as
the control token.
Split: the FIRST --val-tokens tokens form <prefix>_val.bin, the rest <prefix>_train.bin.
Shards: a vocabulary of at most 65536 ids gives {20240520, 1, N} + uint16 ids (llm.c's GPT-2 shards), a larger
one {20240801, 7, N} + uint32 ids (llm.c's Llama 3 shards); 256 little-endian int32 header slots.

usage: python dev/data/hf_tokenize.py --tokenizer DIR_or_tokenizer.json --input a.txt [b.txt ...] \\
           --out-prefix DIR/name [--val-tokens 32768] [--doc-token auto|none|TOKEN]
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shard_files import write_together  # noqa: E402 (this folder first)

try:
    import numpy as np  # defines: the header and id arrays written to the shards
except ImportError as e:
    sys.exit(f"error: hf_tokenize.py needs numpy ({e}): pip install numpy transformers tokenizers")

GPT2_MAGIC, GPT2_VERSION = 20240520, 1  # dataloader.h: DATALOADER_MAGIC, uint16 ids
LLAMA3_MAGIC, LLAMA3_VERSION = 20240801, 7  # DATALOADER_MAGIC_U32, uint32 ids


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def load_tokenizer(path):
    """The `tokenizers` Tokenizer of DIR/tokenizer.json or of a tokenizer.json, and the directory's
    tokenizer_config.json as a dict ({} if none)."""
    try:
        from tokenizers import Tokenizer  # defines: Tokenizer.from_file, encode_batch, token_to_id
    except ImportError as e:
        die(f"hf_tokenize.py needs the tokenizers module ({e}): pip install tokenizers")

    file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
    if not os.path.isfile(file):
        die(f"no tokenizer.json at {path}")
    try:
        tok = Tokenizer.from_file(file)
    except Exception as e:  # the library's own message says what is wrong
        die(f"{file}: not a tokenizer.json the `tokenizers` library reads: {e}")
    config = {}
    cfg_file = os.path.join(os.path.dirname(file), "tokenizer_config.json")
    if os.path.isfile(cfg_file):
        try:
            with open(cfg_file, encoding="utf-8") as f:
                config = json.load(f)
        except (OSError, ValueError) as e:
            die(f"{cfg_file}: {e}")
    return tok, config


def token_text(value):
    """A tokenizer_config.json special token: a string or an AddedToken dict."""
    return value.get("content") if isinstance(value, dict) else value


def doc_token(tok, config, choice):
    """The delimiter id before each document, or None (--doc-token none)."""
    if choice == "none":
        return None
    names = [choice] if choice != "auto" else \
        [token_text(config.get("bos_token")), "<|begin_of_text|>", "<s>", "<|endoftext|>"]
    for name in names:
        if name and tok.token_to_id(name) is not None:
            return tok.token_to_id(name)
    die(f"the tokenizer has no token {names[0]!r}" if choice != "auto" else
        "the tokenizer has no BOS, <|begin_of_text|>, <s> or <|endoftext|>: pass --doc-token TOKEN or none")


def vocab_size(tok):
    """Ids run below this: the largest id + 1 (added tokens included)."""
    return max(tok.get_vocab(with_added_tokens=True).values()) + 1


def shard_bytes(path, ids, vocab):
    """One llm.c shard's bytes: uint16 ids if the vocabulary fits 65536, else uint32 (version 7)."""
    if len(ids) > 2**31 - 1:
        die(f"{path}: {len(ids)} tokens do not fit the header's int32 count: split the input")
    wide = vocab > 65536
    header = np.zeros(256, dtype="<i4")
    header[:3] = [LLAMA3_MAGIC, LLAMA3_VERSION, len(ids)] if wide else [GPT2_MAGIC, GPT2_VERSION, len(ids)]
    return header.tobytes() + np.asarray(ids, dtype="<u4" if wide else "<u2").tobytes()


def documents(text):
    """llm.c's cut: after every blank line, the blank line kept with the document it ends."""
    parts = text.split("\n\n")
    return [p + "\n\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def main():
    ap = argparse.ArgumentParser(description="text files -> llm.c token shards with a model's own tokenizer.json, "
                                             "as llm.c's data scripts do (the module's docstring: documents, "
                                             "the delimiter token, the shard format)")
    ap.add_argument("--tokenizer", required=True, help="a directory with tokenizer.json, or the file")
    ap.add_argument("--input", required=True, nargs="+", help="UTF-8 text file(s), read in order")
    ap.add_argument("--out-prefix", required=True, help="writes PREFIX_val.bin and PREFIX_train.bin")
    ap.add_argument("--val-tokens", type=int, default=32768, help="the first N tokens form the val shard")
    ap.add_argument("--doc-token", default="auto", help="token before each document: auto, none or its text")
    a = ap.parse_args()
    if a.val_tokens < 1:
        die(f"--val-tokens wants a count >= 1 (the trainers refuse an empty val shard), got {a.val_tokens}")
    tok, config = load_tokenizer(a.tokenizer)
    tok.encode_special_tokens = True  # "<|endoftext|>" in the text is text
    delim = doc_token(tok, config, a.doc_token)
    vocab = vocab_size(tok)
    t0 = time.time()
    docs, nbytes = [], 0
    for path in a.input:
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as e:
            die(f"cannot read {path}: {e}")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            die(f"{path}: not UTF-8 at byte {e.start}")
        nbytes += len(raw)
        docs += documents(text)
    ids = []
    for enc in tok.encode_batch(docs, add_special_tokens=False):
        if delim is not None:
            ids.append(delim)
        ids += enc.ids
    if a.val_tokens >= len(ids):
        die(f"{len(ids)} tokens: too few for --val-tokens {a.val_tokens} and a non-empty train split")
    # both or neither: a failure (or a symlink there) leaves the old pair, not the new val beside the old train
    write_together({a.out_prefix + "_val.bin": shard_bytes(a.out_prefix + "_val.bin", ids[:a.val_tokens], vocab),
                    a.out_prefix + "_train.bin": shard_bytes(a.out_prefix + "_train.bin", ids[a.val_tokens:],
                                                             vocab)})
    kind = "uint32 (version 7)" if vocab > 65536 else "uint16 (version 1)"
    print(f"{' '.join(a.input)}: {nbytes} bytes, {len(docs)} documents, {len(ids)} tokens "
          f"(incl. one delimiter per document: {delim}) in {time.time() - t0:.2f} s")
    print(f"wrote {a.out_prefix}_val.bin ({a.val_tokens} tokens) and {a.out_prefix}_train.bin "
          f"({len(ids) - a.val_tokens} tokens), {kind} ids, vocabulary {vocab}")


if __name__ == "__main__":
    main()
