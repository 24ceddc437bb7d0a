# bench_sdpa.py — PyTorch's fused causal attention (F.scaled_dot_product_attention, bf16) at build/bench_attention's
# shapes and with its FLOP count, one row per torch backend, named: cuDNN (SDPBackend.CUDNN_ATTENTION, the peer
# of our cuDNN path: issue 40's target is ours >= 0.9x this one), flash (FLASH_ATTENTION) and memory-efficient
# (EFFICIENT_ATTENTION). q, k, v are views of one (B, T, (NH + 2 NKV) hs) tensor, as in train_gpt. Grouped-query
# shapes (NKV < NH) run with enable_gqa=True; a backend that refuses it (or a torch without it) runs with k and v
# expanded to NH heads instead, and its row says "kv expanded" (the expansion and its backward are then in the
# times). A backend that refuses a shape prints "unsupported" with torch's reason and the bench goes on.
# Times are the median of 10 after 3 warm-ups (CUDA events); the forward runs with autograd on (it then keeps
# its log-sum-exp for the backward, as ours does). It checks no numerics.
# One `RESULT {json}` line per shape and backend that ran (bench "attention", path "torch_cudnn" / "torch_flash"
# / "torch_efficient") as soon as it ran (gpu_window.sh's micro_attention reads them, also from a run its
# timeout cut short), and at the end a table of them all.
#
# usage (device, from the repo root): python3 dev/bench/bench_sdpa.py [B T C NH NKV]...
#   default: bench_attention's: the 1.3B (C 2048, 16 heads), 5B (C 4096, 32) and Llama-3 8B (C 4096, 32 query
#   heads, 8 key/value heads) shapes at T 1024, then 2048, then 4096; B = 8192 / T
import json
import sys
import warnings

import torch
import torch.nn.functional as F

try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:  # torch < 2.3
    SDPBackend = sdpa_kernel = None

BACKENDS = [("torch_cudnn", "CUDNN_ATTENTION"), ("torch_flash", "FLASH_ATTENTION"),
            ("torch_efficient", "EFFICIENT_ATTENTION")]
# enable_gqa: torch 2.5 and newer
HAS_GQA = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5)


def median_ms(fn, warmup=3, reps=10):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


def bench(B, T, C, NH, NKV, path, backend):
    hs = C // NH
    gen = torch.Generator(device="cuda").manual_seed(1)
    width = (NH + 2 * NKV) * hs
    qkv = (2 * torch.rand(B, T, width, device="cuda", generator=gen) - 1).to(torch.bfloat16).requires_grad_()
    dy = (2 * torch.rand(B, NH, T, hs, device="cuda", generator=gen) - 1).to(torch.bfloat16)

    def views():
        q = qkv[:, :, :C].view(B, T, NH, hs).transpose(1, 2)  # (B, NH, T, hs)
        k = qkv[:, :, C:C + NKV * hs].view(B, T, NKV, hs).transpose(1, 2)
        v = qkv[:, :, C + NKV * hs:].view(B, T, NKV, hs).transpose(1, 2)
        return q, k, v

    def native():
        q, k, v = views()
        if NKV == NH:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    def expanded():
        q, k, v = views()
        group = NH // NKV
        return F.scaled_dot_product_attention(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
                                              is_causal=True)

    tries = [("native" if NKV == NH else "gqa", native)] if NKV == NH or HAS_GQA else []
    if NKV != NH:
        tries.append(("kv expanded", expanded))
    why = "no way to run grouped-query heads"
    for gqa, forward in tries:
        try:
            with sdpa_kernel([backend]), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out = forward()
                out.backward(dy)
                torch.cuda.synchronize()
        except RuntimeError as e:
            # torch says why in warnings, each reason after a "... not used because:" heading
            reasons = [str(w.message).strip().split("\n")[0] for w in caught]
            reasons = [r for r in reasons if r and not r.endswith("because:")]
            why = "; ".join(reasons[:3]) or str(e).strip().split("\n")[0]
            continue
        with sdpa_kernel([backend]):
            fwd_ms = median_ms(forward)
            out = forward()

            def backward():
                qkv.grad = None
                out.backward(dy, retain_graph=True)

            bwd_ms = median_ms(backward)
        fwd_flop = 4.0 * B * NH * T * T * hs / 2
        bwd_flop = 2.5 * fwd_flop
        print("  %-16s forward %8.3f ms (%6.1f TFLOP/s)  backward %8.3f ms (%6.1f TFLOP/s)  %s" % (
            path, fwd_ms, fwd_flop / fwd_ms / 1e9, bwd_ms, bwd_flop / bwd_ms / 1e9, gqa))
        sys.stdout.flush()
        return dict(bench="attention", path=path, B=B, T=T, C=C, NH=NH, NKV=NKV, fwd_ms=round(fwd_ms, 4),
                    bwd_ms=round(bwd_ms, 4), fwd_TFLOPs=round(fwd_flop / fwd_ms / 1e9, 2),
                    bwd_TFLOPs=round(bwd_flop / bwd_ms / 1e9, 2), heads=gqa, y_rel_l2=None, dqkv_rel_l2=None)
    print("  %-16s unsupported: %s" % (path, why[:200]))
    sys.stdout.flush()
    return None


def main():
    args = [int(a) for a in sys.argv[1:]]
    if len(args) % 5 != 0:
        sys.exit("usage: bench_sdpa.py [B T C NH NKV]...")
    if not torch.cuda.is_available():
        sys.exit("error: no CUDA device")
    if sdpa_kernel is None:
        sys.exit("error: torch %s has no torch.nn.attention.sdpa_kernel (2.3 or newer)" % torch.__version__)
    shapes = [args[i:i + 5] for i in range(0, len(args), 5)]
    if not shapes:
        for T in (1024, 2048, 4096):  # 1.3B, 5B, Llama-3 8B
            shapes += [[8192 // T, T, C, NH, NKV] for C, NH, NKV in ((2048, 16, 16), (4096, 32, 32), (4096, 32, 8))]
    print("torch %s, cuDNN %s, %s; enable_gqa %s" % (torch.__version__, torch.backends.cudnn.version(),
                                                    torch.cuda.get_device_name(), "yes" if HAS_GQA else "no"))
    results = []
    for B, T, C, NH, NKV in shapes:
        print("B=%d T=%d C=%d NH=%d NKV=%d (hs %d)" % (B, T, C, NH, NKV, C // NH))
        for path, name in BACKENDS:
            backend = getattr(SDPBackend, name, None)
            if backend is None:
                print("  %-16s unsupported: this torch has no SDPBackend.%s" % (path, name))
                continue
            r = bench(B, T, C, NH, NKV, path, backend)
            if r:
                results.append(r)
                print("RESULT " + json.dumps(r))
                sys.stdout.flush()
            torch.cuda.empty_cache()
    print("\n| shape | B | path | fwd ms | fwd TFLOP/s | bwd ms | bwd TFLOP/s | heads |")
    print("|---|---:|---|---:|---:|---:|---:|---|")
    for r in results:
        print("| C%d NH%d KV%d T%d | %d | %s | %.3f | %.1f | %.3f | %.1f | %s |" % (
            r["C"], r["NH"], r["NKV"], r["T"], r["B"], r["path"], r["fwd_ms"], r["fwd_TFLOPs"], r["bwd_ms"],
            r["bwd_TFLOPs"], r["heads"]))


if __name__ == "__main__":
    main()
