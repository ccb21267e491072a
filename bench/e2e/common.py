"""What the end-to-end benches share: the model-level timer and the table printer."""
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


def fmt(x, p=0):
    return "-" if x is None else f"{x:.{p}f}"
