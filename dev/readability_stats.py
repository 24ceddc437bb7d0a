#!/usr/bin/env python3
"""readability_stats.py — the readability measures of the trainer's sources and README.

Usage: python3 dev/readability_stats.py [REPO_DIR]   (default: the repository this script is in)

Prints: words per comment block (mean, max, where), % of source lines over 100 characters, README words,
headings, code blocks and words per sentence, and for the training step (gpt_step and what it calls in
train_gpt.cu: gpt_forward_backward, gpt_update where they exist) the distinct functions called, GPT fields
touched and the share of lines about the timeline. Sources: the *.h, *.cu, *.cuh, *.cpp files of the root and llmc/.
Also: words per comment block as mean (median), overall and for train_gpt.cu; the share of train_gpt.cu's
statements (code ending in ';') that span several lines; the files at the top level.
"""
import glob
import os
import re
import statistics
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sources = sorted(f for ext in ("h", "cu", "cuh", "cpp") for d in ("", "llmc")
                 for f in glob.glob(os.path.join(root, d, "*." + ext)))
if not sources or not os.path.isfile(os.path.join(root, "train_gpt.cu")):
    sys.exit(f"error: {root}: no train_gpt.cu and llmc/ sources here: give the repository's root")


def comment_blocks(path):
    """Runs of consecutive comment-only lines are one block; a comment after code is a block of its own."""
    blocks, current, start = [], [], 0
    for i, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
        s = line.strip()
        if s.startswith("//"):
            if not current:
                start = i
            current.append(s[2:])
            continue
        if current:
            blocks.append((start, " ".join(current)))
            current = []
        m = re.search(r'//(.*)$', re.sub(r'"(\\.|[^"\\])*"', '""', line))
        if m and not s.startswith("#include"):
            blocks.append((i, m.group(1)))
    if current:
        blocks.append((start, " ".join(current)))
    return blocks


def wrapped_statements(path):
    """Statements ending in ';' (comments and strings stripped), and how many of them span several lines.
    An if / for / while / else header on a line of its own is not part of the statement after it."""
    src = re.sub(r'"(\\.|[^"\\])*"', '""', open(path, encoding="utf-8", errors="replace").read())
    statements, wrapped, current = 0, 0, 0
    for line in src.split("\n"):
        s = re.sub(r"//.*$", "", line).strip()
        if not s or (current == 0 and (s.startswith("#") or s in ("{", "}", "};"))):
            continue
        if current == 0 and re.match(r"(}\s*)?(if|else|for|while)\b", s) and (s.endswith(")") or s.endswith("else")):
            continue  # a header whose statement follows on the next line: the statement is measured alone
        current += 1
        if s.endswith(";"):
            statements, wrapped, current = statements + 1, wrapped + (current > 1), 0
        elif s.endswith(("{", "}")):
            current = 0
    return statements, wrapped


words, longest, lines, long_lines, longer_lines, trainer_words = [], (0, ""), 0, 0, 0, []
for path in sources:
    for start, text in comment_blocks(path):
        n = len(re.findall(r"[A-Za-z0-9][\w'.-]*", text))
        if n == 0 or set(text.strip()) <= set("-="):
            continue
        words.append(n)
        if os.path.basename(path) == "train_gpt.cu":
            trainer_words.append(n)
        if n > longest[0]:
            longest = (n, "%s:%d" % (os.path.basename(path), start))
    for line in open(path, encoding="utf-8", errors="replace"):
        lines += 1
        long_lines += len(line.rstrip("\n")) > 100
        longer_lines += len(line.rstrip("\n")) > 110
print("sources: %d files, %d lines" % (len(sources), lines))
print("words per comment block: %.1f mean, max %d (%s), %d blocks" % (sum(words) / len(words), longest[0], longest[1],
                                                                   len(words)))
print("words per comment block, mean (median): %.1f (%g); train_gpt.cu %.1f (%g)" % (
    sum(words) / len(words), statistics.median(words), sum(trainer_words) / max(1, len(trainer_words)),
    statistics.median(trainer_words) if trainer_words else 0))
n_statements, n_wrapped = wrapped_statements(os.path.join(root, "train_gpt.cu"))
print("train_gpt.cu: %.1f%% of %d statements wrapped over several lines" % (100.0 * n_wrapped / n_statements,
                                                                          n_statements))
top = [f for f in os.listdir(root) if os.path.isfile(os.path.join(root, f)) and not f.startswith(".")
       and not os.access(os.path.join(root, f), os.X_OK)]
print("files at the top level: %d (%s)" % (len(top), " ".join(sorted(top))))
print("lines over 100 characters: %.1f%% (over 110: %.1f%%)" % (100.0 * long_lines / lines, 100.0 * longer_lines / lines))

readme = open(os.path.join(root, "README.md"), encoding="utf-8").read()
prose, in_code, blocks, previous = [], False, 0, ""
for line in readme.split("\n"):
    if line.startswith("```"):
        in_code = not in_code
        blocks += in_code
        continue
    indented = line.startswith("    ") and not in_code
    blocks += indented and previous.strip() == ""  # an indented code block starts after a blank line
    previous = line if not indented else "    "
    if not in_code and not indented and not line.startswith("|") and not line.startswith("#"):
        prose.append(line)
text = " ".join(prose)
text_words = len(readme.split())
sentences = [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z(`])", text) if len(s.split()) > 2]
print("README: %d words, %d headings, %d code blocks, %.1f words per sentence" % (
    text_words, len(re.findall(r"^#+ ", readme, re.M)), blocks,
    sum(len(s.split()) for s in sentences) / max(1, len(sentences))))


def function_body(src, name):
    m = re.search(r"^static [^\n;]*\b%s\([^;{]*\{" % name, src, re.M)
    if not m:
        return None
    depth, i = 1, m.end()
    while depth:
        depth += {"{": 1, "}": -1}.get(src[i], 0)
        i += 1
    return src[m.start():i]


src = open(os.path.join(root, "train_gpt.cu"), encoding="utf-8").read()
keywords = {"if", "for", "while", "return", "sizeof", "switch", "static_cast", "defined"}
for names in (["gpt_step"], ["gpt_forward_backward"], ["gpt_step", "gpt_forward_backward", "gpt_update"]):
    bodies = [b for b in (function_body(src, n) for n in names) if b]
    if not bodies:
        continue
    calls, fields, body_lines, timeline = set(), set(), 0, 0
    for body in bodies:
        code = re.sub(r"//[^\n]*", "", body.split("{", 1)[1])
        calls |= {c for c in re.findall(r"\b([a-zA-Z_]\w*)\s*\(", code) if c not in keywords}
        fields |= set(re.findall(r"\bg->(\w+)", code))
        for line in code.split("\n"):
            if line.strip() and line.strip() != "}":
                body_lines += 1
                timeline += bool(re.search(r"\btimeline|\btl\b|\bspan\b|Span\b|TRACK_", line))
    print("%s: %d lines, %d functions called, %d GPT fields, %.0f%% of lines timeline bookkeeping" % (
        " + ".join(n for n, b in zip(names, [function_body(src, n) for n in names]) if b), body_lines, len(calls),
        len(fields), 100.0 * timeline / max(1, body_lines)))
m = re.search(r"^int main\(", src, re.M)
if m:
    depth, i = 0, src.index("{", m.start())
    j = i
    while True:
        depth += {"{": 1, "}": -1}.get(src[j], 0)
        j += 1
        if depth == 0:
            break
    print("main: %d lines" % src[m.start():j].count("\n"))
