#!/usr/bin/env bash
# The GPU check, benchmarks/gpu_check.py (see its --help): run it from anywhere on a single-GPU machine. Python is
# $PYTHON, else the repository's .venv, else python3; the repository's coalign is imported whether or not it is
# installed. Options pass through: bash benchmarks/gpu_check.sh --layers 16. The paper configs' part is a run of
# its own (with the default parts it would pass 10 minutes): bash benchmarks/gpu_check.sh --parts paper
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
    if [[ -x .venv/bin/python ]]; then python=.venv/bin/python; else python=python3; fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" benchmarks/gpu_check.py "$@"
