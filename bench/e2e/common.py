"""What the end-to-end benches share: the model-level timer, the one-call timer and the table printer."""
import statistics

import torch


def bench(fn, reps=3):
    """Median of `reps` timed runs after one warm-up (one model forward or step each), ms."""
    fn(); torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
    return statistics.median(ts)


_flush = None


def do_bench(fn, reps=15):
    """One kernel call: L2 flushed (a 256 MB write) before each of `reps` timed
    calls, CUDA events around the call only, median in ms."""
    global _flush
    if _flush is None:
        _flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    fn(); torch.cuda.synchronize()
    ev = []
    for _ in range(reps):
        _flush.zero_()
        s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); ev.append((s, e))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in ev)


def fmt(x, p=0):
    return "-" if x is None else f"{x:.{p}f}"
