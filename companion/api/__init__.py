"""The API's routers, one module per capability.

Each module in :data:`ROUTERS` defines ``router`` (a FastAPI ``APIRouter``);
:func:`companion.app.create_app` includes them in order.  Modules listed in
:data:`OPTIONAL_ROUTERS` are included when they exist, so the app still starts
while one of them is being built.
"""

ROUTERS: tuple[str, ...] = (
    "companion.api.health",
    "companion.api.models",
    "companion.api.chat",
    "companion.api.defenses",
    "companion.api.documents",
    "companion.api.budget",
    "companion.api.audit",
    "companion.api.keys",
    "companion.api.conversations",
)

OPTIONAL_ROUTERS: frozenset[str] = frozenset({"companion.api.audit"})
