#!/usr/bin/env python3
"""plot.py — the loss curves of one or more runs from their main.log files (llm.c's format, as both trainers
write it: "s:STEP trl:LOSS lr:LR norm:NORM", "s:STEP tel:LOSS" and, with -h, "s:STEP eval:ACCURACY").

Left: train loss (thin) and validation loss (dots) against the step, the learning rate on a second axis
(dashed). Right: the gradient norm against the step (log scale), which every run logs, however short; where
the tokens per step are known (--tokens-per-step, or a checkpoint's state file, state_*.bin, beside the log),
both panels get a "tokens seen" axis on top. Where a log has HellaSwag's accuracy (the trainers' -h), a third
panel draws it against the step, chance (25%) dashed, as llm.c's notebook does. Several logs are overlaid, one colour each, to compare runs. It
trains nothing and reads nothing else.

usage: python3 dev/plot.py log/main.log [other/main.log ...] [-o loss.png] [--tokens-per-step N] [--title T]
(the trainers' -t is the sequence length: the tokens per step is B x T x accumulation, the trainers' -d)
"""
import argparse
import glob
import math
import os
import stat
import struct
import sys


def is_regular(path):
    """True for a regular file (a FIFO or a device would block or never end)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def read_log(path):
    """(train, val, evals) lists of (step, loss, lr, norm) / (step, loss) / (step, accuracy) from one main.log.
    A last line without its newline (a run still writing, or killed) is skipped; a loss that is not finite
    (inf, nan) is left out."""
    train, val, evals = [], [], []
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        sys.exit(f"error: {path}: {e.strerror}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        sys.exit(f"error: {path}: not UTF-8 text (byte {e.start}): not a main.log")
    lines = text.split("\n")
    for n, line in enumerate(lines, 1):
        parts = line.split()
        if not parts or not parts[0].startswith("s:"):
            continue
        try:
            step = int(parts[0][2:])
            kind, value = parts[1].split(":", 1)
            fields = dict(p.split(":", 1) for p in parts[2:])
            if kind == "trl":
                train.append((step, float(value), float(fields.get("lr", "nan")), float(fields.get("norm", "nan"))))
            elif kind == "tel":
                val.append((step, float(value)))
            elif kind == "eval":
                evals.append((step, float(value)))
        except (ValueError, IndexError):
            if n == len(lines):  # the last line, cut short
                print(f"warning: {path}:{n}: an incomplete last line, skipped", file=sys.stderr)
                continue
            sys.exit(f"error: {path}:{n}: not a main.log line: {line.strip()[:80]}")
    dropped = sum(not math.isfinite(t[1]) for t in train) + sum(not math.isfinite(v[1]) for v in val)
    if dropped:
        print(f"warning: {path}: {dropped} losses that are not finite (inf, nan) left out", file=sys.stderr)
    return [t for t in train if math.isfinite(t[1])], [v for v in val if math.isfinite(v[1])], evals


def tokens_per_step_of(log_path):
    """Tokens per step from the header of a state_*.bin beside the log (llmc/checkpoint.h: int64 slot 6), or None."""
    for state in sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(log_path)), "state_*.bin"))):
        if not is_regular(state):
            continue
        try:
            with open(state, "rb") as f:
                header = struct.unpack("<16q", f.read(128))
            if header[0] == 20241122 and header[6] > 0:
                return header[6]
        except (OSError, struct.error):
            continue
    return None


def main():
    ap = argparse.ArgumentParser(description="loss curves from main.log files")
    ap.add_argument("logs", nargs="+", help="main.log files (one curve each)")
    ap.add_argument("-o", "--out", default="loss.png", help="image file to write (default loss.png)")
    ap.add_argument("--tokens-per-step", type=int, default=0,
                    help="tokens per step (the trainers' -d, or B x T), for the tokens axis (default: from a "
                         "state_*.bin beside each log)")
    ap.add_argument("-t", dest="seq_len", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--title", default="", help="figure title")
    args = ap.parse_args()
    if args.seq_len is not None:  # the trainers' -t is the sequence length, not the tokens per step
        sys.exit(f"error: -t {args.seq_len}: plot.py has no -t (the trainers' -t is the sequence length); "
                 f"give the tokens per step as --tokens-per-step N (the run's -d, or B x T)")
    if args.tokens_per_step < 0 or args.tokens_per_step > 2**62:  # the trainers' tokens a step are int64
        sys.exit(f"error: --tokens-per-step {args.tokens_per_step}: must be positive and at most 2^62")
    base = os.path.basename(args.out)
    if not base or base.startswith(".") and "." not in base[1:]:
        sys.exit(f"error: -o {args.out!r}: an image file name is needed, such as loss.png")
    if not os.path.splitext(base)[1] and (not os.path.exists(args.out) or os.path.isfile(args.out)):
        args.out += ".png"  # matplotlib would add it, and we would name another file

    # every input is read and the output checked before matplotlib is loaded
    logs = []
    for path in args.logs:
        if os.path.isdir(path) and os.path.isfile(os.path.join(path, "main.log")):
            path = os.path.join(path, "main.log")  # a run folder (-o DIR)
        if not os.path.exists(path):
            sys.exit(f"error: {path}: no such file")
        if not is_regular(path):
            sys.exit(f"error: {path}: not a regular file")
        train, val, evals = read_log(path)
        if not train and not val:
            sys.exit(f"error: {path}: no train or validation lines")
        logs.append((path, train, val, evals))
    if os.path.exists(args.out) and not is_regular(args.out):
        sys.exit(f"error: -o {args.out}: exists and is not a regular file")
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir):
        sys.exit(f"error: -o {args.out}: no directory {out_dir}")

    try:
        import matplotlib
        matplotlib.use("Agg")  # files only, no display needed
        import matplotlib.pyplot as plt
    except ImportError as e:
        sys.exit(f"error: plot.py needs matplotlib ({e}): pip install matplotlib (or python3-matplotlib)")

    with_eval = any(log[3] for log in logs)
    fig, axes = plt.subplots(1, 3 if with_eval else 2, figsize=(19 if with_eval else 13, 4.8))
    ax_step, ax_norm = axes[0], axes[1]
    ax_lr = ax_step.twinx()
    tokens = set()  # the tokens per step of each log, where known
    for i, (path, train, val, evals) in enumerate(logs):
        color = f"C{i}"
        name = os.path.basename(os.path.dirname(os.path.abspath(path))) + " " if len(args.logs) > 1 else ""
        tps = args.tokens_per_step or tokens_per_step_of(path)
        tokens.add(tps)
        if train:
            steps, losses, lrs = [t[0] for t in train], [t[1] for t in train], [t[2] for t in train]
            ax_step.plot(steps, losses, color=color, lw=0.8, alpha=0.8, marker="." if len(steps) < 30 else None,
                         label=f"{name}train")
            ax_lr.plot(steps, lrs, color=color, lw=1.0, ls="--", alpha=0.6)
            norms = [(t[0], t[3]) for t in train if math.isfinite(t[3]) and t[3] > 0]
            if norms:
                ax_norm.plot([n[0] for n in norms], [n[1] for n in norms], color=color, lw=0.8,
                             marker="." if len(norms) < 30 else None, label=f"{name}gradient norm")
        if val:
            ax_step.plot([v[0] for v in val], [v[1] for v in val], "o-", color=color, ms=4, lw=1.5,
                         label=f"{name}val")
        if evals:
            axes[2].plot([e[0] for e in evals], [e[1] for e in evals], "o-", color=color, ms=4, lw=1.5,
                         label=f"{name}HellaSwag")
    ax_step.set_xlabel("step")
    ax_step.set_ylabel("loss")
    ax_lr.set_ylabel("learning rate (dashed)")
    ax_step.grid(alpha=0.3)
    ax_step.legend(loc="upper right")
    ax_norm.set_xlabel("step")
    ax_norm.set_ylabel("gradient norm (before the clip)")
    ax_norm.grid(alpha=0.3, which="both")
    if ax_norm.lines:
        ax_norm.set_yscale("log")
        ax_norm.legend(loc="upper right")
    else:
        ax_norm.text(0.5, 0.5, "no train lines with a gradient norm", ha="center", va="center",
                     transform=ax_norm.transAxes)
    if with_eval:
        axes[2].axhline(0.25, color="gray", ls="--", lw=1.0, label="chance (25%)")
        axes[2].set_xlabel("step")
        axes[2].set_ylabel("HellaSwag accuracy (-h)")
        axes[2].grid(alpha=0.3)
        axes[2].legend(loc="lower right")
    # one tokens-per-step for every log: a tokens axis on top of both panels
    tps = tokens.pop() if len(tokens) == 1 else None
    if tps:
        for ax in (ax_step, ax_norm):
            top = ax.secondary_xaxis("top", functions=(lambda s, k=tps: s * k, lambda n, k=tps: n / k))
            top.set_xlabel(f"tokens seen ({tps:,} a step)")
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    try:
        fig.savefig(args.out, dpi=110)
    except (OSError, ValueError) as e:  # unwritable, or an extension matplotlib has no format for
        sys.exit(f"error: -o {args.out}: {e}")
    print(f"wrote {args.out}: loss and learning rate by step, gradient norm by step"
          + (", HellaSwag accuracy by step" if with_eval else "")
          + (f", tokens seen on top ({tps:,} a step)" if tps else " (tokens per step unknown: --tokens-per-step N)"))


if __name__ == "__main__":
    main()
