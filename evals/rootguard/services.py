"""The upstream MCP services of the agents evaluation: they record every argument they get.

Four services, each an :class:`mcp.server.mcpserver.MCPServer` (the official
SDK), each asking for the person's values in its own shape -- the shapes the
proxy must handle:

* ``clinic.record_vitals`` -- flat named fields (``weight_kg``, ``systolic_bp``,
  ``fasting_glucose_mg_dl``) holding JSON numbers, beside a visit number;
* ``labs.submit_results`` -- an array of name/value pairs, the value a *string*
  in another unit (weight in lb, glucose in mmol/L), beside a date;
* ``insurer.request_quote`` -- nested camelCase fields holding strings with
  units (``"179.2 lb"``) and a free-text note ("My ALT is 35 U/L.");
* ``calculator.compute_score`` -- the score's inputs by profile name, and the
  agent's own estimate of the score (a derived value in a field that names no
  value) -- it answers the score computed from what it received.

:class:`Recorder` keeps what each service received (in memory, or appended to a
JSON-lines file when run as a process: ``python -m evals.rootguard.services
NAME --record FILE`` serves one over stdio, which the tests use as an upstream).
"""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel, Field

from py_core.rootguard.formulas import FORMULAS

__all__ = [
    "CAMEL",
    "FIELD",
    "LAB",
    "SENTENCE",
    "SERVICES",
    "Recorder",
    "build_service",
]

SERVICES = ("clinic", "labs", "insurer", "calculator")

#: clinic: the flat field each root is sent in (JSON number, the profile's unit).
FIELD: dict[str, str] = {
    "age": "age_years",
    "height_cm": "height_cm",
    "weight_kg": "weight_kg",
    "waist_cm": "waist_circumference_cm",
    "sbp": "systolic_bp",
    "dbp": "diastolic_bp",
    "glucose": "fasting_glucose_mg_dl",
    "insulin": "fasting_insulin",
    "ast": "ast_u_l",
    "alt": "alt_u_l",
    "platelets": "platelet_count",
    "creatinine": "serum_creatinine",
    "triglycerides": "triglycerides_mg_dl",
    "hdl": "hdl_c",
}
#: labs: the label, unit and decimals of each root (the value is sent as a string).
LAB: dict[str, tuple[str, str, int]] = {
    "age": ("Age", "years", 0),
    "height_cm": ("Height", "in", 2),
    "weight_kg": ("Body weight", "lb", 1),
    "waist_cm": ("Waist circumference", "in", 2),
    "sbp": ("Systolic blood pressure", "mmHg", 0),
    "dbp": ("Diastolic blood pressure", "mmHg", 0),
    "glucose": ("Fasting glucose", "mmol/L", 2),
    "insulin": ("Fasting insulin", "pmol/L", 1),
    "ast": ("AST (SGOT)", "U/L", 0),
    "alt": ("ALT (SGPT)", "U/L", 0),
    "platelets": ("Platelet count", "10^9/L", 0),
    "creatinine": ("Serum creatinine", "umol/L", 1),
    "triglycerides": ("Triglycerides", "mmol/L", 2),
    "hdl": ("HDL cholesterol", "mmol/L", 2),
}
#: insurer: the camelCase field of each root (a string with its unit).
CAMEL: dict[str, str] = {
    "age": "ageYears",
    "height_cm": "heightCm",
    "weight_kg": "bodyWeightKg",
    "waist_cm": "waistCm",
    "sbp": "systolicBp",
    "dbp": "diastolicBp",
    "glucose": "fastingGlucose",
    "insulin": "fastingInsulin",
    "ast": "astLevel",
    "alt": "altLevel",
    "platelets": "plateletCount",
    "creatinine": "serumCreatinine",
    "triglycerides": "triglyceridesLevel",
    "hdl": "hdlC",
}
#: insurer's note: one sentence per root, ``{v}`` the value in the profile's unit.
SENTENCE: dict[str, str] = {
    "age": "I am {v} years old.",
    "height_cm": "I am {v} cm tall.",
    "weight_kg": "I weigh {v} kg.",
    "waist_cm": "My waist is {v} cm.",
    "sbp": "My systolic pressure was {v} mmHg.",
    "dbp": "My diastolic pressure was {v} mmHg.",
    "glucose": "My fasting glucose is {v} mg/dL.",
    "insulin": "My fasting insulin is {v} uU/mL.",
    "ast": "My AST is {v} U/L.",
    "alt": "My ALT is {v} U/L.",
    "platelets": "My platelet count is {v} x10^9/L.",
    "creatinine": "My serum creatinine is {v} mg/dL.",
    "triglycerides": "My triglycerides are {v} mg/dL.",
    "hdl": "My HDL cholesterol is {v} mg/dL.",
}


class Recorder:
    """Every call a service received: ``(service, tool, arguments)``; thread-safe."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self._lock = threading.Lock()

    def record(self, service: str, tool: str, arguments: Mapping[str, Any]) -> None:
        entry = (service, tool, json.loads(json.dumps(arguments)))
        with self._lock:
            self.calls.append(entry)
            if self.path is not None:
                with open(self.path, "a", encoding="utf-8") as handle:
                    handle.write(
                        json.dumps({"service": service, "tool": tool, "arguments": entry[2]})
                    )
                    handle.write("\n")

    def clear(self) -> None:
        with self._lock:
            self.calls.clear()


class LabResult(BaseModel):
    test: str = Field(description="the test's name")
    value: str = Field(description="the result as written on the report")
    unit: str = Field(description="the unit of the result")


def build_service(name: str, recorder: Recorder) -> MCPServer:
    """The upstream service ``name`` (one of :data:`SERVICES`), recording into ``recorder``."""
    server: MCPServer = MCPServer(f"eval-{name}", log_level="WARNING")
    if name == "clinic":

        @server.tool()
        def record_vitals(
            patient_id: str,
            visit_number: Annotated[int, Field(description="the visit's running number")],
            measurements: Annotated[
                dict[str, float], Field(description="measured values by field name")
            ],
        ) -> str:
            """Record a visit's measurements."""
            recorder.record(
                name,
                "record_vitals",
                {
                    "patient_id": patient_id,
                    "visit_number": visit_number,
                    "measurements": measurements,
                },
            )
            return f"recorded {len(measurements)} measurements for visit {visit_number}"

    elif name == "labs":

        @server.tool()
        def submit_results(
            patient_id: str,
            collected_on: Annotated[str, Field(description="date the samples were taken")],
            results: list[LabResult],
        ) -> str:
            """Submit laboratory results."""
            args = {
                "patient_id": patient_id,
                "collected_on": collected_on,
                "results": [r.model_dump() for r in results],
            }
            recorder.record(name, "submit_results", args)
            return f"stored {len(results)} results"

    elif name == "insurer":

        @server.tool()
        def request_quote(
            applicant: Annotated[
                dict[str, Any],
                Field(description="applicant: {'details': {...}, 'dependents': int}"),
            ],
            notes: Annotated[str, Field(description="anything else the insurer should know")],
        ) -> str:
            """Ask for a health insurance quote."""
            recorder.record(name, "request_quote", {"applicant": applicant, "notes": notes})
            return "quote requested"

    elif name == "calculator":

        @server.tool()
        def compute_score(
            score: Annotated[str, Field(description="bmi, fib4, homa_ir, egfr, apri, tyg, ...")],
            inputs: Annotated[dict[str, float], Field(description="the score's inputs by name")],
            female: Annotated[int, Field(description="1 for female, 0 for male")],
            agent_estimate: Annotated[
                float | None, Field(description="the agent's own estimate, to compare")
            ] = None,
        ) -> dict[str, Any]:
            """Compute a clinical score from its inputs."""
            recorder.record(
                name,
                "compute_score",
                {
                    "score": score,
                    "inputs": inputs,
                    "female": female,
                    "agent_estimate": agent_estimate,
                },
            )
            env = {**inputs, "female": female}
            value = float(FORMULAS[score].parsed.evaluate(env))
            return {"score": score, "value": value}

    else:
        raise ValueError(f"unknown service {name!r}; services: {', '.join(SERVICES)}")
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description="serve one evaluation service over stdio")
    parser.add_argument("service", choices=SERVICES)
    parser.add_argument("--record", type=Path, required=True, help="append calls here (JSON lines)")
    args = parser.parse_args()
    build_service(args.service, Recorder(args.record)).run("stdio")


if __name__ == "__main__":
    main()
