"""One exception root for everything Veil raises on purpose.

Each specific error also subclasses the matching builtin, so callers that only
know Python's own exceptions (``except ValueError``) still catch it.
"""

from __future__ import annotations


class VeilError(Exception):
    """Root of every error Veil raises deliberately."""


class InvalidParameterError(VeilError, ValueError):
    """A parameter is out of range or of the wrong kind; the message names the value."""


class InsecureRandomnessError(VeilError, ValueError):
    """A seeded (reproducible) RNG was passed where real data is being protected."""


class InsufficientBudgetError(VeilError, ValueError):
    """A request would spend more privacy budget than remains."""

    def __init__(self, message: str, *, remaining: float, requested: float) -> None:
        super().__init__(message)
        self.remaining = remaining
        self.requested = requested


class StateError(VeilError, ValueError):
    """Saved state is corrupted or does not match; it is refused, never silently redrawn."""


class SetupRequiredError(VeilError, ValueError):
    """A setting needs something the person has not set up (numbers mode without RootGuard)."""


class ProfileError(InvalidParameterError):
    """A RootGuard profile is invalid; ``.problems`` lists every problem found."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {problem}" for problem in self.problems)
        super().__init__(f"invalid profile ({len(self.problems)} problem(s)):\n{lines}")


class DependencyCycleError(ProfileError):
    """Derived values depend on each other in a cycle; ``.cycle`` names it (first name repeated)."""

    def __init__(self, cycle: list[str], problems: list[str] | None = None) -> None:
        self.cycle = list(cycle)
        super().__init__(problems or [f"dependency cycle: {' -> '.join(self.cycle)}"])


class ExpressionError(InvalidParameterError):
    """A formula is unsafe or malformed, or could not be evaluated (domain error, overflow)."""
