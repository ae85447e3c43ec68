"""Pieces shared by the command groups: the settings options."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rlm.config import Settings, load_settings


def add_settings_options(parser: argparse.ArgumentParser) -> None:
    """``--config`` and the overrides every service command takes."""
    parser.add_argument("--config", type=Path, help="YAML settings file (also RLM_CONFIG)")
    parser.add_argument("--log-dirs", help="comma-separated broker log directories (RLM_LOG_DIRS)")
    parser.add_argument("--metadata-url", help="metadata store URL (RLM_METADATA_URL)")
    parser.add_argument("--remote-url", help="s3://bucket/prefix or file:///path (RLM_REMOTE_URL)")
    parser.add_argument("--broker-id", type=int, help="this broker's id (RLM_BROKER_ID)")


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Settings from the file, the environment, then the command line."""
    overrides: dict[str, Any] = {}
    if args.log_dirs:
        overrides["log_dirs"] = tuple(Path(p.strip()) for p in args.log_dirs.split(",") if p.strip())
    if args.metadata_url:
        overrides["metadata_url"] = args.metadata_url
    if args.remote_url:
        overrides["remote_url"] = args.remote_url
    if args.broker_id is not None:
        overrides["broker_id"] = args.broker_id
    return load_settings(args.config, **overrides)
