"""The FastAPI application: routes, errors, auth, health and metrics wired together."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.auth import Scope, TokenAuthenticator
from api.rest import admin, errors, lookup_route, offsets, records, stream
from api.rest.deps import BearerAuthentication, SingleQueryValues, require, runtime
from api.rest.schemas import Health
from rlm import __version__
from rlm.bootstrap import Runtime, build_runtime
from rlm.config import Settings


def create_app(
    settings: Settings,
    *,
    runtime_: Runtime | None = None,
    authenticator: TokenAuthenticator | None = None,
) -> FastAPI:
    """Build the REST app. Without ``runtime_`` the app builds one at start-up and closes it at
    shutdown; with one (``rlm serve`` shares it with gRPC and the loops) the caller owns it. From
    start-up on, the authenticator's looks at the tokens file are reported to the runtime's
    metrics, which the app exports."""
    auth = authenticator if authenticator is not None else TokenAuthenticator.from_settings(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = runtime_ is None
        app.state.runtime = runtime_ if runtime_ is not None else build_runtime(settings)
        auth.report_to(app.state.runtime.metrics)
        try:
            yield
        finally:
            # The streams' async S3 client belongs to this loop: closed with it.
            await app.state.runtime.streams.remote.close()
            if owned:
                app.state.runtime.close()
            app.state.runtime = None

    app = FastAPI(
        title="rlm",
        version=__version__,
        description="Tiered-storage remote log manager for Apache Kafka: offset-for-timestamp across "
        "the remote and local tiers, records, remote segments, settings.",
        lifespan=lifespan,
        # rlm's metrics are Prometheus's (/metrics). FastAPI's own OpenTelemetry looks up the
        # global providers at every request (about 10 µs, a tenth of a local lookup's CPU) and,
        # with no OpenTelemetry SDK installed, always finds none.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.authenticator = auth
    app.state.runtime = runtime_
    errors.install(app)
    # Everything but the probes and the API's own documentation needs a token.
    public = (app.openapi_url, app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url)
    app.add_middleware(SingleQueryValues)  # added first: it runs inside the authentication
    app.add_middleware(
        BearerAuthentication, authenticator=auth, public={"/healthz", "/readyz", *filter(None, public)}
    )
    app.router.routes.insert(0, lookup_route.route)  # matched first: the busiest route
    app.include_router(offsets.router)
    app.include_router(stream.router)  # before records: it takes the requests that ask to stream
    app.include_router(records.router)
    app.include_router(admin.router)

    # The probes and /metrics are coroutines: the worker threads that plain routes run on can all
    # be taken by requests waiting for a dependency, and these must answer even then. They touch
    # no dependency (readiness asks them on threads of its own, within its own deadline).
    @app.get("/healthz", response_model=Health, tags=["health"], summary="The process is alive")
    async def healthz() -> Health:
        return Health(status="ok")

    @app.get(
        "/readyz",
        response_model=Health,
        tags=["health"],
        responses={503: {"model": Health}},
        summary="The metadata store (current schema) and the remote storage answer within "
        "readiness.timeout.ms",
    )
    async def readyz(request: Request) -> Response | Health:
        rt: Runtime | None = request.app.state.runtime
        problems = ["starting up"] if rt is None else await rt.readiness_problems_async()
        if problems:
            return JSONResponse({"status": "unavailable", "problems": problems}, status_code=503)
        return Health(status="ready")

    @app.get("/metrics", tags=["health"], summary="Prometheus metrics", response_class=Response)
    async def metrics(
        rt: Annotated[Runtime, Depends(runtime)], _: Annotated[Scope, Depends(require(Scope.READ))]
    ) -> Response:
        return Response(generate_latest(rt.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    generate_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = stream.document(lookup_route.document(generate_openapi()))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
