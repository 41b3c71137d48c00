#!/usr/bin/env bash
# Set up everything and run every check: lint, types, unit tests, py_core inside
# Pyodide, the real-model tests, the end-to-end tests in Chromium, and each
# evaluation's smoke mode.  Exit code is non-zero if anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
. .venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export VEIL_REQUIRE_OPEN_WEBUI=1  # set up above: tests/companion/test_open_webui.py must run
export VEIL_REQUIRE_VLLM=1  # likewise vLLM: tests/companion/test_vllm_engine.py must run

start=$(date +%s)
step() { echo; echo "== $* ($(( $(date +%s) - start )) s)"; }

step "ruff"
ruff check .
ruff format --check .
step "mypy"
mypy
step "extension logic (node --test)"
node --test extension/test/
step "extension lint (eslint) and types (tsc --checkJs)"
npx eslint
npx tsc -p tsconfig.json
step "pytest (unit, Pyodide, real models, end-to-end)"
python -m pytest -q
step "evaluations, smoke mode"
smoke_dir=$(mktemp -d)
for name in $(python -c "from evals.cli import EVALUATIONS; print(' '.join(EVALUATIONS))"); do
  step "veil eval $name --smoke"
  veil eval "$name" --smoke --out "$smoke_dir/$name"
done
step "veil eval rootguard --agents --smoke"
veil eval rootguard --agents --smoke --out "$smoke_dir/rootguard-agents"
step "benchmark: k-RR (CPython and Pyodide)"
python bench/krr_bench.py
python bench/ledger_bench.py
node bench/krr_bench_pyodide.mjs
step "benchmark: RAG store at 10k chunks"
python bench/rag_bench.py --sizes 10000
step "all checks passed"
