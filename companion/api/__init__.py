"""The API's routers, one module per capability; each defines ``router`` (a FastAPI
``APIRouter``), and :func:`companion.app.create_app` includes them in one fixed order."""
