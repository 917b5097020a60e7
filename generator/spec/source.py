"""Reading a stack file and parsing YAML, with bounds: a spec is small, so anything big,
deep, self-referring or ambiguous is refused before it is walked.

- size: at most ``MAX_SPEC_BYTES``, checked before reading (and read no further);
- encoding: UTF-8 (a BOM is fine); UTF-16/32 and binary files get their own message;
- nesting: at most ``MAX_DEPTH`` levels, aliases expanded (a deep document would exhaust
  Python's recursion in the composer, the secret scan or pydantic);
- aliases: expanding every alias adds at most ``MAX_NODES`` nodes to those written (a 1 KB
  "billion laughs" file expands to ~10^9 nodes; a long spec written out is no bomb) and no
  alias refers to its own anchor;
- duplicate keys are errors (PyYAML keeps the last one silently).
"""

from __future__ import annotations

import codecs
import errno
import os
import re
import stat
from collections.abc import Callable, Hashable
from pathlib import Path

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

from generator.errors import SpecError, SpecIssue
from generator.spec.secret_shapes import SECRET_VALUE

__all__ = ["MAX_DEPTH", "MAX_NODES", "MAX_SPEC_BYTES", "mask_tokens", "parse_yaml", "read_spec"]

MAX_SPEC_BYTES = 256 * 1024
MAX_DEPTH = 32
MAX_NODES = 10_000
_MERGE_TAG = "tag:yaml.org,2002:merge"
# Hugging Face user access tokens: "hf_" and ~34 letters/digits, wherever they appear.
HF_TOKEN = re.compile(r"hf_[A-Za-z0-9]{20,}")


class _Refused(Exception):
    """A bound was crossed while reading the YAML (turned into a SpecIssue by parse_yaml)."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(problem)
        self.problem, self.fix = problem, fix


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader that counts nesting, measures alias expansion and refuses
    duplicate keys."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(
                    f"nests deeper than {MAX_DEPTH} levels",
                    "a stack spec needs a few levels; flatten the document",
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_data(self) -> object:
        node = self.get_single_node()
        if node is None:
            return None
        limit = _written(node) + MAX_NODES
        _measure(node, depth=1, sizes={}, open_nodes=set(), limit=limit)
        return self.construct_document(node)

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[object, object]:
        _refuse_duplicate_keys(self, node)
        return super().construct_mapping(node, deep=deep)


def _refuse_duplicate_keys(loader: _BoundedLoader, node: MappingNode) -> None:
    # Merged keys (`<<: *base`) may be overridden: YAML says so. Keys written twice may not.
    seen: set[object] = set()
    for key_node, _ in node.value:
        if key_node.tag == _MERGE_TAG:
            continue
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, Hashable):
            continue  # a list or set as a key: the safe constructor reports it
        if key in seen:
            raise _Refused(
                f"line {key_node.start_mark.line + 1}: has the key {key!r} a second time "
                "(YAML would silently keep only the last value)",
                "keep one of them",
            )
        seen.add(key)


def _written(root: Node) -> int:
    """Distinct nodes: what the file spells out, each anchor counted once."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, MappingNode):
            stack.extend(part for pair in node.value for part in pair)
    return len(seen)


def _measure(
    node: Node, *, depth: int, sizes: dict[int, int], open_nodes: set[int], limit: int
) -> int:
    """Nodes in ``node`` with every alias expanded; refuses cycles, depth and size."""
    if depth > MAX_DEPTH:
        raise _Refused(
            f"nests deeper than {MAX_DEPTH} levels once its aliases are expanded",
            "use fewer nested aliases",
        )
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_nodes:
        raise _Refused(
            "has an alias inside its own anchor (a structure that contains itself)",
            "remove the self-referring alias",
        )
    open_nodes.add(key)
    size = 1
    children: list[Node] = []
    if isinstance(node, SequenceNode):
        children = list(node.value)
    elif isinstance(node, MappingNode):
        children = [part for pair in node.value for part in pair]
    for child in children:
        size += _measure(child, depth=depth + 1, sizes=sizes, open_nodes=open_nodes, limit=limit)
        if size > limit:
            raise _Refused(
                f"expands to more than {MAX_NODES} values through its aliases (a YAML bomb?)",
                "write the values out, or use fewer nested aliases",
            )
    open_nodes.discard(key)
    sizes[key] = size
    return size


def mask_tokens(text: str) -> str:
    """Never echo a token, even inside a parser's error message."""
    return SECRET_VALUE.sub("***", HF_TOKEN.sub("hf_***", text))


def parse_yaml(
    text: str, *, source: str, field: str = "<file>", syntax_fix: str = "fix the YAML syntax"
) -> object:
    """One YAML document, within the bounds above; SpecError naming ``field`` otherwise."""
    try:
        loader = _BoundedLoader(text)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except _Refused as exc:
        raise SpecError(source, [SpecIssue(field, exc.problem, exc.fix)]) from exc
    except yaml.YAMLError as exc:
        problem = f"is not valid YAML: {mask_tokens(_yaml_problem(exc))}"
        raise SpecError(source, [SpecIssue(field, problem, syntax_fix)]) from exc
    except (ValueError, OverflowError) as exc:
        # int("9" * 5000) (Python's digit limit), a date like 2024-13-45, ...
        problem = f"holds a value YAML cannot represent: {mask_tokens(str(exc))}"
        raise SpecError(source, [SpecIssue(field, problem, "correct or quote the value")]) from exc


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's message without its "<unicode string>" source lines: where, then what."""
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return " ".join(str(exc).replace('in "<unicode string>", ', "").split())
    mark = exc.problem_mark
    text = f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
    if exc.context:
        line = f" at line {exc.context_mark.line + 1}" if exc.context_mark else ""
        text += f" ({exc.context}{line})"
    return text


def read_spec(path: Path, *, missing_fix: str) -> str:
    """The text of a stack file: a regular, readable, small, UTF-8 file."""
    source = str(path)

    def refuse(problem: str, fix: str) -> SpecError:
        return SpecError(source, [SpecIssue("<file>", problem, fix)])

    try:
        info = os.stat(path)
    except OSError as exc:
        raise refuse(*_stat_problem(path, exc, missing_fix)) from exc
    if stat.S_ISDIR(info.st_mode):
        raise refuse("is a directory, not a stack file", "give the path of a .yaml file in it")
    if not stat.S_ISREG(info.st_mode):
        raise refuse("is not a regular file (a device, pipe or socket)", "give a .yaml file")
    if info.st_size > MAX_SPEC_BYTES:
        raise refuse(
            f"is {info.st_size} bytes; a stack spec is at most {MAX_SPEC_BYTES // 1024} KiB",
            "check that this is the stack spec you meant",
        )
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise refuse(f"cannot be read: {exc.strerror}", "check its permissions") from exc
    if len(data) > MAX_SPEC_BYTES:
        raise refuse(f"is larger than {MAX_SPEC_BYTES // 1024} KiB", "check the file")
    return _decode(data, refuse)


def _stat_problem(path: Path, exc: OSError, missing_fix: str) -> tuple[str, str]:
    if exc.errno == errno.ELOOP:
        return "is a symbolic link that loops back on itself", "point the link at a real file"
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        if path.is_symlink():
            target = os.readlink(path)
            return f"is a symbolic link to {target}, which does not exist", "fix the link"
        return "does not exist", missing_fix
    if exc.errno == errno.EACCES:
        return "cannot be read: permission denied", "check the permissions of its folders"
    return f"cannot be read: {exc.strerror}", "check the path"


_WIDE_BOMS = {
    codecs.BOM_UTF32_LE: "UTF-32",
    codecs.BOM_UTF32_BE: "UTF-32",
    codecs.BOM_UTF16_LE: "UTF-16",
    codecs.BOM_UTF16_BE: "UTF-16",
}


def _decode(data: bytes, refuse: Callable[[str, str], SpecError]) -> str:
    for bom, name in _WIDE_BOMS.items():  # UTF-32 first: its LE BOM starts like UTF-16's
        if data.startswith(bom):
            raise refuse(f"is {name} text", "save it as UTF-8")
    if _looks_utf16(data):
        raise refuse("looks like UTF-16 text without a byte order mark", "save it as UTF-8")
    if b"\x00" in data:
        raise refuse("is a binary file (it holds NUL bytes), not YAML", "give a stack spec")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise refuse(
            f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})",
            "save it as UTF-8",
        ) from exc


def _looks_utf16(data: bytes) -> bool:
    """ASCII text in UTF-16: every other byte NUL, the ones between not."""
    halves = (data[0::2], data[1::2])
    for text, zeros in (halves, halves[::-1]):
        if zeros and zeros.count(0) > 0.9 * len(zeros) and text.count(0) < 0.1 * len(text):
            return True
    return False
