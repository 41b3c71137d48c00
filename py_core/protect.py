"""Protect one prompt with a site's settings: what to send, its receipt, the spans, the new state.

Veil decides here, and only here, how a prompt is protected; the extension's
bridge and ``veil perturb`` are transport around :func:`protect`.

* A **mode** says which steps run: ``text`` perturbs every character with k-RR
  (:mod:`py_core.sanitize`); ``numbers`` replaces the person's declared values by
  RootGuard's cached noisy values (:mod:`py_core.rootguard`) and sends the rest
  as typed; ``both`` does RootGuard first, then k-RR everywhere except the
  replaced values (public by post-processing).
* The **header** setting: ``None`` sends the restoration header
  (:data:`py_core.language.HEADERS`) in the site's **header language** --
  ``"auto"`` (the prompt's dominant language, :func:`py_core.language.detect`;
  this shows the detected language) or a fixed one -- ``""`` sends none, any
  other text is sent as given (k-RR modes only: a ``numbers`` prompt has no
  typos to restore).
* **alphabets**: ``"scripts"`` perturbs each character among characters of its
  own script (:mod:`py_core.alphabets`; the script stays visible), ``"ascii"``
  everything into printable ASCII (Veil's original mechanism; script hidden).
* **ε limits**: what a person may choose for a site (:data:`EPSILON`).  k-RR
  itself accepts any ε >= 0 (:func:`py_core.krr.validate_epsilon`), so
  experiments and ``veil perturb`` may go outside them; above
  :data:`py_core.krr.MAX_IMPLEMENTED_EPSILON` no higher ε is implemented.

The modes, the ε limits and the header's two special values are data, in
``site_settings.json`` beside this module, so the extension's settings read the
very same file (``extension/src/settings.js`` imports it; esbuild inlines it).

RootGuard's state goes in and the new state comes out: a value mentioned for the
first time is drawn once and cached there; the caller must keep the new state,
or the next prompt would draw again.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from py_core import alphabets, krr, language
from py_core.errors import InvalidParameterError, SetupRequiredError, StateError
from py_core.memo import WordMemo
from py_core.preview import LIKELY_RESTORED, WordPreview
from py_core.preview import preview as word_preview
from py_core.rootguard import api as rootguard
from py_core.sanitize import DEFAULT_DELTA, DEFAULT_HEADER, Receipt, sanitize_prompt

__all__ = [
    "DEFAULT_ALPHABETS",
    "DEFAULT_HEADER_LANGUAGE",
    "DEFAULT_MODE",
    "EPSILON",
    "HEADER_DEFAULT",
    "HEADER_LANGUAGES",
    "HEADER_NONE",
    "MODES",
    "MODE_NAMES",
    "RECEIPT_FIELDS",
    "SITE_SETTINGS_PATH",
    "EpsilonRange",
    "Mode",
    "Protection",
    "RootGuardSetup",
    "SiteSettings",
    "WordForecast",
    "header_language",
    "header_text",
    "protect",
    "receipt_json",
    "typed_spans",
]

SITE_SETTINGS_PATH = Path(__file__).with_name("site_settings.json")


@dataclass(frozen=True, slots=True)
class Mode:
    """One protection mode: which of k-RR and RootGuard it runs."""

    name: str
    krr: bool
    rootguard: bool
    description: str

    def __post_init__(self) -> None:
        if not isinstance(self.krr, bool) or not isinstance(self.rootguard, bool):
            raise InvalidParameterError(
                f"mode {self.name!r}: krr and rootguard must be true or false; "
                f"got {self.krr!r} and {self.rootguard!r}"
            )
        if not (self.krr or self.rootguard):
            raise InvalidParameterError(f"mode {self.name!r} runs neither k-RR nor RootGuard")


@dataclass(frozen=True, slots=True)
class EpsilonRange:
    """The ε per character a person may choose for a site, and the starting value."""

    min: float
    max: float
    step: float
    default: float

    def __post_init__(self) -> None:
        for name in ("min", "max", "step", "default"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidParameterError(f"epsilon {name} must be a number; got {value!r}")
            if not math.isfinite(value) or value <= 0:
                raise InvalidParameterError(f"epsilon {name} must be finite and > 0; got {value!r}")
            object.__setattr__(self, name, float(value))
        if not self.min <= self.default <= self.max:
            raise InvalidParameterError(
                f"epsilon default {self.default!r} is outside [{self.min!r}, {self.max!r}]"
            )
        if self.max > krr.MAX_IMPLEMENTED_EPSILON:
            raise InvalidParameterError(
                f"epsilon max {self.max!r} is above what k-RR implements "
                f"({krr.MAX_IMPLEMENTED_EPSILON!r}): a higher setting would change nothing"
            )

    def contains(self, epsilon: float) -> bool:
        """Whether ``epsilon`` is a value a person may choose for a site."""
        return self.min <= epsilon <= self.max


def _load(
    path: Path,
) -> tuple[Mapping[str, Mode], str, EpsilonRange, Any, Any, str, str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != "veil.site_settings" or data.get("version") != 1:
            raise StateError(f"{path.name} is not version 1 of veil.site_settings")
        modes = {
            name: Mode(name, spec["krr"], spec["rootguard"], spec["description"])
            for name, spec in data["modes"].items()
        }
        default_mode = data["default_mode"]
        epsilon = EpsilonRange(**data["epsilon"])
        header_default, header_none = data["header"]["default"], data["header"]["none"]
        alphabet_choices = tuple(data["alphabets"]["choices"])
        default_alphabets = data["alphabets"]["default"]
        language_choices = tuple(data["header_language"]["choices"])
        default_language = data["header_language"]["default"]
    except StateError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StateError(f"py_core's {path.name} is missing or malformed: {exc}") from exc
    if default_mode not in modes:
        raise StateError(f"{path.name}: default_mode {default_mode!r} is not one of {list(modes)}")
    for value in (header_default, header_none):
        if value is not None and not isinstance(value, str):
            raise StateError(f"{path.name}: a header value must be text or null; got {value!r}")
    if header_default == header_none:
        raise StateError(f"{path.name}: the default and no-header values are both {header_none!r}")
    if set(alphabet_choices) != set(alphabets.ALPHABET_MODES) or default_alphabets not in (
        alphabet_choices
    ):
        raise StateError(
            f"{path.name}: alphabets must offer {alphabets.ALPHABET_MODES} with one as default; "
            f"got {alphabet_choices} (default {default_alphabets!r})"
        )
    if set(language_choices) != {language.AUTO, *language.LANGUAGES} or (
        default_language not in language_choices
    ):
        raise StateError(
            f"{path.name}: header_language must offer {(language.AUTO, *language.LANGUAGES)} "
            f"with one as default; got {language_choices} (default {default_language!r})"
        )
    return (
        MappingProxyType(modes),
        default_mode,
        epsilon,
        header_default,
        header_none,
        default_alphabets,
        default_language,
    )


(
    MODES,
    DEFAULT_MODE,
    EPSILON,
    HEADER_DEFAULT,
    HEADER_NONE,
    DEFAULT_ALPHABETS,
    DEFAULT_HEADER_LANGUAGE,
) = _load(SITE_SETTINGS_PATH)
#: What a site's header language may be set to.
HEADER_LANGUAGES: tuple[str, ...] = (language.AUTO, *language.LANGUAGES)
#: The mode names in the order the settings list them.
MODE_NAMES: tuple[str, ...] = tuple(MODES)


def header_language(setting: str, text: str) -> str:
    """The header's language: ``setting`` itself, or for ``"auto"`` the prompt's (detected)."""
    if setting not in HEADER_LANGUAGES:
        raise InvalidParameterError(
            f"header_language must be one of {HEADER_LANGUAGES}; got {setting!r}"
        )
    return language.detect(text) if setting == language.AUTO else setting


def header_text(setting: str | None, lang: str = "en") -> str | None:
    """The header sent for a header setting (``None`` when no header is sent).

    The default header is the restoration header in ``lang``
    (:data:`py_core.language.HEADERS`; English: :data:`py_core.sanitize.DEFAULT_HEADER`).
    """
    if setting is not None and not isinstance(setting, str):
        raise InvalidParameterError(
            f"header must be text or None; got {setting!r} ({type(setting).__name__})"
        )
    if setting == HEADER_DEFAULT:
        return DEFAULT_HEADER if lang == "en" else language.header_for(lang)
    if setting == HEADER_NONE:
        return None
    return setting


@dataclass(frozen=True, slots=True)
class RootGuardSetup:
    """What RootGuard needs: the profile, the person's true values, its state (the cache)."""

    profile: Mapping[str, Any]
    state: Mapping[str, Any]
    true_values: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("profile", "state", "true_values"):
            value = getattr(self, name)
            if not isinstance(value, Mapping):
                raise InvalidParameterError(
                    f"RootGuard {name} must be an object; got {type(value).__name__}"
                )


@dataclass(frozen=True, slots=True)
class SiteSettings:
    """A person's settings for one site, as far as protecting a prompt goes."""

    mode: str = DEFAULT_MODE
    epsilon: float = EPSILON.default
    header: str | None = HEADER_DEFAULT  # see header_text
    rootguard: RootGuardSetup | None = None  # needed by the modes that run RootGuard
    alphabets: str = DEFAULT_ALPHABETS  # "fold", "scripts" or "ascii" (py_core.alphabets)
    header_language: str = DEFAULT_HEADER_LANGUAGE  # "auto" or one of py_core.language's

    def __post_init__(self) -> None:
        if self.mode not in MODE_NAMES:  # a tuple: an unhashable value is refused too
            raise InvalidParameterError(f"mode must be one of {MODE_NAMES}; got {self.mode!r}")
        object.__setattr__(self, "epsilon", krr.validate_epsilon(self.epsilon))
        header_text(self.header)
        alphabets.validate_mode(self.alphabets)
        if self.header_language not in HEADER_LANGUAGES:
            raise InvalidParameterError(
                f"header_language must be one of {HEADER_LANGUAGES}; got {self.header_language!r}"
            )
        if self.rootguard is not None and not isinstance(self.rootguard, RootGuardSetup):
            raise InvalidParameterError(
                f"rootguard must be a RootGuardSetup or None; got {type(self.rootguard).__name__}"
            )


class WordForecast(NamedTuple):
    """One typed word: its restoration forecast, and whether RootGuard replaces it.

    ``sent`` is the word's form in the draw made with the forecast (None where
    the word overlaps a replaced value).  ``preview`` is the forecast made before
    the draw; :meth:`to_dict` (what the popup and the side panel show) labels a
    word whose draw left it unchanged "likely restored" with probability 1: it
    *is* sent as typed, and a label must agree with the draw shown beside it.
    ``forecast_probability`` keeps the forecast before the draw.
    """

    preview: WordPreview
    rootguard: bool  # it overlaps a replaced value: what is sent there is the cached noisy value
    sent: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = self.preview.to_dict()
        out["rootguard"] = self.rootguard
        out["sent"] = self.sent
        out["intact"] = self.sent == self.preview.text
        out["forecast_probability"] = self.preview.probability
        if out["intact"]:
            out["probability"], out["label"] = 1.0, LIKELY_RESTORED
        return out

    @property
    def label(self) -> str:
        """The label shown: the forecast's, or "likely restored" where the draw is intact."""
        return LIKELY_RESTORED if self.sent == self.preview.text else self.preview.label


@dataclass(frozen=True, slots=True)
class Protection:
    """What :func:`protect` decided for one prompt."""

    text: str  # what to send: header (if any) + the protected prompt
    perturbed: str  # the protected prompt alone
    receipt: Receipt | None  # k-RR's receipt; None when the mode runs no k-RR
    replacements: tuple[Mapping[str, Any], ...]  # RootGuard's; positions in ``perturbed``
    spans: tuple[tuple[int, int], ...]  # where the replaced values were in the text as typed
    state: Mapping[str, Any] | None  # RootGuard's state to keep; None when RootGuard did not run
    words: tuple[WordForecast, ...] | None  # with forecast=True and k-RR; else None


#: The receipt's fields as JSON, in order (``words`` is handled apart).
RECEIPT_FIELDS = (
    "epsilon_requested",
    "epsilon_per_char",
    "keep_probability",
    "chars_perturbed",
    "chars_protected",
    "epsilon_total_basic",
    "epsilon_total_composed",
    "delta",
    "header_included",
    "alphabets",
    "latin_marks",
    "scripts",
    "slots",
    "unsupported_chars",
    "header_language",
    "visible",
    "memo",
    "words_reused",
    "chars_reused",
    "words_fresh",
    "chars_fresh",
    "epsilon_fresh_basic",
    "accents_folded",
)


def receipt_json(receipt: Receipt, *, words: bool = False) -> dict[str, Any]:
    """The receipt as JSON: every field, ``word_count``, and the per-word list if ``words``.

    Field by field: ``dataclasses.asdict`` deep-copies every word and was half the
    cost of a 20,000-character send in Pyodide.
    """
    out: dict[str, Any] = {name: getattr(receipt, name) for name in RECEIPT_FIELDS}
    out["scripts"] = [
        {
            "script": c.script,
            "chars": c.chars,
            "slots": list(c.slots),
            "epsilon_per_char": c.epsilon_per_char,
            "keep_probability": c.keep_probability,
        }
        for c in receipt.scripts
    ]
    out["slots"] = [
        {
            "alphabet": c.alphabet,
            "k": c.k,
            "epsilon": c.epsilon,
            "keep_probability": c.keep_probability,
            "used": c.used,
        }
        for c in receipt.slots
    ]
    out["word_count"] = len(receipt.words)
    if words:
        out["words"] = [
            {
                "start": w.start,
                "end": w.end,
                "length": w.length,
                "survival_probability": w.survival_probability,
                "epsilon": w.epsilon,
                "script": w.script,
            }
            for w in receipt.words
        ]
    return out


def typed_spans(
    text: str, replacements: Sequence[Mapping[str, Any]]
) -> tuple[tuple[int, int], ...]:
    """Where RootGuard's replaced values were in ``text``, the prompt as typed.

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
    return tuple(out)


def _forecast(
    text: str,
    epsilon: float,
    spans: tuple[tuple[int, int], ...],
    mode: str,
    perturbed: str,
    replacements: Sequence[Mapping[str, Any]],
) -> tuple[WordForecast, ...]:
    """The forecast of each typed word, with its form in the draw ``perturbed``."""
    # Typed position -> position in the rewritten text: each replacement before it
    # shifts it by len(replacement) - len(original).
    shifts = sorted(
        (int(r["start"]), len(r["replacement"]) - len(r["original"])) for r in replacements
    )
    out = []
    for w in word_preview(text, epsilon, alphabets=mode):
        if any(s < w.end and w.start < e for s, e in spans):
            out.append(WordForecast(w, True, None))
            continue
        offset = 0
        for start, shift in shifts:
            if start - offset <= w.start:  # r["start"] is in the rewritten text
                offset += shift
        out.append(WordForecast(w, False, perturbed[w.start + offset : w.end + offset]))
    return tuple(out)


def protect(
    text: str,
    settings: SiteSettings,
    *,
    compose: bool = True,
    forecast: bool = False,
    rng: krr.RandomSource | None = None,
    secure: bool = True,
    delta: float = DEFAULT_DELTA,
    memo: WordMemo | None = None,
) -> Protection:
    """Protect ``text`` as ``settings`` say; see the module docstring for what each mode does.

    ``compose=False`` skips the tight composed bound (~95% of a sanitization's time;
    the send path asks for it after the send with
    :func:`py_core.accounting.krr_composed_epsilon`).  ``forecast=True`` adds the
    per-word forecast of :mod:`py_core.preview` for the text as typed (the popup's
    preview; the send path never pays for it).  ``rng`` and ``secure`` are k-RR's
    (:func:`py_core.sanitize.sanitize_prompt`); RootGuard always draws with a CSPRNG.
    ``memo`` (:mod:`py_core.memo`): words already released are sent as their
    stored draw and new ones are added (the caller stores ``memo.added``); a
    forecast made with it shows exactly the draw that will be sent.

    Raises :class:`SetupRequiredError` when the mode runs RootGuard and
    ``settings.rootguard`` is None; RootGuard's own errors (a bad profile, a
    corrupted state) pass through and nothing is drawn.
    """
    if not isinstance(text, str):
        raise InvalidParameterError(f"text must be a str; got {type(text).__name__}")
    if not isinstance(settings, SiteSettings):
        raise InvalidParameterError(
            f"settings must be a SiteSettings; got {type(settings).__name__}"
        )
    mode = MODES[settings.mode]
    working = text
    replacements: tuple[Mapping[str, Any], ...] = ()
    sent_spans: list[list[int]] = []
    state: Mapping[str, Any] | None = None
    if mode.rootguard:
        setup = settings.rootguard
        if setup is None:
            raise SetupRequiredError(
                f"{settings.mode} mode replaces your values with RootGuard's noisy ones, "
                "but RootGuard is not set up (no profile with your values and their state)"
            )
        out = rootguard.protect_text(text, setup.profile, setup.true_values, setup.state)
        working = out["text"]
        sent_spans = [list(span) for span in out["spans"]]
        replacements = tuple(out["replacements"])
        state = out["state"]
    spans = typed_spans(text, replacements) if replacements else ()
    if not mode.krr:
        return Protection(working, working, None, replacements, spans, state, None)
    lang = header_language(settings.header_language, working)
    result = sanitize_prompt(
        working,
        settings.epsilon,
        protected_spans=sent_spans,
        header=header_text(settings.header, lang),
        rng=rng,
        secure=secure,
        delta=delta,
        compose=compose,
        alphabets_mode=settings.alphabets,
        header_language=lang,
        memo=memo,
    )
    words = (
        _forecast(
            text,
            result.receipt.epsilon_requested,
            spans,
            settings.alphabets,
            result.perturbed,
            replacements,
        )
        if forecast
        else None
    )
    return Protection(
        result.text, result.perturbed, result.receipt, replacements, spans, state, words
    )
