#!/usr/bin/env python3
"""chat_shards.py — a JSONL of conversations -> chat shards (dataloader.h's format) for fine-tuning: tokens,
which of them the model learns to predict, and where each conversation starts, packed into rows of T tokens.
Not here: downloading, shuffling (the loader shuffles rows), the loss (the trainers ignore targets == -1).

Input, one conversation per line (other keys are ignored):
  {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}
  {"instruction": "...", "input": "..." (optional), "output": "...", "system": "..." (optional)}
    -> system (if any), user = instruction, or instruction + "\\n\\n" + input, then assistant = output.
Template: the tokenizer's chat_template (tokenizer_config.json) through transformers' apply_chat_template,
or where it has none (GPT-2), or with --template plain, this one (bos and eos: the tokenizer's, else
<|endoftext|>):
  {bos}<|system|>\\n{content}\\n<|user|>\\n{content}\\n<|assistant|>\\n{content}{eos}<|user|>\\n...
  e.g. GPT-2: <|endoftext|><|user|>\\nHi\\n<|assistant|>\\nHello!<|endoftext|>
Targets: every assistant turn's tokens and its end-of-turn (for the plain template "{content}{eos}"); system,
user and template tokens are not. Found (--mask auto) from the template's {% generation %} markers where it
has them, else by rendering each prefix: the text an assistant turn adds after the prompt that asks for it
(add_generation_prompt) is the turn. With the prefix method each such piece is tokenized on its own, as a
model would generate it after the prompt. Each turn's content must then be found in the decoded targets.
The prefixes' lengths come from one streamed render of the whole conversation (where the template's loop over
the messages fetches each one), checked against real prefix renders of the first, a middle and the last
assistant turn; a template that does not pass is rendered prefix by prefix (quadratic in the turns).
Packing: conversations in file order, end to end in rows of --seq-len T; a row ends with padding when the next
one does not fit. A conversation longer than T is dropped, or with --long split cut into pieces of T (each a
conversation of its own to the loader: a piece's first token is not a target and sees no earlier piece).
Split: the first --val-convs conversations form <prefix>_val.bin, the rest <prefix>_train.bin. Both are
written to temporary files beside them, synced, then renamed into place together; an output path that is a
symbolic link is refused, and the prefix's directory is made if missing.
Errors (bad JSON, an unknown role, an empty conversation, no assistant turn, special-token text in a message,
a template that fails) name the line; all are listed (at most 20) and nothing is written.

Shard (dataloader.h): 256 int32 header {20261126, 1, W, T, R, V, conversations, segments, targets (int64),
pads (int64), split, dropped, S, S special ids (slots 15..30), 0...}, the S special tokens' texts NUL-ended
from byte 128, then R*T ids (uint16 if V <= 65536, W=2, else uint32, W=4), then R*T flag bytes: 1 target,
2 start (of a conversation, of a piece, of the padding), 4 pad. V is the tokenizer's vocabulary and the S
specials are those the shards hold (the template's and the padding): the trainers check both against the model.

usage: python dev/data/chat_shards.py --tokenizer DIR --input chats.jsonl --out-prefix DIR/name --seq-len T \\
           [--val-convs N] [--long drop|split] [--template auto|plain] [--mask auto|generation|prefix]
           [--save-tokenizer DIR]   (the tokenizer with the template used, for export_hf -t DIR)
"""
import argparse
import importlib.util
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shard_files import check_output, write_together  # noqa: E402 (this folder first)

try:
    import numpy as np  # defines: the header, id and flag arrays
except ImportError as e:
    sys.exit(f"error: chat_shards.py needs numpy ({e}): pip install numpy transformers tokenizers jinja2")

CHAT_MAGIC, CHAT_VERSION = 20261126, 1  # dataloader.h: DATALOADER_CHAT_MAGIC
TARGET, START, PAD = 1, 2, 4  # dataloader.h: CHAT_TARGET, CHAT_START, CHAT_PAD
H_SPECIALS, H_SPECIAL_IDS, MAX_SPECIALS = 14, 15, 16  # dataloader.h: CHAT_H_SPECIALS, CHAT_H_SPECIAL_IDS
H_SPECIAL_TEXT = 128  # byte offset of the specials' texts; they end with the 1024-byte header
ROLES = ("system", "user", "assistant")
PLAIN_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n"
    "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}{{ eos_token }}{% endgeneration %}"
    "{% else %}{{ m['content'] }}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
MAX_ERRORS = 20
SAMPLE_TURNS = 3  # the prefix method's real prefix renders per conversation: first, middle, last turn


class Bad(Exception):
    """One line's problem: the message after 'line N: '."""


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def load_tokenizer(path, template):
    """transformers' tokenizer of DIR (tokenizer.json, tokenizer_config.json) and the template to use."""
    try:
        from transformers import AutoTokenizer, PreTrainedTokenizerFast  # defines: apply_chat_template, decode
    except ImportError as e:
        die(f"chat_shards.py needs transformers ({e}): pip install transformers tokenizers jinja2")
    if importlib.util.find_spec("jinja2") is None:  # apply_chat_template renders with it
        die("chat templates need the jinja2 module (pip install jinja2)")
    if os.path.isfile(path) and os.path.basename(path) == "tokenizer.json":
        path = os.path.dirname(path) or "."  # DIR/tokenizer.json: DIR's tokenizer_config.json too
    try:
        if os.path.isfile(os.path.join(path, "tokenizer_config.json")):
            tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        else:  # a bare tokenizer.json, or its directory
            file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
            if os.path.isfile(os.path.join(os.path.dirname(file), "tokenizer_config.json")):
                print(f"note: {file} is read alone: the tokenizer_config.json beside it (chat template, special "
                      "tokens) is not (pass the directory to use it)")
            tok = PreTrainedTokenizerFast(tokenizer_file=file)
    except Exception as e:  # the library's own message says what is wrong
        die(f"cannot load a tokenizer from {path}: {e}")
    if template == "auto" and tok.chat_template:
        if not isinstance(tok.chat_template, str):
            die(f"{path}: several named chat templates: this tool takes one (--template plain)")
        return tok, tok.chat_template
    vocab = tok.get_vocab()
    for name in ("eos_token", "bos_token"):
        if getattr(tok, name) is None:
            if tok.eos_token is None and "<|endoftext|>" not in vocab:
                die(f"{path}: no chat template, and no eos token or <|endoftext|> for the plain one")
            setattr(tok, name, tok.eos_token or "<|endoftext|>")
    return tok, PLAIN_TEMPLATE


def special_ids(tok):
    """Special token text -> id: the tokenizer's named ones and the added ones marked special (Llama 3's)."""
    out = {s: tok.convert_tokens_to_ids(s) for s in tok.all_special_tokens if s}
    out.update({t.content: i for i, t in tok.added_tokens_decoder.items() if t.special and t.content})
    return {s: i for s, i in out.items() if isinstance(i, int)}  # a name the vocabulary lacks: no id


def conversation(obj):
    """The messages of one JSONL object (either form), checked."""
    if not isinstance(obj, dict):
        raise Bad("a conversation is a JSON object with 'messages', or with 'instruction' and 'output'")
    if "messages" in obj:
        msgs = obj["messages"]
        if not isinstance(msgs, list):
            raise Bad("'messages' is not a list")
    elif "instruction" in obj or "output" in obj:
        for key in ("instruction", "output"):
            if not isinstance(obj.get(key), str):
                raise Bad(f"'{key}' is missing or not a string")
        for key in ("input", "system"):
            if key in obj and not isinstance(obj[key], str):
                raise Bad(f"'{key}' is not a string")
        user = obj["instruction"] + ("\n\n" + obj["input"] if obj.get("input") else "")
        msgs = ([{"role": "system", "content": obj["system"]}] if obj.get("system") else []) + \
            [{"role": "user", "content": user}, {"role": "assistant", "content": obj["output"]}]
    else:
        raise Bad("no 'messages', nor 'instruction' and 'output'")
    if not msgs:
        raise Bad("an empty conversation")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise Bad(f"message {i} is not an object with 'role' and 'content'")
        if m.get("role") not in ROLES:
            raise Bad(f"message {i} has the unknown role {m.get('role')!r} (want system, user or assistant)")
        if not isinstance(m.get("content"), str):
            raise Bad(f"message {i}'s content is missing or not a string")
        try:
            m["content"].encode("utf-8")
        except UnicodeEncodeError as e:  # JSON's "\ud800": half of a UTF-16 pair, no character
            raise Bad(f"message {i}'s content has a lone surrogate \\u{ord(m['content'][e.start]):04x} at "
                      f"character {e.start}: not text")
    if not any(m["role"] == "assistant" for m in msgs):
        raise Bad("no assistant message: nothing to learn")
    return [{"role": m["role"], "content": m["content"]} for m in msgs]


RENDERS = [0]  # the prefix method's renders of a conversation or prefix, the streamed one included


def render(tok, template, msgs, gen):
    RENDERS[0] += 1
    try:
        return tok.apply_chat_template(msgs, chat_template=template, tokenize=False,
                                       add_generation_prompt=gen)
    except Exception as e:  # jinja's raise_exception, a syntax error, a missing key
        raise Bad(f"the chat template failed: {type(e).__name__}: {e}")


def ids_of(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"] if text else []


def encode_generation(tok, template, msgs):
    """Ids and target mask from the template's {% generation %} markers."""
    try:
        out = tok.apply_chat_template(msgs, chat_template=template, tokenize=True, return_dict=True,
                                      return_assistant_tokens_mask=True)
    except Exception as e:
        raise Bad(f"the chat template failed: {type(e).__name__}: {e}")
    return list(out["input_ids"]), [bool(x) for x in out["assistant_masks"]]


class Fetched(list):
    """The messages, noting how much text the template had rendered when its loop fetched each one."""

    def __init__(self, msgs):
        super().__init__(msgs)
        self.rendered, self.at = 0, [None] * len(msgs)  # rendered: characters so far (the caller counts)

    def __iter__(self):
        for k, m in enumerate(list.__iter__(self)):
            if self.at[k] is None:
                self.at[k] = self.rendered
            yield m


def streamed_lengths(tok, template, msgs, full):
    """len(render(msgs[:k])) for k = 1..n, read off one streamed render of all of msgs: where the template's
    loop fetched message k. None if the stream is not the render, or a message was not fetched in order."""
    from transformers.utils.chat_template_utils import _compile_jinja_template  # apply_chat_template's
    out = []
    seen = Fetched(msgs)
    RENDERS[0] += 1
    try:
        for piece in _compile_jinja_template(template).generate(
                messages=seen, tools=None, documents=None, add_generation_prompt=False,
                **tok.special_tokens_map):
            out.append(piece)
            seen.rendered += len(piece)
    except Exception:
        return None
    if "".join(out) != full or None in seen.at or seen.at != sorted(seen.at):
        return None
    return seen.at[1:] + [len(full)]


def prefix_bounds_fast(tok, template, msgs, full, turns):
    """(prompt end, turn end) of each assistant turn from one streamed render; None: not this template."""
    R = streamed_lengths(tok, template, msgs, full)  # R[k - 1] = len(render(msgs[:k]))
    if R is None:
        return None
    picks = sorted(set(turns[j * (len(turns) - 1) // max(1, SAMPLE_TURNS - 1)] for j in range(SAMPLE_TURNS)))
    gen = None  # the generation prompt: what render(msgs[:i], True) adds to render(msgs[:i])
    for i in picks:  # real prefix renders: the streamed lengths must agree
        prompt, upto = render(tok, template, msgs[:i], True), render(tok, template, msgs[:i + 1], False)
        if upto != full[:R[i]] or not prompt.startswith(full[:R[i - 1]]):
            return None
        if gen is None:
            gen = prompt[R[i - 1]:]
        if prompt[R[i - 1]:] != gen:
            return None
    bounds = []
    for i in turns:
        start = R[i - 1] + len(gen)
        if full[R[i - 1]:start] != gen or start > R[i]:
            return None
        bounds.append((start, R[i]))
    return bounds


def prefix_bounds_slow(tok, template, msgs, full, turns):
    """(prompt end, turn end) of each assistant turn from real renders of its two prefixes."""
    bounds = []
    for i in turns:
        prompt, upto = render(tok, template, msgs[:i], True), render(tok, template, msgs[:i + 1], False)
        if not (full.startswith(prompt) and full.startswith(upto) and upto.startswith(prompt)):
            raise Bad(f"the chat template does not render message {i} as a continuation of the ones before "
                      "(it rewrites earlier turns): this tool cannot find the turn's tokens")
        bounds.append((len(prompt), len(upto)))
    return bounds


def encode_prefix(tok, template, msgs, stats):
    """Ids and target mask by rendering prefixes: assistant turn i is what msgs[:i+1] adds to the prompt
    msgs[:i] + the generation prompt; the pieces between turns are the non-targets."""
    turns = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
    if turns[0] == 0:
        raise Bad("message 0 is an assistant turn with no prompt before it: the prefix method needs a user "
                  "(or system) turn first")
    full = render(tok, template, msgs, False)
    bounds = prefix_bounds_fast(tok, template, msgs, full, turns)
    if bounds is None:
        stats["slow"] += 1
        bounds = prefix_bounds_slow(tok, template, msgs, full, turns)
    ids, mask, at = [], [], 0
    for i, (prompt, upto) in zip(turns, bounds):
        if prompt < at:
            raise Bad(f"the chat template does not render message {i} as a continuation of the ones before "
                      "(it rewrites earlier turns): this tool cannot find the turn's tokens")
        for text, target in ((full[at:prompt], False), (full[prompt:upto], True)):
            piece = ids_of(tok, text)
            ids += piece
            mask += [target] * len(piece)
        at = upto
    piece = ids_of(tok, full[at:])
    return ids + piece, mask + [False] * len(piece)


def encode(tok, template, msgs, method, specials, stats):
    """A conversation's ids and target mask, the mask checked against each assistant turn's content."""
    for i, m in enumerate(msgs):
        for s in sorted(specials):
            if s in m["content"]:
                raise Bad(f"message {i} contains the special token text {s!r}: it would read as that token")
    if method == "generation":
        ids, mask = encode_generation(tok, template, msgs)
    else:
        ids, mask = encode_prefix(tok, template, msgs, stats)
    if not ids:
        raise Bad("the chat template rendered nothing")
    decoded = tok.decode([t for t, m in zip(ids, mask) if m], skip_special_tokens=False)
    at = 0
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        found = decoded.find(m["content"].strip(), at)
        if found < 0:
            raise Bad(f"message {i}'s content is not among the target tokens the template's mask gives")
        at = found + len(m["content"].strip())
    if mask[0]:
        raise Bad("the conversation's first token is a target (nothing before the first assistant turn?)")
    return ids, mask


class Packer:
    """Rows of T tokens: whole conversations end to end, then padding."""

    def __init__(self, T, pad_id, long_mode):
        self.T, self.pad_id, self.long = T, pad_id, long_mode
        self.rows, self.row, self.flags = [], [], []
        self.convs = self.segments = self.targets = self.pads = self.split = self.dropped = 0

    def flush(self):
        if not self.row:
            return
        n = self.T - len(self.row)
        if n:
            self.row += [self.pad_id] * n
            self.flags += [PAD | START] + [PAD] * (n - 1)
            self.pads += n
        self.rows.append((self.row, self.flags))
        self.row, self.flags = [], []

    def add(self, ids, mask):
        T = self.T
        if len(ids) > T:
            if self.long == "drop":
                self.dropped += 1
                return
            self.split += 1
        self.convs += 1
        for s in range(0, len(ids), T):  # one piece unless split
            piece, pmask = ids[s:s + T], mask[s:s + T]
            if len(self.row) + len(piece) > T:
                self.flush()
            flags = [START] + [TARGET if m else 0 for m in pmask[1:]]
            self.row += piece
            self.flags += flags
            self.segments += 1
            self.targets += sum(1 for f in flags if f & TARGET)
        if len(self.row) == T:
            self.flush()

    def ids(self):
        return set(t for r, _ in self.rows for t in r)

    def shard(self, vocab, specials):
        """The shard's bytes: header, ids, flags."""
        self.flush()
        wide = vocab > 65536
        R = len(self.rows)
        h = np.zeros(256, dtype="<i4")
        h[:8] = [CHAT_MAGIC, CHAT_VERSION, 4 if wide else 2, self.T, R, vocab, self.convs, self.segments]
        h[8:12] = np.array([self.targets, self.pads], dtype="<i8").view("<i4")
        h[12:14] = [self.split, self.dropped]
        h[H_SPECIALS] = len(specials)
        h[H_SPECIAL_IDS:H_SPECIAL_IDS + len(specials)] = [i for i, _ in specials]
        head = bytearray(h.tobytes())
        text = b"".join(s.encode("utf-8") + b"\0" for _, s in specials)
        head[H_SPECIAL_TEXT:H_SPECIAL_TEXT + len(text)] = text
        ids = np.array([t for r, _ in self.rows for t in r], dtype="<u4" if wide else "<u2")
        flags = np.array([f for _, fl in self.rows for f in fl], dtype=np.uint8)
        return bytes(head) + ids.tobytes() + flags.tobytes()

    def summary(self, name):
        return (f"{name}: {self.convs} conversations, {len(self.rows)} rows of {self.T}, "
                f"{len(self.rows) * self.T} tokens, {self.targets} target tokens, {self.pads} padding, "
                f"{self.split} split, {self.dropped} dropped")


def recorded_specials(specials, used):
    """(id, text) of the special tokens the shards hold, by id: as many as the header has room for."""
    out, room = [], 1024 - H_SPECIAL_TEXT
    for text, i in sorted(specials.items(), key=lambda x: x[1]):
        if i in used and len(out) < MAX_SPECIALS and len(text.encode("utf-8")) + 1 <= room:
            out.append((i, text))
            room -= len(text.encode("utf-8")) + 1
    return out


def main():
    ap = argparse.ArgumentParser(description="a JSONL of conversations -> chat shards for fine-tuning (the module's "
                                             "docstring: the template, targets, packing and shard format)")
    ap.add_argument("--tokenizer", required=True, help="a directory with tokenizer.json")
    ap.add_argument("--input", required=True, help="JSONL, one conversation per line")
    ap.add_argument("--out-prefix", required=True, help="writes PREFIX_val.bin and PREFIX_train.bin")
    ap.add_argument("--seq-len", type=int, required=True, help="T: the rows' length; the run's -t equals it")
    ap.add_argument("--val-convs", type=int, help="the first N conversations: val (default 10%%)")
    ap.add_argument("--long", choices=("drop", "split"), default="drop",
                    help="a conversation longer than T: dropped (default) or cut into pieces of T")
    ap.add_argument("--template", choices=("auto", "plain"), default="auto", help="the tokenizer's, or plain")
    ap.add_argument("--mask", choices=("auto", "generation", "prefix"), default="auto",
                    help="how the targets are found (auto: generation markers if the template has them)")
    ap.add_argument("--save-tokenizer", metavar="DIR",
                    help="also write the tokenizer with the template used (export_hf -t DIR puts it beside the model)")
    ap.error = lambda msg: die(f"{msg} (python3 dev/data/chat_shards.py -h for the flags)")  # one line
    a = ap.parse_args()
    if a.seq_len < 2:
        die(f"--seq-len wants T >= 2, got {a.seq_len}")
    if a.val_convs is not None and a.val_convs < 1:
        die(f"--val-convs wants a count >= 1, got {a.val_convs} (leave it out for 10%)")
    if a.save_tokenizer and os.path.exists(a.save_tokenizer) and not os.path.isdir(a.save_tokenizer):
        die(f"--save-tokenizer {a.save_tokenizer}: exists and is not a directory")
    if a.save_tokenizer:  # before any shard is written: the folder made, and a file written in it
        try:
            os.makedirs(a.save_tokenizer, exist_ok=True)
            with tempfile.TemporaryFile(dir=a.save_tokenizer):
                pass
        except OSError as e:
            die(f"--save-tokenizer {a.save_tokenizer}: {e.strerror}")
    outputs = {name: f"{a.out_prefix}_{name}.bin" for name in ("val", "train")}
    for path in outputs.values():  # before the work, as well as at the end
        check_output(path)
    tok, template = load_tokenizer(a.tokenizer, a.template)
    try:  # a template that does not compile is the tokenizer's fault, said once (not once a line)
        from transformers.utils.chat_template_utils import _compile_jinja_template
        _compile_jinja_template(template)
    except ImportError:
        pass
    except Exception as e:
        die(f"{a.tokenizer}: its chat template does not compile: {type(e).__name__}: {e}")
    markers = re.search(r"\{%-?\s*generation\s*-?%\}", template) is not None
    method = a.mask if a.mask != "auto" else ("generation" if markers else "prefix")
    if method == "generation" and not markers:
        die("--mask generation: the chat template has no {% generation %} markers (use --mask prefix)")
    try:
        with open(a.input, "rb") as f:
            lines = f.read().split(b"\n")
    except OSError as e:
        die(f"cannot read {a.input}: {e.strerror}")
    if lines and lines[-1] == b"":
        lines.pop()  # the file's final newline
    specials = special_ids(tok)
    convs, errors, stats = [], [], {"slow": 0}
    for n, raw in enumerate(lines, 1):
        try:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise Bad(f"not UTF-8 at byte {e.start}")
            if not text.strip():
                raise Bad("an empty line (one conversation per line)")
            try:
                obj = json.loads(text)
            except ValueError as e:
                raise Bad(f"not JSON ({e})")
            except RecursionError:
                raise Bad("not JSON this tool reads: nested deeper than Python's json module goes")
            convs.append(encode(tok, template, conversation(obj), method, specials, stats))
        except Bad as e:
            errors.append(f"{a.input}:{n}: {e}")
        except Exception as e:  # the tokenizer's or the template's library: still one line
            errors.append(f"{a.input}:{n}: cannot encode the conversation: {type(e).__name__}: {e}")
    for e in errors[:MAX_ERRORS]:
        print(f"error: {e}", file=sys.stderr)
    if errors:
        more = f" ({len(errors) - MAX_ERRORS} more not shown)" if len(errors) > MAX_ERRORS else ""
        die(f"{len(errors)} bad line(s) in {a.input}{more}: nothing written")
    if len(convs) < 2:
        die(f"{a.input}: {len(convs)} conversation(s): a val and a train split need at least 2")
    nval = a.val_convs if a.val_convs is not None else max(1, (len(convs) + 5) // 10)  # 10%, rounded half up
    if not 1 <= nval < len(convs):
        die(f"--val-convs {nval}: want 1 to {len(convs) - 1} for {len(convs)} conversations")
    vocab = max(tok.get_vocab().values()) + 1
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.convert_tokens_to_ids(tok.eos_token)
    if pad_id is None:
        pad_id = 0
    parts = {}
    for name, chunk in (("val", convs[:nval]), ("train", convs[nval:])):
        p = Packer(a.seq_len, pad_id, a.long)
        for ids, mask in chunk:
            p.add(ids, mask)
        p.flush()
        if not p.rows:
            die(f"{name}: every conversation is longer than --seq-len {a.seq_len} and was dropped: "
                "nothing to write (--long split keeps them)")
        parts[name] = p
    recorded = recorded_specials(specials, set().union(*(p.ids() for p in parts.values())))
    write_together({outputs[name]: p.shard(vocab, recorded) for name, p in parts.items()})
    for name, p in parts.items():
        print(p.summary(name))
    t = {k: sum(getattr(p, k) for p in parts.values()) for k in ("convs", "targets", "split", "dropped")}
    tokens = sum(len(p.rows) * a.seq_len for p in parts.values())
    print(f"total: {t['convs']} conversations, {tokens} tokens, {t['targets']} target tokens, "
          f"{t['split']} split, {t['dropped']} dropped")
    which = "plain" if template == PLAIN_TEMPLATE else "the tokenizer's"
    print(f"template {which}, targets by {method}, {'uint32' if vocab > 65536 else 'uint16'} ids "
          f"(vocabulary {vocab}), special tokens recorded: {' '.join(f'{i}={s}' for i, s in recorded)}")
    if method == "prefix":  # a few renders each, unless the template is not a loop over the messages
        why = (" (the template's text for a prefix is not where its loop fetches the next message: slow for "
               "long conversations)") if stats['slow'] else ""
        print(f"prefix method: {RENDERS[0]} template renders for {t['convs'] + t['dropped']} "
              f"conversations, {stats['slow']} of them rendered prefix by prefix{why}")
    if a.save_tokenizer:  # the template the shards were made with, so the fine-tuned model chats in it
        tok.chat_template = template
        try:
            tok.save_pretrained(a.save_tokenizer)
        except OSError as e:
            die(f"--save-tokenizer {a.save_tokenizer}: {e}")
        print(f"tokenizer with the {which} template: {a.save_tokenizer}")
    elif template != getattr(tok, "chat_template", None):  # found at the end otherwise, in transformers
        print(f"warning: the tokenizer lacks the template these shards use ({which}): add --save-tokenizer "
              "DIR and export with export_hf -t DIR, or the fine-tuned model has no template to chat in",
              file=sys.stderr)


if __name__ == "__main__":
    main()
