# bench_torch_adam.py — times PyTorch's CPU AdamW on one fp32 tensor of n params, the peer of our
# build/bench_cpu_adam: (1) AdamW step alone, (2) step + a separate fp32->bf16 cast of the params into a
# preallocated bf16 tensor (what a streaming trainer must send to the GPU), (3) the gradient arriving in bf16:
# upcast into the fp32 grad, step, cast. Uses AdamW(fused=True) where the CPU supports it (torch >= 2.4),
# else foreach=True, else the plain loop; the json says which. Best of reps, like bench_cpu_adam.
# It checks no numerics and touches no GPU.
#
# usage: python3 dev/bench/bench_torch_adam.py [n_params=67108864] [threads=0 (torch default)] [reps=5]
# Last line: RESULT {json} with Gparam/s of adamw_only, adamw_plus_cast, bf16grad_upcast_adamw_cast.
import json, sys, time
import torch


def make_optimizer(p):
    """AdamW with the same hyperparameters as bench_cpu_adam; the fastest implementation this torch has on CPU."""
    kw = dict(lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    for impl, extra in (("fused", dict(fused=True)), ("foreach", dict(foreach=True)), ("loop", {})):
        try:
            opt = torch.optim.AdamW([p], **kw, **extra)
            opt.step()  # the first step allocates the moments; it also shows whether this impl runs on CPU
            return opt, impl
        except (RuntimeError, TypeError, ValueError) as e:
            print(f"AdamW {impl} not usable here: {str(e).splitlines()[0][:160]}", flush=True)
    raise SystemExit("error: no AdamW implementation works")


def best_of(reps, f):
    f()  # warm-up
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 26
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    if threads > 0:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.empty(n).uniform_(-0.02, 0.02))
    p.grad = torch.empty(n).uniform_(-1e-3, 1e-3)
    grad_bf16 = p.grad.to(torch.bfloat16)
    out_bf16 = torch.empty(n, dtype=torch.bfloat16)
    opt, impl = make_optimizer(p)
    print(f"bench_torch_adam: n = {n} params, torch {torch.__version__}, AdamW {impl}, "
          f"threads = {torch.get_num_threads()}, reps = {reps}", flush=True)

    def step():
        opt.step()

    def step_cast():
        opt.step()
        out_bf16.copy_(p.detach())

    def upcast_step_cast():
        p.grad.copy_(grad_bf16)
        opt.step()
        out_bf16.copy_(p.detach())

    res = dict(bench="torch_adam", n=n, threads=torch.get_num_threads(), reps=reps, torch=torch.__version__, impl=impl)
    for name, f in (("adamw_only", step), ("adamw_plus_cast", step_cast), ("bf16grad_upcast_adamw_cast", upcast_step_cast)):
        with torch.no_grad():
            t = best_of(reps, f)
        res[name] = round(n / t / 1e9, 4)
        print(f"{name:28s} best {t * 1e3:8.2f} ms  {n / t / 1e9:7.3f} Gparam/s", flush=True)
    print("RESULT", json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
