import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))      # the package from the tree
GOLDEN = os.path.join(ROOT, "tests", "data", "s2_golden_masks.txt")


def golden_cases():
    """The golden masks (made by the S2 Triton library): name -> (kwargs, [H, M, N] uint8)."""
    import json
    import numpy as np
    cases, name, kw, shape, rows = {}, None, None, None, []
    with open(GOLDEN) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("case "):
                _, name, js = line.split(" ", 2)
                kw, rows = json.loads(js), []
            elif line.startswith("shape "):
                shape = tuple(int(x) for x in line.split()[1:])
            elif line == "end":
                cases[name] = (kw, np.array(rows, dtype=np.uint8).reshape(shape))
            else:
                rows.append([int(c) for c in line])
    return cases
