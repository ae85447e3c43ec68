"""The broker's id, from the ``meta.properties`` Kafka writes to each of its log directories.

A KRaft broker writes ``node.id``; a ZooKeeper-era broker wrote ``broker.id``. Reading it lets one
sidecar spec serve every pod of a StatefulSet, whose brokers take their ids from the pod ordinal.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rlm.errors import BrokerIdUnknownError, ConfigError, CorruptCheckpointError
from rlm.log.checkpoints import META_PROPERTIES, read_meta_properties

#: The keys that name the broker, in the order they are looked for.
ID_KEYS = ("node.id", "broker.id")


def broker_id_from_log_dirs(log_dirs: Sequence[Path]) -> int:
    """The id every log directory's ``meta.properties`` gives (``node.id``, else ``broker.id``).

    Directories without a ``meta.properties`` are passed over (a log directory the broker has not
    formatted yet), and so are those whose ``meta.properties`` cannot be read while another gives
    the id (a failed disk: the broker goes on with its other log directories); the others must agree.

    Raises:
        BrokerIdUnknownError: no log directory has a ``meta.properties`` (yet).
        ConfigError: one names no id, a malformed one, or two directories disagree; or none can be
            read.
    """
    props, unreadable = _meta_properties(log_dirs)
    if not props and unreadable:
        raise ConfigError("; ".join(unreadable.values()))
    found = {path: _id_of(values, path) for path, values in props.items()}
    if not found:
        where = ", ".join(str(d) for d in log_dirs)
        raise BrokerIdUnknownError(
            f"broker.id is not set and no log directory ({where}) has a {META_PROPERTIES} yet: "
            "set broker.id (RLM_BROKER_ID), or start rlm once the broker has formatted its log directories"
        )
    ids = set(found.values())
    if len(ids) > 1:
        listed = ", ".join(f"{path} says {value}" for path, value in found.items())
        raise ConfigError(f"the log directories belong to different brokers ({listed}): set broker.id")
    return ids.pop()


def check_broker_id(log_dirs: Sequence[Path], configured: int) -> None:
    """Refuse a ``broker.id`` set in rlm's settings that a log directory's ``meta.properties``
    contradicts, as Kafka refuses to start a broker whose configured id differs from the stored one.

    rlm's ``broker.id`` owns its copy leases: a sidecar started with another broker's id (a values
    file copied between pods) would hold that broker's leases too, and two sidecars would copy and
    expire the same partitions at once. Directories without a readable ``meta.properties`` are
    passed over, as :func:`broker_id_from_log_dirs` passes them over.

    Raises:
        ConfigError: a ``meta.properties`` names another broker, or names none.
    """
    props, _ = _meta_properties(log_dirs)
    for path, values in props.items():
        stored = _id_of(values, path)
        if stored != configured:
            raise ConfigError(
                f"broker.id is {configured} but {path} says the broker is {stored}: rlm must run "
                "beside the broker whose log directories it reads; set broker.id to the stored id, "
                "or leave it unset to read it from meta.properties"
            )


def _id_of(props: dict[str, str], path: Path) -> int:
    for key in ID_KEYS:
        text = props.get(key)
        if text is None:
            continue
        try:
            return int(text.strip())
        except ValueError:
            raise ConfigError(f"{path}: {key}={text!r} is not an integer") from None
    raise ConfigError(f"{path} names no broker: it has neither node.id nor broker.id")


def cluster_id_from_log_dirs(log_dirs: Sequence[Path]) -> str | None:
    """The ``cluster.id`` the log directories' ``meta.properties`` give; None when none gives one
    (no ``meta.properties`` yet, or a broker too old to write it). A ``meta.properties`` that
    cannot be read is passed over: its log directory is offline, and neither tiered nor expired
    (:mod:`rlm.log.broker_dirs`).

    Raises:
        ConfigError: two directories name different clusters.
    """
    found = {
        path: cluster_id
        for path, props in _meta_properties(log_dirs)[0].items()
        if (cluster_id := props.get("cluster.id", "").strip())
    }
    ids = set(found.values())
    if len(ids) > 1:
        listed = ", ".join(f"{path} says {value}" for path, value in found.items())
        raise ConfigError(f"the log directories belong to different Kafka clusters ({listed})")
    return ids.pop() if ids else None


def _meta_properties(log_dirs: Sequence[Path]) -> tuple[dict[Path, dict[str, str]], dict[Path, str]]:
    """The ``meta.properties`` of each log directory that has one, by path; and, by path, why
    each one that cannot be read (an I/O error, malformed) cannot."""
    found: dict[Path, dict[str, str]] = {}
    unreadable: dict[Path, str] = {}
    for log_dir in log_dirs:
        path = log_dir / META_PROPERTIES
        try:
            found[path] = read_meta_properties(path)
        except FileNotFoundError:
            continue
        except (OSError, CorruptCheckpointError) as exc:
            unreadable[path] = f"cannot read {path}: {exc}"
    return found, unreadable
