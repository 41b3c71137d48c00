"""``veil audit``: invert hidden states back to text, and set the auditor up for a model.

veil audit models                             # which models can be audited, which layers are ready
veil audit setup [--model M] [--layer K]      # once per model and layer, resumable (minutes)
veil audit invert --text "..."                # computes the states, then inverts them
veil audit invert --states leaked.pt          # .pt, .npy or .safetensors, shape (T, d)
veil audit invert --text "..." --sigma 0.01   # Gaussian noise on the states (a defense)
veil audit invert --text "..." --method gradient --steps 1000 --candidates 2000
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from companion.audit import PUBLISHED


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "audit", help="hidden-state inversion auditor: how much text can states reveal?"
    )
    actions = parser.add_subparsers(dest="audit_command", required=True)

    models = actions.add_parser(
        "models", help="list the models that can be audited, and ready layers"
    )
    models.add_argument("--json", action="store_true", help="print JSON instead of a table")
    models.set_defaults(func=_models)

    setup = actions.add_parser("setup", help="train the per-model ranker (and position-0 table)")
    _common(setup)
    setup.add_argument("--force", action="store_true", help="discard a previous setup and redo it")
    setup.add_argument("--sequences", type=int, default=None, help="training sequences")
    setup.add_argument("--epochs", type=int, default=None, help="ranker training epochs")
    setup.add_argument(
        "--thorough",
        action="store_true",
        help="the first setup's configuration: text the model generates, the full softmax, "
        "always the position-0 table (about 15 minutes for SmolLM2-135M on two cores)",
    )
    setup.set_defaults(func=_setup)

    invert = actions.add_parser("invert", help="recover the text behind hidden states")
    _common(invert)
    source = invert.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="text whose states are computed and then inverted")
    source.add_argument("--text-file", help="file holding that text (UTF-8)")
    source.add_argument("--states", help="saved hidden states: .pt, .npy or .safetensors, (T, d)")
    invert.add_argument("--key", help="tensor name inside a .safetensors/.pt dict")
    invert.add_argument(
        "--method", choices=("fast", "gradient"), default="fast", help="default: fast exact path"
    )
    invert.add_argument("--sigma", type=float, default=0.0, help="Gaussian noise added to states")
    invert.add_argument("--tolerance", type=float, default=None, help="max-abs proof tolerance")
    invert.add_argument(
        "--max-candidates", type=int, default=None, help="cap on candidates per position"
    )
    invert.add_argument(
        "--steps", type=int, default=PUBLISHED.steps, help="gradient method: Adam steps K"
    )
    invert.add_argument(
        "--candidates", type=int, default=PUBLISHED.candidates, help="gradient method: C"
    )
    invert.add_argument(
        "--lr", type=float, default=PUBLISHED.learning_rate, help="gradient method: learning rate"
    )
    invert.add_argument("--seed", type=int, default=None, help="seed (noise, gradient init)")
    invert.add_argument("--json", dest="json_out", help="write the full result as JSON here")
    invert.add_argument(
        "--save-states",
        help="also save the states that were inverted (.safetensors/.pt/.npy) with the model id",
    )
    invert.set_defaults(func=_invert)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None, help="model spec (default: SmolLM2-135M)")
    parser.add_argument(
        "--layer", type=int, default=-1, help="-1: last layer after the final norm; k: block k"
    )
    parser.add_argument(
        "--source",
        choices=("hidden", "keys", "values"),
        default="hidden",
        help="what leaked: hidden states (default), or block --layer's cached keys or values",
    )
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")


def _bar(desc: str) -> Any:
    from tqdm import tqdm

    return tqdm(desc=desc, unit="tok", file=sys.stderr, dynamic_ncols=True)


def _setup(args: argparse.Namespace) -> int:
    from companion.audit.ranker import SetupConfig
    from companion.audit.service import open_target, setup_with_bar

    target = open_target(
        args.model, layer=args.layer, device=args.device, threads=args.threads, source=args.source
    )
    overrides: dict[str, Any] = {}
    if args.sequences is not None:
        overrides["sequences"] = args.sequences
    if args.epochs is not None:
        overrides["epochs"] = args.epochs
    config = SetupConfig.thorough(**overrides) if args.thorough else SetupConfig(**overrides)
    artifacts = setup_with_bar(target, config, force=args.force)
    meta = artifacts.meta
    print(
        f"set up {target.key} in {meta['setup_seconds']:.0f} s; ranker on held-out training "
        f"text: top-1 {meta['ranker']['top1']:.3f}, top-8 {meta['ranker']['top8']:.3f}, "
        f"top-512 {meta['ranker']['top512']:.3f}"
    )
    return 0


def _models(args: argparse.Namespace) -> int:
    from companion.audit.catalog import auditable_models

    models = auditable_models()
    if args.json:
        print(json.dumps([m.to_dict() for m in models], indent=2))
        return 0
    for m in models:
        if m.error:
            print(f"{m.id}  ({m.source}, {m.format})  cannot be read: {m.error}")
            continue
        layers = ", ".join(
            f"{'last' if r.layer == -1 else f'block {r.layer}'}"
            + ("" if r.source == "hidden" else f" {r.source}")
            + (f" ({r.setup_seconds:.0f} s setup)" if r.setup_seconds is not None else "")
            for r in m.ready
        )
        state = f"ready: {layers}" if m.ready else "not set up"
        print(f"{m.id}  ({m.source}, {m.format})  {state}")
        if not m.ready:
            print(f"    veil audit setup --model {m.id}")
    return 0


def _invert(args: argparse.Namespace) -> int:
    from companion.audit.service import InversionRequest, open_target, run_inversion

    target = open_target(
        args.model, layer=args.layer, device=args.device, threads=args.threads, source=args.source
    )
    text = args.text
    if args.text_file:
        with open(args.text_file, encoding="utf-8") as handle:
            text = handle.read()
    request = InversionRequest(
        text=text,
        states_path=args.states,
        states_key=args.key,
        method=args.method,
        sigma=args.sigma,
        tolerance=args.tolerance,
        max_candidates=args.max_candidates,
        steps=args.steps,
        candidates=args.candidates,
        learning_rate=args.lr,
        seed=args.seed,
    )
    bars: dict[str, Any] = {}

    def progress(event: dict[str, Any]) -> None:
        kind = event["kind"]
        if kind == "setup":
            bar = bars.get(event["stage"])
            if bar is None:
                for old in bars.values():
                    old.close()
                bar = bars[event["stage"]] = _bar(event["stage"])
                bar.total = event["total"]
            bar.n = event["done"]
            bar.refresh()
        elif kind == "position":
            bar = bars.get("invert")
            if bar is None:
                for old in bars.values():
                    old.close()
                bar = bars["invert"] = _bar("inverting")
                bar.total = event["total"]
            bar.update(1)
            bar.set_postfix_str(
                f"{event['token']!r} {event['status']} loss={event['discrete_loss']:.1e}"
            )

    if args.save_states:
        from companion.audit.inputs import save_states
        from companion.audit.service import prepare_states

        states, _ = prepare_states(target, request)
        save_states(args.save_states, states, identity=target.identity, layer=target.layer)
    result = run_inversion(target, request, progress=progress)
    for bar in bars.values():
        bar.close()
    print(_summary(result))
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as handle:
            json.dump(result.to_dict(), handle, indent=2)
    return 0


def _summary(result: Any) -> str:
    lines = [
        f"recovered ({result.method}, {len(result.positions)} tokens, {result.seconds:.1f} s):"
    ]
    lines.append(result.text)
    lines.append(
        f"cumulative discrete loss {result.cumulative_loss:.3e}; "
        + (
            "every token proven"
            if result.proven
            else f"flagged positions {result.flagged_positions}"
        )
    )
    if result.exact_match is not None:
        lines.append(
            f"exact match: {result.exact_match}; token accuracy {result.token_accuracy:.3f}"
        )
    return "\n".join(lines)
