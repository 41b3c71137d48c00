"""The companion's JSON errors speak py_core's one table of codes (py_core.errors.ERROR_CODES)."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from companion.errors import ErrorCode, install_error_handlers, veil_error_status
from py_core import errors


def test_every_companion_code_is_in_the_table() -> None:
    """ErrorCode names codes of ERROR_CODES only; its public strings are the ones clients read."""
    assert {c.value for c in ErrorCode} <= set(errors.ERROR_CODES)
    assert ErrorCode.INVALID_REQUEST == "invalid_request"
    assert ErrorCode.BUDGET_EXHAUSTED == "budget_exhausted"
    assert ErrorCode.STATE_CONFLICT == "state_conflict"
    assert ErrorCode.INSECURE_RANDOMNESS == "insecure_randomness"
    assert ErrorCode.INTERNAL == "internal_error"


@pytest.mark.parametrize(
    ("exc", "status", "code"),
    [
        (errors.VeilError("refused"), 400, "invalid_request"),
        (errors.InvalidParameterError("epsilon must be > 0"), 400, "invalid_request"),
        (errors.InsecureRandomnessError("seeded"), 400, "insecure_randomness"),
        (
            errors.InsufficientBudgetError("spent", remaining=0.0, requested=1.0),
            400,
            "budget_exhausted",
        ),
        (errors.StateError("corrupted"), 409, "state_conflict"),
        (errors.SetupRequiredError("numbers mode needs RootGuard"), 409, "setup_required"),
        (errors.ProfileError(["no roots"]), 400, "invalid_profile"),
        (errors.DependencyCycleError(["a", "b", "a"]), 400, "invalid_profile"),
        (errors.ExpressionError("1/0"), 400, "invalid_expression"),
    ],
)
def test_a_py_core_error_is_answered_with_its_own_code(
    exc: errors.VeilError, status: int, code: str
) -> None:
    """The envelope carries exc.code and the table's status: the same code the extension shows."""
    assert veil_error_status(exc) == (status, code)
    assert errors.ERROR_CODES[code].status == status
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/fail")
    def fail() -> None:
        raise exc

    response = TestClient(app).get("/fail")
    assert response.status_code == status
    assert response.json()["error"]["code"] == code == exc.code
    assert response.json()["error"]["message"] == str(exc)
