#!/usr/bin/env bash
# Run the S2 Triton library's own tests (its repository's tests/, at
# DKERNEL_TESTS) against s2c: a `dkernel` package that only re-exports s2c
# stands in for the library, so the tests run unchanged but for the import.
# Their reference is their own (dense attention in torch).  Needs a GPU.
#
#   DKERNEL_TESTS=DIR scripts/dkernel_tests.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
tests=${DKERNEL_TESTS:?set DKERNEL_TESTS to the tests folder of the S2 Triton library}
shim=$(mktemp -d)
trap 'rm -rf "$shim"' EXIT
mkdir "$shim/dkernel"
echo 'from s2c import *  # noqa' >"$shim/dkernel/__init__.py"
echo 'from s2c.interface import *  # noqa' >"$shim/dkernel/interface.py"
echo 'from s2c.utils import *  # noqa' >"$shim/dkernel/utils.py"
PYTHONPATH="$shim:$PWD/python${PYTHONPATH:+:$PYTHONPATH}" python3 -m pytest -p no:cacheprovider -q -rfE \
    --rootdir "$shim" "$tests" "$@"
