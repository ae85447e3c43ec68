"""The REST API (FastAPI): built by :func:`api.rest.app.create_app`."""
