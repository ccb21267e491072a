#!/usr/bin/env python3
"""Runs a command that must fail in one known way: it passes only when the
command exits with EXIT and its standard error matches REGEX, so that a crash
(a signal), a usage error or another failure does not pass.

  expect_fail.py EXIT REGEX CMD [ARG...]
"""
import re
import subprocess
import sys


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    want, pattern, cmd = int(argv[0]), re.compile(argv[1]), argv[2:]
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    sys.stdout.write(p.stdout)
    sys.stdout.write(p.stderr)
    if p.returncode != want:
        how = f"signal {-p.returncode}" if p.returncode < 0 else f"exit {p.returncode}"
        print(f"expect_fail: {how}, expected exit {want}")
        return 1
    if not pattern.search(p.stderr):
        print(f"expect_fail: exit {want}, but stderr does not match {argv[1]!r}")
        return 1
    print(f"expect_fail: exit {want} with the expected message")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
