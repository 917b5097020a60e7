"""YAML text as docker compose (a YAML 1.2 reader) and LMCache read it back: no anchors,
every string that YAML 1.2 would take for something else quoted."""

from __future__ import annotations

import re
from typing import Any

import yaml

__all__ = ["dump_yaml"]

# libyaml's emitter when present (about 5x faster on big multi-host stacks).
_Dumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


# Strings that PyYAML (YAML 1.1) writes bare but a YAML 1.2 reader such as docker compose's
# takes for a number, bool, null or date: "09" is a float there, "1e5" too, "2024-1-2" a
# timestamp; a command list holding one fails `compose config` ("must be a string").
_YAML12_NOT_A_STRING = re.compile(
    r"~|null|Null|NULL|true|True|TRUE|false|False|FALSE"
    r"|[-+]?(?:0[xXoObB][0-9a-fA-F_]+|[0-9][0-9_]*)"
    r"|[-+]?(?:[0-9][0-9_]*\.?[0-9_]*|\.[0-9][0-9_]*)(?:[eE][-+]?[0-9_]+)?"
    r"|[-+]?0[xX][0-9a-fA-F_.]*[pP][-+]?[0-9_]+"
    r"|[-+]?\.?(?:[iI][nN][fF](?:[iI][nN][iI][tT][yY])?|[nN][aA][nN])"
    r"|[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[Tt ].*)?"
)


class _PlainDumper(_Dumper):  # type: ignore[valid-type,misc]
    """No ``&id001`` anchors: services that share a build section each spell it out."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "'" if _YAML12_NOT_A_STRING.fullmatch(data) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_PlainDumper.add_representer(str, _represent_str)


class _BlockDumper(_PlainDumper):
    """Multi-line strings as literal blocks (files held in a Kubernetes ConfigMap)."""


def _represent_block(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    if "\n" in data:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return _represent_str(dumper, data)


_BlockDumper.add_representer(str, _represent_block)


def dump_yaml(data: Any, *, header: str = "", blocks: bool = False) -> str:
    """``blocks``: multi-line strings as ``|`` blocks (else quoted, as compose files were
    first written)."""
    dumper = _BlockDumper if blocks else _PlainDumper
    body = yaml.dump(data, Dumper=dumper, sort_keys=False, default_flow_style=False, width=100_000)
    return header + body
