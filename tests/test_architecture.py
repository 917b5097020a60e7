"""The package's structure, read from its own imports (every ``import``, function-level and
``TYPE_CHECKING`` ones included): no cycle, lower layers never import upper ones, and only the
units (topologies, routers, benchmark datasets) name a topology, router or dataset of their
own."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "generator"

# Lowest first. A module belongs to the layer of the longest name that is it or a package
# above it; every module not listed sits above them all (render, probes, workflow, cli...).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "foundation",
        (
            "generator.errors",
            "generator.limits",
            "generator.owned",
            "generator.paths",
            "generator.supervise",
        ),
    ),
    # The proxy's own model, which routers fill, and the policy registry it names.
    (
        "proxy config",
        ("generator.proxy.config", "generator.proxy.policies", "generator.proxy.prompt"),
    ),
    ("spec", ("generator.spec",)),
    ("plan data", ("generator.plan",)),  # models, parts, ports, files: what units return
    (
        "units",
        (
            "generator.topologies",
            "generator.routers",
            "generator.datasets",
            "generator.runtimes.kinds",
        ),
    ),
    ("planner", ("generator.planner", "generator.stack")),  # above the units they consult
    ("observe", ("generator.observe",)),  # what observe's services read, from the plan
    ("services", ("generator.services",)),
    ("serializers", ("generator.serializers",)),
)
_CHECKED_UP_TO = "serializers"  # layers whose imports the direction test holds

# The units, and the data they return (one member per unit in plan/parts.py, re-exported by
# generator/plan/__init__.py): the only places that may name a topology or router of their own.
UNIT_PACKAGES = (
    "generator.topologies",
    "generator.routers",
    "generator.datasets",
    "generator.runtimes.kinds",
    "generator.workflow.runtimes",
)
UNIT_DATA = ("generator.plan.parts", "generator.plan")
UNIT_ENUMS = ("Topology", "RouterKind", "Runtime")
# Where an enum is defined and given as the spec's default: naming its member there is no
# choice between units.
_ENUM_DEFAULTS = {"generator.spec.models": {"Runtime"}, "generator.plan.models": {"Runtime"}}
_SHARED_PARTS = {"EngineKV", "RouterPlan", "SidecarPlan", "TopologyPlan", "part_of", "span"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


@cache
def _tree(module: str) -> ast.Module:
    path = _modules()[module]
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _known(name: str) -> str | None:
    """The generator module that ``name`` (a module, or a name in one) is, or lies in."""
    while name and name not in _modules():
        name = name.rpartition(".")[0]
    return name or None


def _imported(module: str) -> Iterator[str]:
    is_package = _modules()[module].name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            found = _known(target) if target.startswith("generator") else None
            if found is not None and found != module:
                yield found


@cache
def import_graph() -> dict[str, frozenset[str]]:
    return {module: frozenset(_imported(module)) for module in _modules()}


def strongly_connected(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative: the groups of modules that import each other in a ring."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root, imported in graph.items():
        if root in index:
            continue
        work = [(root, iter(sorted(imported)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            child = next((e for e in edges if e not in index or e in on_stack), None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    groups.append(sorted(group))
            elif child in index:
                low[node] = min(low[node], index[child])
            else:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
    return groups


def layer_of(module: str) -> int:
    matches = [
        (len(name), rank)
        for rank, (_, names) in enumerate(LAYERS)
        for name in names
        if _in(module, (name,))
    ]
    return max(matches)[1] if matches else len(LAYERS)


def _in(module: str, homes: tuple[str, ...]) -> bool:
    return any(module == home or module.startswith(f"{home}.") for home in homes)


def test_the_graph_sees_deferred_and_type_checking_imports() -> None:
    """The walk reaches imports inside functions and ``if TYPE_CHECKING`` blocks."""
    graph = import_graph()
    assert "generator.workflow.context" in graph["generator.workflow.task"]  # TYPE_CHECKING
    assert "generator.workflow.run" in graph["generator.cli.run_commands"]  # inside a function


def test_tarjan_finds_a_ring_and_leaves_a_chain() -> None:
    ring = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset()}
    assert sorted(g for g in strongly_connected(ring) if len(g) > 1) == [["a", "b", "c"]]
    chain = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset()}
    assert all(len(g) == 1 for g in strongly_connected(chain))


def test_no_import_cycle() -> None:
    cycles = [group for group in strongly_connected(import_graph()) if len(group) > 1]
    assert cycles == [], "modules that import each other in a ring: " + "; ".join(
        ", ".join(group) for group in cycles
    )


def test_every_module_is_in_a_layer_it_was_given() -> None:
    assert layer_of("generator.spec.types") < layer_of("generator.plan.models")
    assert layer_of("generator.plan.models") < layer_of("generator.topologies.nixl_mp")
    assert layer_of("generator.routers") < layer_of("generator.planner")
    assert layer_of("generator.plan") == layer_of("generator.plan.parts")
    assert layer_of("generator.planner") < layer_of("generator.services.parts")
    assert layer_of("generator.serializers.compose") < layer_of("generator.render.images")


def test_lower_layers_never_import_upper_ones() -> None:
    """spec -> plan data -> units -> planner -> services -> serializers: each imports only
    its own layer and those below."""
    top = next(rank for rank, (name, _) in enumerate(LAYERS) if name == _CHECKED_UP_TO)
    upward = [
        f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} "
        f"({LAYERS[layer_of(target)][0] if layer_of(target) < len(LAYERS) else 'above all'})"
        for module, targets in import_graph().items()
        if layer_of(module) <= top
        for target in sorted(targets)
        if layer_of(target) > layer_of(module)
    ]
    assert upward == []


def _unit_names() -> tuple[set[str], set[str]]:
    """The unit modules (generator.topologies.nixl_mp, ...) and their own plan parts."""
    shared = ("topologies", "routers", "datasets", "kinds", "runtimes", "base", "docker_host")
    modules = {
        module
        for module in _modules()
        if _in(module, UNIT_PACKAGES) and module.rpartition(".")[2] not in shared
    }
    parts = set(importlib.import_module("generator.plan.parts").__all__) - _SHARED_PARTS
    return modules, parts | _dataset_classes()


def _dataset_classes() -> set[str]:
    """Each dataset's settings class: a dataset's part, as a plan part is a topology's."""
    datasets = importlib.import_module("generator.datasets")
    return {type(unit.defaults).__name__ for unit in datasets.DATASETS.values()}


def _unit_mentions(
    tree: ast.Module, where: str, unit_modules: set[str], unit_parts: set[str]
) -> Iterator[str]:
    enums = set(UNIT_ENUMS) - _ENUM_DEFAULTS.get(where, set())
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in unit_parts:
            yield f"{where}:{node.lineno} names {node.id}"
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in enums
            and node.attr.isupper()
        ):
            yield f"{where}:{node.lineno} names {node.value.id}.{node.attr}"
        elif isinstance(node, ast.ImportFrom | ast.Import):
            yield from _unit_imports(where, node, unit_modules, unit_parts)


def _unit_imports(
    where: str, node: ast.Import | ast.ImportFrom, unit_modules: set[str], unit_parts: set[str]
) -> Iterator[str]:
    base = node.module if isinstance(node, ast.ImportFrom) else None
    for alias in node.names:
        target = f"{base}.{alias.name}" if base else alias.name
        if target in unit_modules or base in unit_modules or alias.name in unit_parts:
            yield f"{where}:{node.lineno} imports {target}"


def test_the_unit_check_finds_a_unit_named_outside() -> None:
    modules, parts = _unit_names()
    assert {"generator.topologies.colocated", "generator.routers.vllm_router"} <= modules
    assert {"ColocatedTopology", "ProxyRouterPlan"} <= parts
    assert not {"TopologyPlan", "SidecarPlan"} & parts  # shared by every unit
    assert {"generator.datasets.prefix_repetition", "generator.datasets.random_tokens"} <= modules
    assert {"PrefixRepetition", "RandomTokens"} <= parts
    source = (
        "from generator.topologies import nixl_mp\n"
        "from generator.routers.proxy import UNIT\n"
        "if Topology.COLOCATED or isinstance(x, ColocatedTopology): RouterKind.proxy\n"
    )
    found = list(_unit_mentions(ast.parse(source), "probe", modules, parts))
    assert found == [
        "probe:1 imports generator.topologies.nixl_mp",
        "probe:2 imports generator.routers.proxy.UNIT",
        "probe:3 names Topology.COLOCATED",
        "probe:3 names ColocatedTopology",
    ]


def test_no_module_outside_a_unit_names_a_topology_router_or_runtime() -> None:
    """Outside code asks a unit through its protocol (generator/topologies/base.py,
    generator/routers/base.py, generator/runtimes/kinds/base.py,
    generator/workflow/runtimes/base.py): never a unit's module, plan part or enum member."""
    modules, parts = _unit_names()
    found = [
        mention
        for module in _modules()
        if not _in(module, UNIT_PACKAGES) and module not in UNIT_DATA
        for mention in _unit_mentions(_tree(module), module, modules, parts)
    ]
    assert found == []


def test_a_topology_and_a_router_never_name_each_others_parts() -> None:
    """A topology reads the router's part through its shared members (``notices_port``), a
    router the topology's through the topology protocol (``receiver_ports``)."""
    _, parts = _unit_names()
    router_parts = {name for name in parts if name.endswith("RouterPlan")}
    assert router_parts == {"ProxyRouterPlan", "VllmRouterPlan"}
    crossings = [
        mention
        for package, foreign in (
            ("generator.topologies", router_parts),
            ("generator.routers", parts - router_parts),
        )
        for module in _modules()
        if _in(module, (package,))
        for mention in _part_mentions(_tree(module), module, foreign)
    ]
    assert crossings == []


def _part_mentions(tree: ast.Module, where: str, parts: set[str]) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in parts:
            yield f"{where}:{node.lineno} names {node.id}"
        elif isinstance(node, ast.ImportFrom):
            yield from (
                f"{where}:{node.lineno} imports {alias.name}"
                for alias in node.names
                if alias.name in parts
            )


def _dataset_branches(tree: ast.Module, where: str, names: set[str]) -> Iterator[str]:
    """Comparisons with a dataset's name: code that branches on which dataset it has, where
    it should ask the dataset (a preset may still choose one by name: that is data)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                if isinstance(operand, ast.Constant) and operand.value in names:
                    yield f"{where}:{node.lineno} compares with {operand.value!r}"


def test_the_dataset_check_finds_a_branch_on_a_dataset() -> None:
    source = "if settings.dataset.name == 'prefix-repetition': pass\nx = {'random': 1}\n"
    names = {"random", "prefix-repetition"}
    found = list(_dataset_branches(ast.parse(source), "probe", names))
    assert found == ["probe:1 compares with 'prefix-repetition'"]


def test_no_module_outside_the_datasets_branches_on_one() -> None:
    """bench, the report and the CLI ask a dataset through its protocol
    (generator/datasets/base.py): adding one is its module and its registration."""
    names = set(importlib.import_module("generator.datasets").DATASETS)
    found = [
        branch
        for module in _modules()
        if not _in(module, ("generator.datasets",))
        for branch in _dataset_branches(_tree(module), module, names)
    ]
    assert found == []
