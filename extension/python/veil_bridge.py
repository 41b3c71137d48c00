"""The JSON bridge between the extension's JavaScript and ``py_core`` in Pyodide.

The offscreen document calls :func:`handle` with one JSON string
``{"op": ..., "args": {...}}`` and gets one JSON string back:
``{"ok": true, "result": ...}`` or ``{"ok": false, "error": {"code", "message"}}``, the
code one of :data:`py_core.errors.ERROR_CODES` (a py_core error's own ``code``).
Everything here is transport: it checks the request's JSON types, calls
``py_core`` (which decides: :func:`py_core.protect.protect` for a prompt) and
serialises the answer.  It is stateless: RootGuard's state travels in and out
with each call and is kept by the service worker in ``chrome.storage.local``.

Randomness: ``py_core`` defaults to :class:`random.SystemRandom`, which in
Pyodide reads ``crypto.getRandomValues``; nothing here passes a seeded RNG.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from typing import Any

from py_core import alphabets, krr, memo, protect
from py_core.accounting import KRREvent, KrrPldAccountant
from py_core.errors import ERROR_CODES, SetupRequiredError, VeilError
from py_core.rootguard import api as rootguard
from py_core.sanitize import DEFAULT_DELTA, DEFAULT_HEADER


class BridgeError(Exception):
    """A request the bridge refuses, with a code of :data:`py_core.errors.ERROR_CODES`."""

    def __init__(self, code: str, message: str) -> None:
        if code not in ERROR_CODES:
            raise ValueError(f"{code!r} is not in py_core.errors.ERROR_CODES")
        super().__init__(message)
        self.code = code


def reseed() -> None:
    """Reseed the module-level Mersenne Twister after a memory-snapshot restore.

    ``py_core`` never uses it to protect data (it uses SystemRandom), but a
    snapshot would otherwise replay the same stream in every session.
    """
    random.seed()


def _require_rootguard() -> Any:
    return rootguard


def _rootguard(value: Any) -> protect.RootGuardSetup | None:
    """The stored ``{profile, trueValues, state}``; None when RootGuard is not set up."""
    if not value or not value.get("profile") or value.get("state") is None:
        return None
    return protect.RootGuardSetup(
        profile=value["profile"], state=value["state"], true_values=value.get("trueValues") or {}
    )


def op_sanitize(args: dict[str, Any], *, preview: bool = False) -> dict[str, Any]:
    """Ops "sanitize" (the send) and "preview" (the popup: full receipt and word forecast)."""
    text = args.get("text")
    if not isinstance(text, str):
        raise BridgeError("invalid_request", "text must be a string")
    mode = args.get("mode", "text")
    if mode not in protect.MODE_NAMES:
        raise BridgeError(
            "invalid_request", f"mode must be one of {protect.MODE_NAMES}; got {mode!r}"
        )
    header = args.get("header")
    if header is not None and not isinstance(header, str):
        raise BridgeError("invalid_request", "header must be text or null")
    alphabet_mode = args.get("alphabets") or protect.DEFAULT_ALPHABETS
    header_language = args.get("headerLanguage") or protect.DEFAULT_HEADER_LANGUAGE
    settings = protect.SiteSettings(
        mode=mode,
        epsilon=args.get("epsilon", 0),
        header=header,
        rootguard=_rootguard(args.get("rootguard")),
        alphabets=alphabet_mode,
        header_language=header_language,
    )
    # The word memo: the stored variants of this prompt's words ({word: [variant]});
    # absent (null) only where the caller chose to run without one (veil perturb, tests).
    words_memo = None if args.get("memo") is None else memo.WordMemo(args.get("memo"))
    try:
        # The send path skips the tight composed bound (~95% of the time of a
        # sanitization); the extension asks for it after the send (op "composed_epsilon").
        result = protect.protect(
            text,
            settings,
            compose=preview or bool(args.get("compose", False)),
            forecast=preview,
            memo=words_memo,
        )
    except SetupRequiredError as exc:
        raise BridgeError(
            exc.code, f"{exc}; set it up in Veil's options page (RootGuard section)"
        ) from exc
    receipt = result.receipt
    out: dict[str, Any] = {
        "text": result.text,
        "perturbed": result.perturbed,
        "receipt": None if receipt is None else protect.receipt_json(receipt, words=preview),
        "replacements": list(result.replacements),
        "rootguardState": result.state,
    }
    if preview:
        # None in numbers mode: no k-RR, every word is sent as typed.
        out["words"] = None if result.words is None else [w.to_dict() for w in result.words]
    if words_memo is not None:
        # New draws to store (a preview's too: what was shown is what will be sent).
        out["memoAdded"] = words_memo.added
        site = args.get("siteId")
        if not preview and receipt is not None:
            total, site_ledger, seen = memo.account_send(
                words_memo, str(site or ""), args.get("ledgerTotal"), args.get("ledgerSite")
            )
            out["ledgerTotal"], out["ledgerSite"], out["memoSeen"] = total, site_ledger, seen
    return out


def op_explain(args: dict[str, Any]) -> dict[str, Any]:
    """What ε means in plain figures: ASCII (both modes) and each script (per-script mode)."""
    eps = krr.validate_epsilon(args.get("epsilon"))
    impl = krr.implementation(eps)
    p = impl.keep_probability
    costs = alphabets.cost_table(eps, False)
    scripts = {
        name: {
            "slots": list(cost.slots),
            "epsilonPerChar": cost.epsilon,
            "keepProbability": cost.keep_probability,
        }
        for name, cost in costs.items()
        if name not in ("space", "other", "latin")
    }
    accented = alphabets.cost_table(eps, True)["latin"]
    scripts["latin"] = {
        "slots": list(accented.slots),
        "epsilonPerChar": accented.epsilon,
        "keepProbability": accented.keep_probability,
    }
    return {
        "epsilonRequested": eps,
        "epsilonPerChar": impl.epsilon,
        "keepProbability": p,
        "changedShare": 1.0 - p,
        "nameIntact6": p**6,
        "k": krr.K,
        "scripts": scripts,
        # A three-syllable Korean name (김민준) arrives intact with this probability.
        "koreanNameIntact3": costs["hangul"].keep_probability ** 3,
    }


def op_composed_epsilon(args: dict[str, Any]) -> dict[str, Any]:
    """The tight composed ε of ``n`` k-RR characters (for a receipt finished after the send)."""
    delta = float(args.get("delta", DEFAULT_DELTA))
    slots = args.get("slots")
    accountant = KrrPldAccountant()
    if slots:
        # A per-script receipt: one k-RR event per slot alphabet (its own ε and k).
        if not isinstance(slots, list) or not all(isinstance(s, dict) for s in slots):
            raise BridgeError("invalid_request", "slots must be the receipt's list of slot counts")
        for slot in slots:
            used, k = slot.get("used"), slot.get("k")
            if isinstance(used, bool) or not isinstance(used, int) or used < 0:
                raise BridgeError(
                    "invalid_request", f"a slot's used must be an integer >= 0; got {used!r}"
                )
            if isinstance(k, bool) or not isinstance(k, int):
                raise BridgeError("invalid_request", f"a slot's k must be an integer; got {k!r}")
            accountant.compose(KRREvent(krr.validate_epsilon(slot.get("epsilon")), used, k))
        return {"epsilon_total_composed": accountant.get_epsilon(delta), "delta": delta}
    n = args.get("n")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise BridgeError("invalid_request", f"n must be an integer >= 0; got {n!r}")
    eps = krr.validate_epsilon(args.get("epsilon"))
    composed = accountant.compose(KRREvent(eps, n)).get_epsilon(delta)
    return {"epsilon_total_composed": composed, "delta": delta}


def op_ledger(args: dict[str, Any]) -> dict[str, Any]:
    """The lifetime ledger's figures: ``{"total": L, "sites": {id: L}}`` -> the same, summarised."""
    delta = float(args.get("delta", DEFAULT_DELTA))
    sites = args.get("sites") or {}
    if not isinstance(sites, dict):
        raise BridgeError("invalid_request", "sites must map site ids to ledgers")
    return {
        "total": memo.ledger_summary(args.get("total"), delta),
        "sites": {name: memo.ledger_summary(ledger, delta) for name, ledger in sites.items()},
    }


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
            "invalid_profile", "the RootGuard profile has problems: " + "; ".join(problems)
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
    """The stored record for the pages: ``_view`` plus what was spent, both ways, and the
    values written in prompts that differ from the stored ones (offered for storing)."""
    api = _require_rootguard()
    profile, state = args.get("profile"), args.get("state")
    return {
        **_view(api, profile, state),
        "spent": api.spent(profile, state),
        "drifts": api.drifts(profile, args.get("trueValues") or {}, state),
    }


def op_rootguard_add(args: dict[str, Any]) -> dict[str, Any]:
    """Store values later (``values``: root -> true value); only they are drawn.

    A value already written in a prompt takes that draw (no cost); every other root and
    draw is unchanged (:func:`py_core.rootguard.api.add_values`).
    """
    api = _require_rootguard()
    profile = _checked_profile(api, args.get("profile"))
    out = api.add_values(
        profile, args.get("trueValues") or {}, args.get("state"), args.get("values") or {}
    )
    return {
        **_view(api, profile, out["state"]),
        "trueValues": out["trueValues"],
        "added": out["added"],
        "updated": out["updated"],
        "adopted": out["adopted"],
    }


def op_rootguard_import_check(args: dict[str, Any]) -> dict[str, Any]:
    """Check a record to import against the one held here: new, same, extends, or conflict.

    The incoming record must be whole and usable (:func:`py_core.rootguard.api.check_record`);
    ``here`` is the extension's record or null.
    """
    api = _require_rootguard()
    record = api.check_record(args.get("record"), "the file")
    here = args.get("here")
    relation, reasons = ("new", []) if not here else api.compare_records(here, record)
    view = _view(api, record["profile"], record["state"])
    return {"relation": relation, "reasons": reasons, "record": record, **view}


def op_rootguard_describe(args: dict[str, Any]) -> dict[str, Any]:
    api = _require_rootguard()
    return {"describe": api.describe(_checked_profile(api, args.get("profile")))}


OPS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "ping": op_ping,
    "sanitize": op_sanitize,
    "preview": lambda args: op_sanitize(args, preview=True),
    "explain": op_explain,
    "composed_epsilon": op_composed_epsilon,
    "ledger": op_ledger,
    "rootguard_default": op_rootguard_default,
    "rootguard_init": op_rootguard_init,
    "rootguard_reset": op_rootguard_reset,
    "rootguard_view": op_rootguard_view,
    "rootguard_describe": op_rootguard_describe,
    "rootguard_import_check": op_rootguard_import_check,
    "rootguard_add": op_rootguard_add,
}


def handle(request_json: str) -> str:
    """Run one request; never raises (errors come back in the envelope)."""
    try:
        request = json.loads(request_json)
        op = OPS.get(request.get("op"))
        if op is None:
            raise BridgeError("unknown_op", f"unknown op {request.get('op')!r}")
        result = op(request.get("args") or {})
        return json.dumps({"ok": True, "result": result})
    except BridgeError as exc:
        return json.dumps({"ok": False, "error": {"code": exc.code, "message": str(exc)}})
    except VeilError as exc:
        return json.dumps({"ok": False, "error": {"code": exc.code, "message": str(exc)}})
    except Exception as exc:  # the core must answer, never hang the page
        message = f"{type(exc).__name__}: {exc}"
        return json.dumps({"ok": False, "error": {"code": "internal_error", "message": message}})
