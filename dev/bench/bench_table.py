# bench_table.py — reads the logs that dev/bench/run_bench.sh leaves in one folder or several (ours-CFG.log,
# ours_res-CFG.log (with GPU-resident layers, -R -1), ours_keep-CFG.log (resident layers and kept activations,
# -R and -K), ours_unfused-CFG.log (-F 0 -G 0: unfused attention and bias/GELU), attention.log, layer.log, layer_unfused.log, gpu_ckpt-CFG.log, fsdp_offload-CFG.log, cpu_adam.log, torch_adam.log, device_A.txt / device_B.txt) and prints one markdown
# report: throughput per config (ours vs the PyTorch peers), our step timeline, CPU AdamW (ours vs torch),
# and PASS/MISS for the targets. A missing, skipped or failed run shows as such; nothing is guessed. The
# two benchmark calls (run_bench.sh A: 1.3B and AdamW; B: 5B) each make a table from their own folder; given both
# folders it makes one table of everything (a log found in several: the first folder's). A target whose runs are
# in none of the folders is left out. MFU is against the peak our RESULT line names (train_gpt picks it by the
# GPU's name; null for a GPU it does not know: then `n/a`). It runs nothing and measures nothing. Python 3
# standard library only.
#
# usage: python3 dev/bench/bench_table.py [DIR ...]      (default: $OUT or ./out)
import json, os, re, sys

CONFIGS = [("1.3b-8k", "1.3B (L24 C2048 NH16)", 8192), ("1.3b-32k", "1.3B (L24 C2048 NH16)", 32768),
           ("5b-8k", "5B (L24 C4096 NH32)", 8192), ("5b-32k", "5B (L24 C4096 NH32)", 32768)]
PEERS = {"1.3b-8k": ["gpu_ckpt", "fsdp_offload"], "1.3b-32k": ["gpu_ckpt", "fsdp_offload"],
         "5b-8k": ["fsdp_offload"], "5b-32k": ["fsdp_offload"]}
# our runs per config: log prefix, short tag; the first three are held to the targets
OURS = [("ours", "streaming"), ("ours_res", "-R -1"), ("ours_keep", "-R, -K"), ("ours_unfused", "-F 0 -G 0")]
TARGETED = ("ours", "ours_res", "ours_keep")
TIMELINE_KEYS = ["step_s", "compute_busy_s", "h2d_busy_s", "d2h_busy_s", "adam_busy_s", "gpu_idle_s", "fwd_wait_s",
                 "bwd_wait_s"]
ERROR_RE = re.compile(r"error|exception|out of memory|killed|fatal|abort|assert|no such file|not found", re.I)


def find(d, name):
    """The path of file `name` in the first of the folders d (a list) that has it, else None."""
    return next((os.path.join(x, name) for x in d if os.path.exists(os.path.join(x, name))), None)


def load(d, name):
    """One run's log -> dict(status ok|failed|skipped|missing, result, msg, timeline)."""
    path = find(d, name + ".log")
    if path is None:
        return dict(status="missing", msg="not run")
    with open(path, errors="replace") as f:
        lines = [l.rstrip("\n") for l in f]
    for l in lines:
        if l.startswith("SKIPPED:"):
            return dict(status="skipped", msg="skipped: " + l[len("SKIPPED:"):].strip())
    cmd = next((l for l in lines if l.startswith("CMD:")), "")
    flags = " ".join(re.findall(r"(-[RK] -?\d+)", cmd)) or "-R, -K"  # the -R / -K a variant ran with
    result = None
    for l in lines:
        if l.startswith("RESULT "):
            try:
                result = json.loads(l[len("RESULT "):])
            except ValueError:
                pass
    if result is not None:
        tuning = next((l for l in lines if l.startswith("tuning, ")), None)  # train_gpt -Y 1: its -R / -K advice
        return dict(status="ok", result=result, timeline=timeline_median(lines), flags=flags, tuning=tuning)
    exit_line = next((l for l in reversed(lines) if l.startswith("EXIT rc=")), "")
    m = re.match(r"EXIT rc=(\d+) wall_s=(\d+) timeout_s=(\d+)", exit_line)
    # 124: timeout's own code; 137 (SIGKILL): timeout's -k, or, before the limit, the kernel's OOM killer
    if m and (m.group(1) == "124" or (m.group(1) == "137" and int(m.group(2)) >= int(m.group(3)))):
        return dict(status="failed", msg="failed: timeout after %s s" % m.group(3), flags=flags)
    if m and m.group(1) == "137":
        return dict(status="failed", msg="failed: killed (SIGKILL, likely out of host memory) after %s s" % m.group(2),
                    flags=flags)
    body = [l.strip() for l in lines if l.strip() and not l.startswith(("CMD:", "EXIT rc="))]
    errs = [l for l in body if ERROR_RE.search(l) and not l.startswith("Traceback")]
    last = (errs or body or ["(empty log)"])[-1]
    rc = " (rc=%s)" % m.group(1) if m else ""
    return dict(status="failed", msg="failed: " + last[:140] + rc, flags=flags)


def json_lines(lines, prefix):
    """The json objects of the lines that start with prefix ("RESULT ", "TIMELINE "); unparsable ones skipped."""
    out = []
    for l in lines:
        if l.startswith(prefix):
            try:
                out.append(json.loads(l[len(prefix):]))
            except ValueError:
                pass
    return out


def results(d, name):
    """Every RESULT json of a log that prints one per shape (None when the log is missing)."""
    path = find(d, name + ".log")
    if path is None:
        return None
    with open(path, errors="replace") as f:
        return json_lines(f, "RESULT ")


def timeline_median(lines):
    """Per-key median of the TIMELINE lines of the timed steps (the last N, N from the median line)."""
    tl = json_lines(lines, "TIMELINE ")
    if not tl:
        return None
    m = next((re.search(r"median step time over (\d+) steps", l) for l in lines if "median step time over" in l), None)
    n = int(m.group(1)) if m else len(tl)
    tl = tl[-n:] if 0 < n <= len(tl) else tl
    # the upper median, as train_gpt's "median step time" (sorted[n / 2])
    return {k: sorted(t.get(k, float("nan")) for t in tl)[len(tl) // 2] for k in TIMELINE_KEYS}


def cell(x, fmt):
    return fmt.format(x) if isinstance(x, (int, float)) and x == x else "-"  # x != x: nan, a key the log lacks


def mfu_cell(tflops, peak):
    """MFU with the peak it is against, or n/a."""
    if not tflops or not peak:
        return "n/a"
    return "%.1f%% of %.0f" % (100.0 * tflops / peak, peak)


def esc(s):
    return s.replace("|", "\\|")


def main():
    d = sys.argv[1:] or [os.environ.get("OUT", "./out")]
    out = []
    p = out.append
    p("# Benchmark: streaming trainer vs PyTorch peers (T=1024)")
    # device_A.txt / device_B.txt (one per call; device.txt from older runs), each folder's
    devs = sorted({os.path.join(x, f) for x in d if os.path.isdir(x) for f in os.listdir(x)
                   if f.startswith("device") and f.endswith(".txt")})
    for dev in devs:
        with open(dev, errors="replace") as f:
            lines = [l.strip() for l in f if l.strip()]
        p("")
        p("  \n".join(lines))
        gpu = next((l for l in lines if l.startswith("gpu:")), "")
        if "H100" not in gpu:  # e.g. an H200: the same tensor cores, more and faster memory
            p("")
            p("Note: the targets were set on an H100 80GB; this GPU is not one (%s), so the PASS/MISS of its runs "
              "are indicative (-V 79 keeps our memory placement as on the H100)." % esc(gpu[4:].strip() or "unknown"))

    # ---- throughput ----
    p("")
    p("| config | run | tok/s | model TFLOP/s | MFU | step s | peak GPU GiB | host GiB | ours / this peer, tok/s |")
    p("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    runs = {}
    for cfg, label, tokens in CONFIGS:
        for who, _ in OURS:
            runs[(who, cfg)] = load(d, "%s-%s" % (who, cfg))
        for who in PEERS[cfg]:
            runs[(who, cfg)] = load(d, "%s-%s" % (who, cfg))
    # MFU denominator: the peak train_gpt names in its RESULT (by the GPU's name); a peer's run is held to the one
    # of our runs on the same GPU (the same call). None: a GPU train_gpt does not know, MFU n/a.
    def peak_of(res):
        if not res:
            return None
        if "peak_TFLOPs" in res:
            return res["peak_TFLOPs"]
        # older logs: mfu = model_TFLOPs / peak
        return res["model_TFLOPs"] / res["mfu"] if res.get("mfu") and res.get("model_TFLOPs") else None

    def ours_peak(cfg):
        return next((peak_of(runs[(o, cfg)]["result"]) for o, _ in OURS if runs[(o, cfg)]["status"] == "ok"
                     and peak_of(runs[(o, cfg)]["result"])), None)

    for cfg, label, tokens in CONFIGS:
        if all(runs[(w, cfg)]["status"] == "missing" for w in [o for o, _ in OURS] + PEERS[cfg]):
            continue  # a config not selected (CONFIGS): no rows
        ours_runs = ["ours"] + [w for w, _ in OURS[1:] if runs[(w, cfg)]["status"] != "missing"]
        for who in ours_runs + PEERS[cfg]:
            r = runs[(who, cfg)]
            name = "%s %s" % (label, "%dK tok/step" % (tokens // 1024))
            got = r["result"] if r["status"] == "ok" else {}
            R, K = got.get("resident_layers", "?"), got.get("kept_layers", "?")
            run = "torch " + who
            if who == "ours":
                run = "ours (streaming)"
            elif who == "ours_res":
                run = "ours, -R -1 (%s layers GPU-resident)" % R
            elif who == "ours_keep":
                run = "ours, %s layers GPU-resident, %s with kept activations (%s)" % (R, K, r.get("flags", "-R, -K"))
            elif who == "ours_unfused":
                run = "ours, -F 0 -G 0 (unfused: cuBLAS attention, separate bias/GELU kernels)"
            if r["status"] != "ok":
                p("| %s | %s | %s | | | | | | |" % (name, run, esc(r["msg"])))
                continue
            res = r["result"]
            tf = res.get("model_TFLOPs")
            ratio = "-"
            if not who.startswith("ours") and res.get("tok_per_s"):
                parts = ["%.2fx%s" % (runs[(o, cfg)]["result"]["tok_per_s"] / res["tok_per_s"], "" if o == "ours" else " (%s)" % tag)
                         for o, tag in OURS if o in TARGETED and runs[(o, cfg)]["status"] == "ok"]
                ratio = ", ".join(parts) or "-"
            host = cell(res.get("host_GiB"), "{:.1f}")
            p("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                name, run, cell(res.get("tok_per_s"), "{:,.0f}"),
                cell(tf, "{:.1f}"), mfu_cell(tf, peak_of(res) if who.startswith("ours") else ours_peak(cfg)),
                cell(res.get("step_s"), "{:.3f}"), cell(res.get("peak_gpu_GiB"), "{:.1f}"), host, ratio))

    # ---- our timeline ----
    tls = [(("" if who == "ours" else tag + " ") + cfg, runs[(who, cfg)].get("timeline"))
           for cfg, _, _ in CONFIGS for who, tag in OURS if who in TARGETED]
    if any(t for _, t in tls):
        p("")
        p("Our step timeline, median over the timed steps (seconds; busy = time that resource worked in the step):")
        p("")
        p("| config | step | compute busy | H2D busy | D2H busy | CPU AdamW busy | GPU idle | of it in fwd | in bwd | idle % |")
        p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for cfg, t in tls:
            if t:
                p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    cfg, *(cell(t[k], "{:.3f}") for k in TIMELINE_KEYS),
                    cell(100 * t["gpu_idle_s"] / t["step_s"] if t["step_s"] else None, "{:.0f}%")))
        advice = [(cfg, runs[(who, c)].get("tuning")) for c, _, _ in CONFIGS for who, tag in OURS
                  if who in TARGETED for cfg in [("" if who == "ours" else tag + " ") + c]]
        if any(a for _, a in advice):
            p("")
            p("What each run's last step suggests for -R / -K (train_gpt's own model of the step, not a measurement):")
            p("")
            for cfg, a in advice:
                if a:
                    p("- %s: %s" % (cfg, esc(a[len("tuning, "):])))

    # ---- attention paths (build/bench_attention: fused kernels vs cuBLAS + softmax, one micro-batch) ----
    att = results(d, "attention")
    if att is not None or results(d, "attention_sdpa"):
        att = (att or []) + (results(d, "attention_sdpa") or [])  # + PyTorch's SDPA at the same shapes
        p("")
        if not att:
            p("Attention micro-benchmark: %s" % esc(load(d, "attention")["msg"]))
        else:
            p("Attention alone (build/bench_attention; causal FLOPs, forward 2*B*NH*T*T*hs, backward 2.5x):")
            p("")
            p("| shape | path | forward ms | fwd TFLOP/s | backward ms | bwd TFLOP/s | fused vs cuBLAS rel-L2 (y, dqkv) |")
            p("|---|---|---:|---:|---:|---:|---|")
            for r in sorted(att, key=lambda r: (r["C"], r["NH"], r["B"], r["T"])):  # stable: paths in log order
                agree = "-" if r.get("y_rel_l2") is None else "%.1e, %.1e" % (r["y_rel_l2"], r["dqkv_rel_l2"])
                p("| B%d T%d C%d NH%d | %s | %.3f | %.1f | %.3f | %.1f | %s |" % (
                    r["B"], r["T"], r["C"], r["NH"], r["path"], r["fwd_ms"], r["fwd_TFLOPs"], r["bwd_ms"],
                    r["bwd_TFLOPs"], agree))

    # ---- one layer (build/bench_layer; per-stage lines in layer.log / layer_unfused.log) ----
    lay = (results(d, "layer") or []) + (results(d, "layer_unfused") or [])
    if lay:
        p("")
        p("One layer, one micro-batch (build/bench_layer; each stage's time in layer.log, layer_unfused.log):")
        p("")
        p("| shape | attention | epilogues | forward ms | fwd TFLOP/s | recompute + backward ms | TFLOP/s | backward alone (-K) ms | TFLOP/s |")
        p("|---|---|---|---:|---:|---:|---:|---:|---:|")
        for r in lay:
            p("| B%d T%d C%d NH%d | %s | %s | %.3f | %.1f | %.3f | %.1f | %s | %s |" % (
                r["B"], r["T"], r["C"], r["NH"], "fused" if r["flash"] else "cuBLAS",
                "cuBLASLt" if r["epilogues"] else "separate", r["fwd_ms"], r["fwd_TFLOPs"], r["recompute_bwd_ms"],
                r["recompute_bwd_TFLOPs"], cell(r.get("bwd_ms"), "{:.3f}"), cell(r.get("bwd_TFLOPs"), "{:.1f}")))

    # ---- CPU AdamW ----
    ca, ta = load(d, "cpu_adam"), load(d, "torch_adam")

    def g(r, k):
        return r["result"].get(k) if r["status"] == "ok" else None

    impl = ta["result"].get("impl", "?") if ta["status"] == "ok" else "?"
    if not (ca["status"] == "missing" and ta["status"] == "missing"):
        info = ca.get("result") or ta.get("result") or {}
        p("")
        p("CPU AdamW, %s params, %s threads (Gparam/s, best of reps; ours writes the bf16 copy in the same pass):" % (
            cell(info.get("n"), "{:,}"), cell(info.get("threads"), "{}")))
        p("")
        p("| optimizer | Gparam/s | ours / torch |")
        p("|---|---:|---:|")
        # label, run, its key, the torch key it is compared with (ours only)
        rows = [("ours, fp32 grad, AdamW + bf16 copy", ca, "adamw_f32grad", "adamw_plus_cast"),
                ("ours, bf16 grad, AdamW + bf16 copy", ca, "adamw_bf16grad", "bf16grad_upcast_adamw_cast"),
                ("torch AdamW(%s) only" % impl, ta, "adamw_only", None),
                ("torch AdamW(%s) + separate bf16 cast" % impl, ta, "adamw_plus_cast", None),
                ("torch bf16 grad upcast + AdamW(%s) + cast" % impl, ta, "bf16grad_upcast_adamw_cast", None)]
        for label, r, k, vs in rows:
            if r["status"] != "ok":
                p("| %s | %s | |" % (label, esc(r["msg"])))
                continue
            a, b = g(r, k), g(ta, vs) if vs else None
            p("| %s | %s | %s |" % (label, cell(a, "{:.2f}"), "%.2fx" % (a / b) if a and b else ""))

    # ---- targets ----
    def tgt(label, measured, ok):
        return "| %s | %s | %s |" % (label, measured, "n/a" if ok is None else ("PASS" if ok else "MISS"))

    def res(who, cfg, key):
        r = runs[(who, cfg)]
        return r["result"].get(key) if r["status"] == "ok" else None

    def why(*rs):
        return "; ".join("%s: %s" % (n, r["msg"]) for n, r in rs if r["status"] != "ok")

    p("")
    p("| target | measured | result |")
    p("|---|---|---|")
    left_out = []  # targets none of whose runs are in these logs (the other run_bench.sh call's)

    def missing(*names):
        return all(runs[n]["status"] == "missing" for n in names)
    # each throughput target for the pure streaming run, and again for the -R / -K runs where there are some
    for who, tag in OURS:
        if who not in TARGETED or (who != "ours" and all(runs[(who, c)]["status"] == "missing" for c, _, _ in CONFIGS)):
            continue
        # a variant (-R, -K) is judged where it ran: run_bench.sh runs each only at some configs
        if missing((who, "5b-32k")):
            if who == "ours":
                left_out.append("5B, 32K tok/step >= 400 model TFLOP/s")
        else:
            v = res(who, "5b-32k", "model_TFLOPs")
            p(tgt("5B, 32K tok/step: ours (%s) >= 400 model TFLOP/s" % tag,
                  "%.1f TFLOP/s" % v if v else esc(why((who, runs[(who, "5b-32k")]))), None if v is None else v >= 400))
        for cfg, peer, k, label in (("5b-8k", "fsdp_offload", 6.0, "5B, 8K tok/step: ours (%s) tok/s >= 6x fsdp_offload"),
                                    ("1.3b-32k", "gpu_ckpt", 0.9, "1.3B, 32K tok/step: ours (%s) tok/s >= 0.9x gpu_ckpt")):
            if who != "ours" and runs[(who, cfg)]["status"] == "missing":
                continue
            if missing((who, cfg), (peer, cfg)):
                left_out.append(label.split(":")[0] + " vs " + peer)
                continue
            a, b = res(who, cfg, "tok_per_s"), res(peer, cfg, "tok_per_s")
            ok = None if not (a and b) else a / b >= k
            meas = "%.2fx (%.0f vs %.0f tok/s)" % (a / b, a, b) if ok is not None else esc(
                why((who, runs[(who, cfg)]), (peer, runs[(peer, cfg)])))
            p(tgt(label % tag, meas, ok))
    # the target is against torch's FUSED CPU AdamW: a torch without it (bench_torch_adam.py falls back) is no verdict
    for ours_key, torch_key, label in (
            ("adamw_f32grad", "adamw_plus_cast", "CPU AdamW + bf16 copy: ours >= 1.2x torch fused AdamW + separate cast"),
            ("adamw_bf16grad", "bf16grad_upcast_adamw_cast",
             "the same, bf16 gradient: ours >= 1.2x torch upcast + fused AdamW + cast")):
        if ca["status"] == "missing" and ta["status"] == "missing":
            left_out.append("CPU AdamW (%s)" % ours_key)
            continue
        a, b = g(ca, ours_key), g(ta, torch_key)
        ok = None if not (a and b) or impl != "fused" else a / b >= 1.2
        if a and b:
            meas = "%.2fx (%.2f vs %.2f Gparam/s, torch AdamW %s)" % (a / b, a, b, impl)
            if impl != "fused":
                meas += ": not the fused AdamW the target names"
        else:
            meas = esc(why(("cpu_adam", ca), ("torch_adam", ta)))
        p(tgt(label, meas, ok))
    if left_out:
        p("")
        p("Targets not in these logs (the other run_bench.sh call; give both folders for all): %s." % "; ".join(left_out))
    print("\n".join(out))


if __name__ == "__main__":
    main()
