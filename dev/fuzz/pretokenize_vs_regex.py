#!/usr/bin/env python3
# pretokenize_vs_regex.py — differential check of gpt2_bpe.h against GPT-2's own encoder: its pre-tokenizer
# (hand-coded) against GPT-2's regex run by the `regex` module, and its token ids against OpenAI's encoder.py
# algorithm (restated below: byte-to-unicode map, lowest-rank merge first, over dev/data/gpt2's vocabulary).
# Random strings built from the characters where the rules are subtle (spaces of every kind, newlines,
# apostrophes and contractions, letters and numbers of several scripts, combining marks, U+001C..U+001F, emoji)
# plus random assigned code points; every difference printed. It compiles a small shim of gpt2_bpe.h with g++
# and calls it through ctypes.
# Not in `make test` (it needs Debian's python3-regex: apt-get install python3-regex); prints one summary line,
# exit 1 on any difference. Only code points that the Python running it knows (unicodedata) are drawn, so the two
# Unicode versions (the table's and the regex module's) agree on them; a difference in class between them is
# reported as such, not as a pre-tokenizer bug.
#
# usage (repo root): /usr/bin/python3 dev/fuzz/pretokenize_vs_regex.py [strings, default 200000] [seed]
import ctypes
import json
import os
import random
import subprocess
import sys
import tempfile
import unicodedata

import regex

PAT = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")

SHIM = r"""
#include "dev/data/gpt2_bpe.h"
extern "C" int pretokenize(const char* s, size_t n, size_t* ends, int max) {
    std::vector<std::pair<size_t, size_t>> p;
    gpt2_pretokenize(std::string(s, n), &p);
    int k = 0;
    for (auto& r : p) { if (k < max) ends[k] = r.second; k++; }
    return k;
}
static GPT2BPE bpe;
extern "C" int load(void) {
    std::string err;
    return gpt2_bpe_load(&bpe, "dev/data/gpt2/encoder.json", "dev/data/gpt2/vocab.bpe", &err) ? 1 : 0;
}
extern "C" int encode(const char* s, size_t n, int* ids, int max) {
    const std::vector<int> v = gpt2_bpe_encode(&bpe, std::string(s, n));
    for (size_t i = 0; i < v.size() && (int)i < max; i++) ids[i] = v[i];
    return (int)v.size();
}
"""

def build_shim(tmp):
    src, lib = os.path.join(tmp, "shim.cpp"), os.path.join(tmp, "shim.so")
    with open(src, "w") as f:
        f.write(SHIM)
    subprocess.run(["g++", "-O2", "-std=c++17", "-shared", "-fPIC", "-I.", src, "-o", lib], check=True)
    so = ctypes.CDLL(lib)
    so.pretokenize.restype = ctypes.c_int
    so.pretokenize.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]
    so.encode.restype = ctypes.c_int
    so.encode.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    if so.load() != 1:
        sys.exit("pretokenize_vs_regex: cannot load dev/data/gpt2 (run from the repo root)")
    return so

def ours(so, text):
    b = text.encode("utf-8")
    ends = (ctypes.c_size_t * (len(b) + 1))()
    k = so.pretokenize(b, len(b), ends, len(b) + 1)
    out, start = [], 0
    for i in range(k):
        out.append(b[start:ends[i]].decode("utf-8"))
        start = ends[i]
    return out

def our_ids(so, text):
    b = text.encode("utf-8")
    ids = (ctypes.c_int * (len(b) + 1))()
    k = so.encode(b, len(b), ids, len(b) + 1)
    return list(ids[:k])

# OpenAI's encoder.py, restated: bytes -> printable unicode characters, then merges by rank
def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + list(range(ord("\xae"), ord("\xff") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))

class Reference:
    def __init__(self):
        with open("dev/data/gpt2/encoder.json", encoding="utf-8") as f:
            self.encoder = json.load(f)
        with open("dev/data/gpt2/vocab.bpe", encoding="utf-8") as f:
            merges = [tuple(line.split()) for line in f.read().split("\n")[1:] if line]
        self.ranks = dict(zip(merges, range(len(merges))))
        self.byte_encoder = bytes_to_unicode()
        self.cache = {}

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = tuple(token)
        while len(word) > 1:
            pairs = set(zip(word, word[1:]))
            best = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if best not in self.ranks:
                break
            first, second = best
            new, i = [], 0
            while i < len(word):
                if i < len(word) - 1 and word[i] == first and word[i + 1] == second:
                    new.append(first + second)
                    i += 2
                else:
                    new.append(word[i])
                    i += 1
            word = tuple(new)
        self.cache[token] = word
        return word

    def encode(self, text):
        ids = []
        for piece in PAT.findall(text):
            token = "".join(self.byte_encoder[b] for b in piece.encode("utf-8"))
            ids.extend(self.encoder[t] for t in self.bpe(token))
        return ids

# the characters where the rules are subtle
SPACES = [" ", " ", " ", "\n", "\t", "\r", "\x0b", "\x0c", "\x85", "\xa0", "\u1680", "\u2000", "\u2028", "\u2029",
          "\u202f", "\u3000", "\x1c", "\x1f", "\u200b", "\ufeff"]
LETTERS = ["a", "s", "t", "m", "d", "r", "e", "v", "l", "S", "T", "x", "\xe9", "\u0436", "\u65e5", "\u05d0",
           "\u0e01", "\u02b0", "\u01c5", "\u3042"]
NUMBERS = ["0", "7", "\u0661", "\u2167", "\xb2", "\xbd", "\u0966", "\u2460", "\U0001d7ce"]
OTHER = ["'", "'", "'", "!", ".", ",", "-", "_", "\u2019", "\u0301", "\u200d", "\U0001f600", "\u20ac", "\x00", "\x7f",
         "#", "\"", "\\", "\u0903"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL"]

def random_char(rng):
    while True:
        cp = rng.randrange(0x110000)
        if 0xD800 <= cp <= 0xDFFF:
            continue
        if unicodedata.category(chr(cp)) != "Cn":  # assigned in this Python's Unicode
            return chr(cp)

def random_string(rng):
    parts = []
    for _ in range(rng.randrange(1, 16)):
        r = rng.random()
        if r < 0.3: parts.append(rng.choice(SPACES))
        elif r < 0.55: parts.append(rng.choice(LETTERS))
        elif r < 0.65: parts.append(rng.choice(NUMBERS))
        elif r < 0.8: parts.append(rng.choice(OTHER))
        elif r < 0.9: parts.append(rng.choice(CONTRACTIONS))
        else: parts.append(random_char(rng))
    return "".join(parts)

def same_classes(text):
    # do the regex module and our table (this Python's unicodedata) put every character in the same class?
    for c in text:
        for prop in (r"\p{L}", r"\p{N}", r"\s"):
            if bool(regex.fullmatch(prop, c)) != bool(
                    {r"\p{L}": unicodedata.category(c)[0] == "L", r"\p{N}": unicodedata.category(c)[0] == "N",
                     r"\s": c.isspace() and not ("\x1c" <= c <= "\x1f")}[prop]):
                return False
    return True

def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        so = build_shim(tmp)
        ref = Reference()
        bugs = id_bugs = unicode_version = 0
        for i in range(n):
            text = random_string(rng)
            want, got = PAT.findall(text), ours(so, text)
            if want != got:
                if not same_classes(text):
                    unicode_version += 1
                    continue
                bugs += 1
                if bugs <= 10:
                    print("pieces differ: %r\n  regex: %r\n  ours:  %r" % (text, want, got))
            want_ids, got_ids = ref.encode(text), our_ids(so, text)
            if want_ids != got_ids:
                id_bugs += 1
                if id_bugs <= 10:
                    print("ids differ: %r\n  encoder.py: %r\n  ours:       %r" % (text, want_ids, got_ids))
    print("pretokenize_vs_regex: %d strings: pieces differ from GPT-2's regex in %d, ids from encoder.py's in %d; "
          "%d differ only by Unicode version (regex module %s, Python's unicodedata %s)"
          % (n, bugs, id_bugs, unicode_version, regex.__version__, unicodedata.unidata_version))
    sys.exit(1 if bugs or id_bugs else 0)

if __name__ == "__main__":
    main()
