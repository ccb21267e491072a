"""Where a training step's time goes: the 1B Llama-shaped step of train.py
(KV_HEADS kv heads, 32K tokens), per provider (noop, s2c, dkernel with
DKERNEL_DIR), under torch.profiler.  Prints per step: wall ms, the sum of GPU
kernel time, GPU idle (wall - busy), allocator retries and device
(de)allocations, and the kernels whose total time differs most between the
providers, so a step's distance from its bound can be attributed.

Providers: noop, s2c, s2c_contig (s2c with gradients allocated contiguous
[B, H, S, D] instead of in their inputs' strides), dkernel.  Each is also
timed unprofiled (3 steps) with the SM clock and power sampled by nvidia-smi.

  OUT=DIR SEQ=32768 KV_HEADS=16 python3 bench/e2e/profile_step.py"""
import collections
import os
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import s2c  # noqa: E402,F401
from common import llama_1b, load_dkernel, register_providers, train_step  # noqa: E402 (bench/e2e/common.py)

SEQ = int(os.environ.get("SEQ", "32768"))
KV_HEADS = int(os.environ.get("KV_HEADS", "16"))
ONLY = os.environ.get("ONLY", "noop,s2c,s2c_contig,dkernel").split(",")
STEPS = 2


def main():
    if not torch.cuda.is_available():
        print("no CUDA device: skipped"); sys.exit(77)
    from torch.profiler import ProfilerActivity, profile
    from transformers import AttentionInterface
    import s2c.integrations.hf as s2hf

    LSSA = None
    if os.environ.get("DKERNEL_DIR") and "dkernel" in ONLY:
        LSSA = load_dkernel()
    register_providers(KV_HEADS, LSSA)
    import s2c.ops as ops
    strided = ops._grad_strides

    def s2c_contig(*a, **kw):
        ops._grad_strides = lambda t: ops._meta(t.shape).stride()
        try:
            return s2hf.attention(*a, **kw)
        finally:
            ops._grad_strides = strided
    AttentionInterface.register("s2c_contig", s2c_contig)
    from transformers import AttentionMaskInterface
    AttentionMaskInterface.register("s2c_contig", s2hf._mask)
    smi_log = tempfile.NamedTemporaryFile("w+", suffix=".csv")
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                            "-lms", "100"], stdout=smi_log, stderr=subprocess.DEVNULL)
    _, model, opt = llama_1b(KV_HEADS)
    ids = torch.randint(0, 32000, (1, SEQ), device="cuda")

    def step():
        train_step(model, opt, ids)

    kern = {}
    for name in ONLY:
        if name == "dkernel" and LSSA is None:
            continue
        model.config._attn_implementation = name
        for _ in range(2):
            step()
        torch.cuda.synchronize()
        smi_log.flush(); n0 = len(open(smi_log.name).readlines())
        t0 = time.perf_counter()
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        plain = (time.perf_counter() - t0) * 1e3 / 3
        time.sleep(0.15); smi_log.flush()
        samples = [ln.split(",") for ln in open(smi_log.name).readlines()[n0:]]
        try:
            clk = sum(float(a) for a, _ in samples) / len(samples)
            pw = sum(float(b) for _, b in samples) / len(samples)
        except (ValueError, ZeroDivisionError):
            clk = pw = float("nan")
        print(f"{name:>10}: unprofiled {plain:.1f} ms/step, SM clock {clk:.0f} MHz, power {pw:.0f} W "
              f"({len(samples)} samples)", flush=True)
        m0 = torch.cuda.memory_stats()
        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            for _ in range(STEPS):
                step()
            torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) * 1e3 / STEPS
        m1 = torch.cuda.memory_stats()
        per = collections.Counter()
        busy = []
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA and e.device_time_total > 0:
                per[e.name] += e.device_time_total / 1e3 / STEPS
                busy.append((e.time_range.start, e.time_range.end))
        busy.sort()
        union, end = 0.0, -1.0
        for s, e in busy:      # the union of kernel intervals (us)
            if e > end:
                union += e - max(s, end)
                end = e
        kern[name] = per
        d = {k: m1.get(k, 0) - m0.get(k, 0) for k in ("num_alloc_retries", "num_device_alloc", "num_device_free")}
        print(f"{name:>10}: wall {wall:.1f} ms/step (profiled), kernels {sum(per.values()):.1f} ms, busy "
              f"{union / 1e3 / STEPS:.1f} ms, idle {wall - union / 1e3 / STEPS:.1f} ms; allocator {d}; peak "
              f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB", flush=True)
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.empty_cache()

    smi.terminate()
    base = kern.get("noop", collections.Counter())
    for name, per in kern.items():
        if name == "noop":
            continue
        diff = sorted(((per[k] - base[k], k) for k in set(per) | set(base)), reverse=True)
        print(f"\n{name} - noop, kernels by ms/step difference (top 15, then bottom 5):")
        for dv, k in diff[:15] + diff[-5:]:
            print(f"  {dv:+9.2f}  {per[k]:8.2f}  {k[:110]}")


if __name__ == "__main__":
    main()
