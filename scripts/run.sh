#!/usr/bin/env bash
# Set up Veil and run it: builds the Chrome extension (load build/extension with
# "Load unpacked" at chrome://extensions, or use build/veil-extension.zip) and
# starts the local companion (RAG chat with privacy-aware decoding, the inversion
# auditor) on http://127.0.0.1:8765.  Extra arguments go to `veil serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. .venv/bin/activate
if [ -d build/extension ]; then
  echo "Chrome extension: $(pwd)/build/extension  (chrome://extensions > Developer mode > Load unpacked)"
fi
exec veil serve "$@"
