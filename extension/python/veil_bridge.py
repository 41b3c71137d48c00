"""The JSON bridge between the extension's JavaScript and ``py_core`` in Pyodide.

The offscreen document calls :func:`handle` with one JSON string
``{"op": ..., "args": {...}}`` and gets one JSON string back:
``{"ok": true, "result": ...}`` or ``{"ok": false, "error": {"code", "message"}}``.
Everything here is stateless: RootGuard's state travels in and out with each
call and is kept by the service worker in ``chrome.storage.local``.

Randomness: ``py_core`` defaults to :class:`random.SystemRandom`, which in
Pyodide reads ``crypto.getRandomValues``; nothing here passes a seeded RNG.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from typing import Any

from py_core import krr
from py_core.accounting import krr_composed_epsilon
from py_core.errors import VeilError
from py_core.preview import preview as word_preview
from py_core.rootguard import api as rootguard
from py_core.sanitize import DEFAULT_DELTA, DEFAULT_HEADER, sanitize_prompt

MODES = ("text", "numbers", "both")


class BridgeError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def reseed() -> None:
    """Reseed the module-level Mersenne Twister after a memory-snapshot restore.

    ``py_core`` never uses it to protect data (it uses SystemRandom), but a
    snapshot would otherwise replay the same stream in every session.
    """
    random.seed()


def _header(value: Any) -> str | None:
    if value is None:
        return DEFAULT_HEADER
    if not isinstance(value, str):
        raise BridgeError("bad-request", "header must be text or null")
    return value or None


def _require_rootguard() -> Any:
    return rootguard


def _protect_numbers(text: str, rg: dict[str, Any] | None) -> dict[str, Any]:
    api = _require_rootguard()
    if not rg or not rg.get("profile") or rg.get("state") is None:
        raise BridgeError(
            "rootguard-not-set-up",
            "numbers mode is on but no RootGuard profile with your values is saved; "
            "set it up in Veil's options page (RootGuard section)",
        )
    return dict(api.protect_text(text, rg["profile"], rg.get("trueValues") or {}, rg["state"]))


_RECEIPT_FIELDS = (
    "epsilon_requested",
    "epsilon_per_char",
    "keep_probability",
    "chars_perturbed",
    "chars_protected",
    "epsilon_total_basic",
    "epsilon_total_composed",
    "delta",
    "header_included",
)


def _summary(receipt: Any, *, words: bool) -> dict[str, Any]:
    """The receipt as JSON; field by field (``dataclasses.asdict`` deep-copies every
    word and was half the cost of a 20,000-character send in Pyodide)."""
    out: dict[str, Any] = {name: getattr(receipt, name) for name in _RECEIPT_FIELDS}
    out["word_count"] = len(receipt.words)
    if words:
        out["words"] = [
            {
                "start": w.start,
                "end": w.end,
                "length": w.length,
                "survival_probability": w.survival_probability,
                "epsilon": w.epsilon,
            }
            for w in receipt.words
        ]
    return out


def _original_spans(text: str, replacements: list[Any]) -> list[tuple[int, int]]:
    """Where RootGuard's replaced values were in the text as typed.

    ``replacements`` give positions in the rewritten text; each shifts what follows by
    ``len(original) - len(replacement)``.  A span that does not read back as its
    original value is left out rather than guessed.
    """
    out = []
    shift = 0
    for r in sorted(replacements, key=lambda r: int(r["start"])):
        start = int(r["start"]) + shift
        end = start + len(r["original"])
        if text[start:end] == r["original"]:
            out.append((start, end))
        shift += len(r["original"]) - len(r["replacement"])
    return out


def _word_forecast(text: str, epsilon: float, replacements: list[Any]) -> list[dict[str, Any]]:
    """Per word of the text as typed: will a restorer recover it from what is sent?

    From :func:`py_core.preview.preview` (calibrated by ``veil eval krr``).  A word
    that overlaps a value RootGuard replaces is flagged ``rootguard``: what is sent
    there is the cached noisy value, not a k-RR perturbation of the word.
    """
    replaced = _original_spans(text, replacements)
    out = []
    for w in word_preview(text, epsilon):
        item = w.to_dict()
        item["rootguard"] = any(s < w.end and w.start < e for s, e in replaced)
        out.append(item)
    return out


def op_sanitize(args: dict[str, Any], *, preview: bool = False) -> dict[str, Any]:
    text = args.get("text")
    if not isinstance(text, str):
        raise BridgeError("bad-request", "text must be a string")
    mode = args.get("mode", "text")
    if mode not in MODES:
        raise BridgeError("bad-request", f"mode must be one of {MODES}; got {mode!r}")
    spans: list[list[int]] = []
    replacements: list[Any] = []
    state = None
    working = text
    if mode in ("numbers", "both"):
        protected = _protect_numbers(text, args.get("rootguard"))
        working = protected["text"]
        spans = [list(span) for span in protected.get("spans", [])]
        replacements = list(protected.get("replacements", []))
        state = protected.get("state")
    if mode == "numbers":
        out: dict[str, Any] = {
            "text": working,
            "perturbed": working,
            "receipt": None,
            "replacements": replacements,
            "rootguardState": state,
        }
        if preview:
            out["words"] = None  # no k-RR: every word is sent as typed
        return out
    # The tight composed bound costs ~95% of the time of a sanitization (it is
    # exact, from the privacy-loss distribution); the send path skips it and the
    # extension asks for it right after the send (op "composed_epsilon").
    compose = preview or bool(args.get("compose", False))
    result = sanitize_prompt(
        working,
        float(args.get("epsilon", 0)),
        protected_spans=spans,
        header=_header(args.get("header")),
        compose=compose,
    )
    out = {
        "text": result.text,
        "perturbed": result.perturbed,
        "receipt": _summary(result.receipt, words=preview),
        "replacements": replacements,
        "rootguardState": state,
    }
    if preview:
        # Only the popup's preview pays for the forecast; the send path never does.
        out["words"] = _word_forecast(text, result.receipt.epsilon_requested, replacements)
    return out


def op_explain(args: dict[str, Any]) -> dict[str, Any]:
    eps = krr.validate_epsilon(args.get("epsilon"))
    impl = krr.implementation(eps)
    p = impl.keep_probability
    return {
        "epsilonRequested": eps,
        "epsilonPerChar": impl.epsilon,
        "keepProbability": p,
        "changedShare": 1.0 - p,
        "nameIntact6": p**6,
        "k": krr.K,
    }


def op_composed_epsilon(args: dict[str, Any]) -> dict[str, Any]:
    """The tight composed ε of ``n`` k-RR characters (for a receipt finished after the send)."""
    n = args.get("n")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise BridgeError("bad-request", f"n must be an integer >= 0; got {n!r}")
    eps = krr.validate_epsilon(args.get("epsilon"))
    delta = float(args.get("delta", DEFAULT_DELTA))
    return {"epsilon_total_composed": krr_composed_epsilon(n, eps, delta), "delta": delta}


def op_ping(_args: dict[str, Any]) -> dict[str, Any]:
    return {
        "python": sys.version.split()[0],
        "rootguard": True,
        "defaultHeader": DEFAULT_HEADER,
    }


def op_rootguard_default(_args: dict[str, Any]) -> dict[str, Any]:
    api = _require_rootguard()
    return {"profile": api.DEFAULT_PROFILE}


def _checked_profile(api: Any, profile: Any) -> Any:
    problems = api.validate_profile(profile)
    if problems:
        raise BridgeError(
            "invalid-profile", "the RootGuard profile has problems: " + "; ".join(problems)
        )
    return profile


def _view(api: Any, profile: Any, state: Any) -> dict[str, Any]:
    return {
        "state": state,
        "noisy": api.noisy_values(profile, state),
        "ledger": api.ledger(state),
        "describe": api.describe(profile),
    }


def op_rootguard_init(args: dict[str, Any]) -> dict[str, Any]:
    api = _require_rootguard()
    profile = _checked_profile(api, args.get("profile"))
    state = api.init_state(profile, args.get("trueValues") or {})
    return _view(api, profile, state)


def op_rootguard_reset(args: dict[str, Any]) -> dict[str, Any]:
    api = _require_rootguard()
    profile = _checked_profile(api, args.get("profile"))
    names = args.get("names")
    state = api.reset_state(profile, args.get("trueValues") or {}, args.get("state"), names=names)
    return _view(api, profile, state)


def op_rootguard_view(args: dict[str, Any]) -> dict[str, Any]:
    api = _require_rootguard()
    return _view(api, args.get("profile"), args.get("state"))


def op_rootguard_describe(args: dict[str, Any]) -> dict[str, Any]:
    api = _require_rootguard()
    return {"describe": api.describe(_checked_profile(api, args.get("profile")))}


OPS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "ping": op_ping,
    "sanitize": op_sanitize,
    "preview": lambda args: op_sanitize(args, preview=True),
    "explain": op_explain,
    "composed_epsilon": op_composed_epsilon,
    "rootguard_default": op_rootguard_default,
    "rootguard_init": op_rootguard_init,
    "rootguard_reset": op_rootguard_reset,
    "rootguard_view": op_rootguard_view,
    "rootguard_describe": op_rootguard_describe,
}


def handle(request_json: str) -> str:
    """Run one request; never raises (errors come back in the envelope)."""
    try:
        request = json.loads(request_json)
        op = OPS.get(request.get("op"))
        if op is None:
            raise BridgeError("unknown-op", f"unknown op {request.get('op')!r}")
        result = op(request.get("args") or {})
        return json.dumps({"ok": True, "result": result})
    except BridgeError as exc:
        return json.dumps({"ok": False, "error": {"code": exc.code, "message": str(exc)}})
    except VeilError as exc:
        code = type(exc).__name__
        return json.dumps({"ok": False, "error": {"code": code, "message": str(exc)}})
    except Exception as exc:  # the core must answer, never hang the page
        message = f"{type(exc).__name__}: {exc}"
        return json.dumps({"ok": False, "error": {"code": "internal", "message": message}})
