#!/usr/bin/env python3
"""hellaswag.py — HellaSwag's JSONL -> the eval file the trainers' -h reads (llmc/evalloader.h), as llm.c's
dev/data/hellaswag.py writes it. Not here: the download (no network at run time): fetch
hellaswag_val.jsonl yourself, e.g. from https://github.com/rowanz/hellaswag (data/hellaswag_val.jsonl).

Each line: {"ctx": "...", "endings": [4 strings], "label": 0..3} (HellaSwag's fields; other fields are
ignored). The context is encoded as it is, each ending with one space before it (" " + ending), as llm.c.
Tokenizer: `gpt2` (the default: dev/data/gpt2's vocabulary and merges, GPT-2's BPE) or a model's
tokenizer.json / its directory (Llama 3, Qwen2.5). Special-token text in the data is encoded as text.
--bos auto (the default) puts before each context what the tokenizer puts before a text (Llama 3's
<|begin_of_text|>, as the model saw in training; nothing for GPT-2, as llm.c, or Qwen2.5); --bos none: nothing.
A vocabulary of at most 65535 ids gives uint16 ids (magic 20240522, version 1: llm.c's file; 65535 is the
example delimiter), a larger one uint32 ids (magic 20240802, version 7: this project's variant).

usage: python dev/data/hellaswag.py --input hellaswag_val.jsonl
           [--out dev/data/hellaswag/hellaswag_val.bin] [--tokenizer gpt2|DIR|tokenizer.json] [--bos auto|none]
           [--limit N]
"""
import argparse
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
U16 = (20240522, 1)  # llmc/evalloader.h: EVAL_MAGIC_U16, EVAL_VERSION_U16
U32 = (20240802, 7)  # EVAL_MAGIC_U32, EVAL_VERSION_U32


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def load_tokenizer(name):
    """encode(text) -> ids, the vocabulary's size (largest id + 1), and the ids the tokenizer puts before a
    text (its post-processor's, e.g. Llama 3's <|begin_of_text|>; [] if it puts none or puts them elsewhere)."""
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # defines: GPT-2's BPE pieces
    except ImportError as e:
        die(f"hellaswag.py needs the tokenizers module ({e}): pip install tokenizers")
    if name == "gpt2":  # GPT-2's byte-level BPE from the vendored files, as transformers' GPT2TokenizerFast
        tok = Tokenizer(models.BPE.from_file(os.path.join(HERE, "gpt2", "encoder.json"),
                                             os.path.join(HERE, "gpt2", "vocab.bpe")))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
    else:  # a model's tokenizer.json, read and checked as hf_tokenize.py reads it
        sys.path.insert(0, HERE)
        from hf_tokenize import load_tokenizer as load_tokenizer_json  # defines: (Tokenizer, config) of a path
        tok = load_tokenizer_json(name)[0]
    tok.encode_special_tokens = True  # "<|endoftext|>" in the text is text, as hf_tokenize.py
    vocab = max(tok.get_vocab(with_added_tokens=True).values()) + 1
    encode = lambda text: tok.encode(text, add_special_tokens=False).ids  # noqa: E731
    added = tok.encode("a", add_special_tokens=True).ids
    plain = encode("a")
    bos = added[:len(added) - len(plain)] if added[len(added) - len(plain):] == plain else []
    return encode, vocab, bos


def examples(path, limit):
    """(line number, ctx, endings, label) of each line, checked; at most `limit` examples."""
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        die(f"cannot open {path}: {e.strerror}")
    count = 0
    with f:
        n = 0
        while limit is None or count < limit:
            try:
                line = f.readline()
            except UnicodeDecodeError as e:
                die(f"{path}:{n + 1}: not UTF-8 text ({e.reason})")
            if not line:
                return
            n += 1
            if not line.strip():
                continue
            try:
                ex = json.loads(line)
                ctx, endings, label = ex["ctx"], ex["endings"], ex["label"]
            except ValueError as e:
                die(f"{path}:{n}: not JSON ({e})")
            except (KeyError, TypeError) as e:
                hint = " (HellaSwag's test split has no labels: use the validation split)" if "label" in str(e) else ""
                die(f"{path}:{n}: not a HellaSwag line: no {e}{hint}")
            if isinstance(label, str) and label.isdigit():
                label = int(label)
            if not isinstance(ctx, str) or not isinstance(endings, list) or len(endings) != 4 \
                    or not all(isinstance(x, str) for x in endings) or isinstance(label, bool) \
                    or not isinstance(label, int) or not 0 <= label < 4:
                die(f"{path}:{n}: want a string ctx, 4 string endings and a label 0..3")
            count += 1
            yield n, ctx, endings, label


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--input", required=True, help="HellaSwag JSONL (e.g. hellaswag_val.jsonl)")
    ap.add_argument("--out", default="dev/data/hellaswag/hellaswag_val.bin")
    ap.add_argument("--tokenizer", default="gpt2", help="gpt2, or a model's tokenizer.json or its directory")
    ap.add_argument("--bos", choices=["auto", "none"], default="auto",
                    help="auto: what the tokenizer puts before a text, before each context; none: nothing")
    ap.add_argument("--limit", type=int, default=None, help="the first N examples only")
    args = ap.parse_args()
    if args.limit is not None and args.limit < 1:
        die(f"--limit {args.limit}: want 1 or more examples")
    encode, vocab, bos = load_tokenizer(args.tokenizer)
    if args.bos == "none":
        bos = []
    (magic, version), fmt, top = (U16, "<H", 0xFFFF) if vocab <= 0xFFFF else (U32, "<I", 0xFFFFFFFF)
    width = struct.calcsize(fmt)
    body, longest, count = [], 0, 0
    for i, (line, ctx, endings, label) in enumerate(examples(args.input, args.limit)):
        if i >= top:
            die(f"{args.input}: more than {top} examples do not fit uint16 indices: --limit {top}")
        parts = [bos + encode(ctx)] + [encode(" " + e) for e in endings]
        if any(len(p) == 0 for p in parts):
            die(f"{args.input}:{line}: an empty context or ending")
        words = [top, 0, i, label, 4]
        for p in parts:
            words += [len(p)] + p
        words[1] = len(words) * width
        if words[1] > top:
            die(f"{args.input}:{line}: {words[1]} bytes do not fit an example's uint16 byte count")
        longest = max(longest, words[1])
        body.append(struct.pack(f"<{len(words)}{fmt[1]}", *words))
        count = i + 1
    if count == 0:
        die(f"{args.input}: no examples")
    header = struct.pack("<256i", magic, version, count, longest, *([0] * 252))
    if os.path.isdir(args.out) or args.out.endswith(os.sep):
        die(f"--out {args.out}: a directory; name the file (e.g. {os.path.join(args.out, 'hellaswag_val.bin')})")
    tmp = args.out + ".tmp"
    try:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(header)
            for b in body:
                f.write(b)
        os.replace(tmp, args.out)
    except OSError as e:
        if os.path.isfile(tmp):
            os.remove(tmp)
        die(f"cannot write {args.out}: {e.strerror}")
    print(f"{args.out}: {count} example{'s' if count != 1 else ''}, {'uint16' if width == 2 else 'uint32'} ids, longest example "
          f"{longest} bytes{f', each context after {bos}' if bos else ''}")


if __name__ == "__main__":
    main()
