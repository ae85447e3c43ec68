"""Code generated from api/proto by ``python -m api.codegen --write``; do not edit."""
