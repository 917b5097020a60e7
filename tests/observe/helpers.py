"""Shipped stacks planned with observe on (``--set`` as a user writes it)."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from generator.observe.files import OBSERVE_DIR
from generator.paths import Workspace
from generator.plan import Plan
from generator.planner import make_plan
from generator.render import render_stack
from generator.stack import load_spec

OBSERVED = ("observe.enabled=true",)


def observed_plan(workspace: Workspace, stack: str, *overrides: str) -> Plan:
    return make_plan(load_spec(workspace.stack_file(stack), (*OBSERVED, *overrides)))


# A metric name in an expression: a word outside braces, quotes, ranges and "by (...)" lists
# that is not a function (followed by "("), a keyword or a number.
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_NOT_A_NAME = re.compile(r"[0-9.e+-]+|and|or|unless|by|on")


def expression_names(expr: str) -> set[str]:
    bare = re.sub(r"\{[^}]*\}|\"[^\"]*\"|by \([^)]*\)|\[[^\]]*\]", " ", expr)
    words = {
        m.group() for m in _NAME.finditer(bare) if not bare[m.end() :].lstrip().startswith("(")
    }
    return {word for word in words if not _NOT_A_NAME.fullmatch(word)}


def rendered_observe(workspace: Workspace, plan: Plan) -> dict[PurePosixPath, str]:
    """The observe files as render writes them, by their path in the host's folder."""
    files = render_stack(plan, workspace).files
    return {
        PurePosixPath(*path.parts[path.parts.index(OBSERVE_DIR.name) :]): text
        for path, text in files.items()
        if OBSERVE_DIR.name in path.parts
    }
