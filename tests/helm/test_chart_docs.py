"""Every value is documented: a `## @param` line in values.yaml, and a row of the README's table."""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.helm.chart import CHART

VALUES_TEXT = (CHART / "values.yaml").read_text()
PARAM = re.compile(r"^\s*## @param (\S+) (.+)$", re.M)
ROW = re.compile(r"^\| `([^`]+)` \| (.+?) \| `(.*)` \|$", re.M)


def _params() -> dict[str, str]:
    return dict(PARAM.findall(VALUES_TEXT))


def _leaves(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, dict) and node:
        return [leaf for key, value in node.items() for leaf in _leaves(value, f"{prefix}{key}.")]
    return [prefix.rstrip(".")]


def test_every_value_has_a_param_line() -> None:
    params = _params()
    values = yaml.safe_load(VALUES_TEXT)
    undocumented = [
        leaf for leaf in _leaves(values) if not any(leaf == p or leaf.startswith(p + ".") for p in params)
    ]
    assert undocumented == []
    stale = [p for p in params if not any(leaf == p or leaf.startswith(p + ".") for leaf in _leaves(values))]
    assert stale == []


def test_the_readme_table_lists_every_param_with_its_default() -> None:
    rows = {
        name: (description, default)
        for name, description, default in ROW.findall((CHART / "README.md").read_text())
    }
    params = _params()
    assert set(rows) == set(params)
    values = yaml.safe_load(VALUES_TEXT)
    for name, description in params.items():
        assert rows[name][0] == description.replace("|", "\\|"), name
        node = values
        for key in name.split("."):
            node = node[key]
        assert yaml.safe_load(rows[name][1]) == node, name
