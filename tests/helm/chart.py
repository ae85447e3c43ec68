"""Rendering the chart offline with the Helm SDK (no cluster, no helm binary), once per value set."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "rlm"
EXAMPLES = ROOT / "examples"
RELEASE = "rlm"
NAMESPACE = "kafka"
NOTES = "rlm/templates/NOTES.txt"

Manifest = dict[str, Any]


@dataclass(frozen=True)
class Rendered:
    """What one render produced: the manifests by template, and NOTES.txt."""

    files: dict[str, str]
    """Template path → rendered text (NOTES.txt included; empty for a template that rendered nothing)."""

    @property
    def objects(self) -> list[Manifest]:
        return [
            doc
            for name, text in self.files.items()
            if name != NOTES
            for doc in yaml.safe_load_all(text)
            if doc
        ]

    @property
    def notes(self) -> str:
        return self.files.get(NOTES, "")

    def of_kind(self, kind: str) -> list[Manifest]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> Manifest:
        found = [o for o in self.of_kind(kind) if name is None or o["metadata"]["name"] == name]
        assert len(found) == 1, (
            f"{len(found)} {kind} objects named {name}: {[o['metadata']['name'] for o in found]}"
        )
        return found[0]

    def pod_specs(self) -> list[tuple[str, Manifest]]:
        """(object name, pod spec) of every workload."""
        specs = []
        for o in self.objects:
            if o["kind"] in ("Deployment", "Job", "StatefulSet", "DaemonSet"):
                specs.append((f"{o['kind']}/{o['metadata']['name']}", o["spec"]["template"]["spec"]))
            elif o["kind"] == "CronJob":
                template = o["spec"]["jobTemplate"]["spec"]["template"]
                specs.append((f"CronJob/{o['metadata']['name']}", template["spec"]))
        return specs


@functools.cache
def chart() -> helm.Chart:
    return helm.Chart.load(CHART)


def render(values: dict[str, Any]) -> Rendered:
    """Render the chart as ``helm template rlm helm/rlm -n kafka`` with ``values`` would."""
    return Rendered(chart().render(values, name=RELEASE, namespace=NAMESPACE))


@functools.cache
def _render_set(name: str) -> Rendered:
    from tests.helm.values import VALUE_SETS

    return render(VALUE_SETS[name])


def rendered(name: str) -> Rendered:
    """The render of the value set ``name`` (each set is rendered once per session)."""
    return _render_set(name)


def sidecar_values(notes: str) -> dict[str, Any]:
    """The Kafka chart values NOTES.txt prints in sidecar mode."""
    begin, end = "# --- rlm sidecar values: begin ---", "# --- rlm sidecar values: end ---"
    assert begin in notes and end in notes, notes
    loaded: dict[str, Any] = yaml.safe_load(notes.split(begin, 1)[1].split(end, 1)[0])
    return loaded
