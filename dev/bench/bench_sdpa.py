# bench_sdpa.py — PyTorch's own fused causal attention (F.scaled_dot_product_attention, bf16, the backend
# torch picks on this GPU) at build/bench_attention's shapes and with its FLOP count, so the table shows our
# fused kernels next to what the PyTorch peers' attention costs. q, k, v are views of one (B, T, 3C) tensor,
# as in train_gpt. Times are the median of 10 after 3 warm-ups (CUDA events); the forward runs with autograd
# on (it then keeps its log-sum-exp for the backward, as ours does). It checks no numerics.
# Last lines: one `RESULT {json}` per shape (bench "attention", path "torch_sdpa"), read by gpu_window.sh.
#
# usage (device, from the repo root): python3 dev/bench/bench_sdpa.py [B T C NH]...  (default: 1.3B and 5B shapes)
import json
import sys

import torch
import torch.nn.functional as F


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


def bench(B, T, C, NH):
    hs = C // NH
    print("B=%d T=%d C=%d NH=%d (hs %d)" % (B, T, C, NH, hs))
    gen = torch.Generator(device="cuda").manual_seed(1)
    qkv = (2 * torch.rand(B, T, 3 * C, device="cuda", generator=gen) - 1).to(torch.bfloat16).requires_grad_()
    dy = (2 * torch.rand(B, NH, T, hs, device="cuda", generator=gen) - 1).to(torch.bfloat16)

    def forward():
        q, k, v = qkv.view(B, T, 3, NH, hs).permute(2, 0, 3, 1, 4).unbind(0)  # each (B, NH, T, hs)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    fwd_ms = median_ms(forward)
    out = forward()

    def backward():
        qkv.grad = None
        out.backward(dy, retain_graph=True)

    bwd_ms = median_ms(backward)
    fwd_flop = 4.0 * B * NH * T * T * hs / 2
    bwd_flop = 2.5 * fwd_flop
    print("  %-10s forward %8.3f ms (%6.1f TFLOP/s)  backward %8.3f ms (%6.1f TFLOP/s)" % (
        "torch_sdpa", fwd_ms, fwd_flop / fwd_ms / 1e9, bwd_ms, bwd_flop / bwd_ms / 1e9))
    sys.stdout.flush()
    return dict(bench="attention", path="torch_sdpa", B=B, T=T, C=C, NH=NH, fwd_ms=round(fwd_ms, 4),
                bwd_ms=round(bwd_ms, 4), fwd_TFLOPs=round(fwd_flop / fwd_ms / 1e9, 2),
                bwd_TFLOPs=round(bwd_flop / bwd_ms / 1e9, 2), y_rel_l2=None, dqkv_rel_l2=None)


def main():
    args = [int(a) for a in sys.argv[1:]]
    if len(args) % 4 != 0:
        sys.exit("usage: bench_sdpa.py [B T C NH]...")
    if not torch.cuda.is_available():
        sys.exit("error: no CUDA device")
    shapes = [args[i:i + 4] for i in range(0, len(args), 4)] or [[8, 1024, 2048, 16], [8, 1024, 4096, 32]]
    results = [bench(*s) for s in shapes]
    print("torch %s" % torch.__version__)
    for r in results:
        print("RESULT " + json.dumps(r))


if __name__ == "__main__":
    main()
