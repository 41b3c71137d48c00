"""A companion served the way `veil serve` serves it, with a tiny model behind the audit routes.

``python -m tests.companion.hardening_server PORT HOME``: writes ``HOME/ready`` once
it listens (tests/companion/test_hardening_audit.py sends it SIGTERM).
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path


def main() -> None:
    import torch

    from companion.audit.tiny import make_tiny_model
    from companion.commands.serve import run_server
    from companion.models import load_causal_lm
    from tests.companion.audit_support import audit_app, opener_for

    port, home = int(sys.argv[1]), Path(sys.argv[2])
    torch.set_num_threads(1)
    loaded = load_causal_lm(str(make_tiny_model(home / "tiny")), device="cpu")
    app = audit_app(home, opener_for(loaded), port=port)

    def announce() -> None:
        import httpx

        for _ in range(600):
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
            except httpx.HTTPError:
                time.sleep(0.1)
                continue
            (home / "ready").write_text("ok")
            return

    threading.Thread(target=announce, daemon=True).start()
    run_server(app, "127.0.0.1", port, log_level="warning")


if __name__ == "__main__":
    main()
