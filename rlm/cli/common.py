"""Pieces shared by the command groups: the settings options, integer arguments."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlm.arguments import parse_int
from rlm.config import Settings, load_settings
from rlm.errors import InvalidArgumentError


def add_settings_options(parser: argparse.ArgumentParser, *, nested: bool = False) -> None:
    """``--config`` and the overrides every service command takes.

    ``nested``: the parser is a sub-command of a command that takes them too (``rlm copy skip``
    under ``rlm copy``): they may be given before or after the sub-command's name, and one left
    out here does not hide one given there.
    """
    default = argparse.SUPPRESS if nested else None
    parser.add_argument("--config", type=Path, default=default, help="YAML settings file (also RLM_CONFIG)")
    parser.add_argument(
        "--log-dirs", default=default, help="comma-separated broker log directories (RLM_LOG_DIRS)"
    )
    parser.add_argument("--metadata-url", default=default, help="metadata store URL (RLM_METADATA_URL)")
    parser.add_argument(
        "--remote-url", default=default, help="s3://bucket/prefix or file:///path (RLM_REMOTE_URL)"
    )
    parser.add_argument("--broker-id", type=int, default=default, help="this broker's id (RLM_BROKER_ID)")


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Settings from the file, the environment, then the command line."""
    overrides: dict[str, Any] = {}
    log_dirs = getattr(args, "log_dirs", None)
    if log_dirs:
        overrides["log_dirs"] = tuple(Path(p.strip()) for p in log_dirs.split(",") if p.strip())
    if getattr(args, "metadata_url", None):
        overrides["metadata_url"] = args.metadata_url
    if getattr(args, "remote_url", None):
        overrides["remote_url"] = args.remote_url
    if getattr(args, "broker_id", None) is not None:
        overrides["broker_id"] = args.broker_id
    return load_settings(getattr(args, "config", None), **overrides)


def integer(name: str, low: int, high: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer in ``[low, high]``, parsed as the APIs parse integers
    (:mod:`rlm.arguments`), its message kept (argparse prefixes the argument's name)."""

    def parse(text: str) -> int:
        try:
            return parse_int(text, name, low, high)
        except InvalidArgumentError as exc:
            raise argparse.ArgumentTypeError(exc.reason) from None

    return parse
