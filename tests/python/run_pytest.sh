#!/usr/bin/env bash
# Run pytest on DIR with the first Python that has pytest, numpy and torch
# (Debian's /usr/bin/python3 holds python3-torch; a virtualenv's python may
# not); 77 (skipped) when none has them.
set -u
dir=$1
for py in ${S2C_PYTHON:-} /usr/bin/python3 python3; do
    [ -n "$py" ] || continue
    if "$py" -c 'import pytest, numpy, torch' 2>/dev/null; then
        "$py" -m pytest -q -p no:cacheprovider "$dir"
        rc=$?
        [ $rc -eq 5 ] && exit 77   # no test collected
        exit $rc
    fi
done
echo "python tests skipped: no python3 with pytest, numpy and torch (Debian: python3-pytest python3-numpy python3-torch)"
exit 77
