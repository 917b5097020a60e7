"""MkDocs hook: reference/cli.md, every command and option of ``python -m generator``, written at
each build by walking the typer app's click commands (``generator.cli.app``): the page says what
``--help`` says, never a hand-made copy of it."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's generator, whichever one the venv installed

PAGE = "reference/cli.md"
PROGRAM = "python -m generator"

INTRO = f"""\
# Command-line reference

Every command of `{PROGRAM}` (also installed as `xpyd`), generated from the command-line app
(`generator/cli/`) each time the docs are built: the same words as `{PROGRAM} COMMAND
--help`. Expected errors end with one red line naming the field or service and the fix, and
exit 1; usage errors exit 2; Ctrl+C exits 130.
"""

_CODE_SPAN = re.compile(r"(`[^`]*`)")


def plain(text: str) -> str:
    """Help text as markdown prose: rich markup dropped, and what markdown would read as HTML
    or emphasis escaped outside code spans."""
    from rich.text import Text

    parts = _CODE_SPAN.split(Text.from_markup(text).plain)
    for index in range(0, len(parts), 2):  # the even parts are outside code spans
        escaped = re.sub(r"([\\*_\[\]>|])", r"\\\1", parts[index])
        parts[index] = escaped.replace("<", "&lt;")  # markdown has no escape for "<"
    return "".join(parts)


def _cell(text: str) -> str:
    return " ".join(plain(text).split())


def _anchor(name: str) -> str:
    return f"cmd-{name}"


def _options_table(command: Any, context: Any) -> list[str]:
    rows = ["| argument or option | what it does |", "|---|---|"]
    for param in command.get_params(context):
        record = param.get_help_record(context)
        if record is None or param.name == "help":
            continue
        name, help_text = record
        rows.append(f"| `{name}` | {_cell(help_text)} |")
    return rows


def command_section(name: str, command: Any, parent: Any) -> list[str]:
    context = command.make_context(name, [], parent=parent, resilient_parsing=True)
    usage = command.get_usage(context).removeprefix("Usage: ")
    lines = [f"## `{name}` {{#{_anchor(name)}}}", "", "```", usage, "```", ""]
    for paragraph in (command.help or "").split("\n\n"):
        lines += [plain(paragraph.strip()), ""]
    return [*lines, *_options_table(command, context), ""]


def render_cli_page() -> str:
    from typer.main import get_command

    from generator.cli import app

    group: Any = get_command(app)
    root = group.make_context(PROGRAM, [], resilient_parsing=True)
    lines = [INTRO, "```", group.get_usage(root).removeprefix("Usage: "), "```", ""]
    for paragraph in (group.help or "").split("\n\n"):
        lines += [plain(paragraph.strip()), ""]
    lines += ["| command | what it does |", "|---|---|"]
    commands = {name: group.commands[name] for name in group.list_commands(root)}
    for name, command in commands.items():
        summary = _cell(command.get_short_help_str(limit=200))
        lines.append(f"| [`{name}`](#{_anchor(name)}) | {summary} |")
    lines.append("")
    for name, command in commands.items():
        lines += command_section(name, command, root)
    return "\n".join(lines)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    files.append(File.generated(config, PAGE, content=render_cli_page()))
    return files
