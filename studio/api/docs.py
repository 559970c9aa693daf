"""`/docs`: the API's interactive docs (Swagger UI) from this server's own files.

FastAPI's default page loads Swagger UI from a CDN, so offline it stayed blank. Here the page is
FastAPI's own (`get_swagger_ui_html`, its documented self-hosting recipe) and every file it loads,
script, stylesheet and icon, comes from `/docs-assets`: the Swagger UI dist that the
`swagger-ui-py` package ships (Swagger UI 5, which reads FastAPI's OpenAPI 3.1). ReDoc, which has
no such package, is not served.
"""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS_PATH = "/docs"
ASSETS_PATH = "/docs-assets"  # not /static or /assets: Gradio owns those prefixes


def swagger_ui_dir() -> Path:
    """The Swagger UI dist of the `swagger-ui-py` package (found without importing it)."""
    spec = find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the swagger-ui-py package is missing: pip install -r requirements.txt")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


def install_docs(app: FastAPI) -> None:
    """Serve `/docs` and its files; the app must be made with `docs_url=None, redoc_url=None`."""
    app.mount(ASSETS_PATH, StaticFiles(directory=swagger_ui_dir()), name="docs-assets")

    @app.get(DOCS_PATH, include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=app.openapi_url or "/openapi.json", title=f"{app.title} - API",
                                   swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
                                   swagger_favicon_url=f"{ASSETS_PATH}/favicon-32x32.png")
