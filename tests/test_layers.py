"""The package graph runs one way: a test fails as soon as an import runs back up.

Each subpackage of ``autotune`` is a node; the top-level modules (``config``,
``knobs``, ``options``, ``errors``, ``batch``, ``text``, ``exports``) are the
bottom layer, which every package may import and which imports none of them.
Every import counts, a function's deferred one too (it runs all the same);
only those under ``if TYPE_CHECKING:`` do not, since they never run.

Within the packages, no two modules import each other, type-only imports included:
a pair that needs each other's names shares a type or helper that belongs in one of
them, or in a small module both import.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "autotune"
ENTRY = {"__init__", "__main__"}  # the package's facade and `python -m autotune`: above every layer


def _unit(module: str) -> str | None:
    """The layer unit of an ``autotune`` module: its subpackage, "bottom" for a top-level module, None for the entry."""
    parts = module.split(".")
    if parts[0] != "autotune" or len(parts) == 1:
        return None
    if (PACKAGE / parts[1]).is_dir():
        return parts[1]
    return None if parts[1] in ENTRY else "bottom"


def _type_checking_only(tree: ast.Module) -> set[int]:
    """Line numbers of the imports under ``if TYPE_CHECKING:``."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                for sub in ast.walk(inner):
                    if isinstance(sub, (ast.Import, ast.ImportFrom)):
                        lines.add(sub.lineno)
    return lines


def _imports(path: Path, module: str, type_only: bool = False, root: Path = PACKAGE) -> list[str]:
    """The modules `path` imports (a package's name read under `root`); with `type_only`, those under
    ``if TYPE_CHECKING:`` too."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skip = set() if type_only else _type_checking_only(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, f"{module}: a relative import; autotune imports by absolute name"
            base = node.module or ""
            # `from autotune.parity import run` imports the module autotune.parity.run
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.append(full if (root.parent / (full.replace(".", "/") + ".py")).exists() else base)
    return found


def edges() -> dict[tuple[str, str], list[str]]:
    """(from unit, to unit) -> the imports that make the edge, as ``module -> imported``."""
    made: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        source = _unit(module)
        if source is None:
            continue
        for imported in _imports(path, module):
            target = _unit(imported)
            if target is not None and target != source:
                made[(source, target)].append(f"{module} -> {imported}")
    return made


def _module_name(path: Path, root: Path = PACKAGE) -> str:
    """``autotune/loop/step.py`` -> ``autotune.loop.step``; a package's ``__init__.py`` is the package."""
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def mutual_pairs(root: Path = PACKAGE) -> list[tuple[str, str]]:
    """Every pair of modules under `root` that import each other, type-only imports included, sorted."""
    imported: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        module = _module_name(path, root)
        imported[module] = set(_imports(path, module, type_only=True, root=root))
    return sorted((a, b) for a, names in imported.items() for b in names if a < b and a in imported.get(b, ()))


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle in `graph` as a path that returns to its start, or None.

    >>> find_cycle({"a": {"b"}, "b": {"a"}})
    ['a', 'b', 'a']
    >>> find_cycle({"a": {"b"}, "b": set()}) is None
    True
    """
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_bottom_layer_imports_no_package() -> None:
    upward = {pair: why for pair, why in edges().items() if pair[0] == "bottom"}
    assert upward == {}


def test_the_package_graph_has_no_cycle() -> None:
    made = edges()
    graph: dict[str, set[str]] = defaultdict(set)
    for source, target in made:
        graph[source].add(target)
    cycle = find_cycle(graph)
    detail = [f"{a} -> {b}: {made[(a, b)][:3]}" for a, b in zip(cycle, cycle[1:])] if cycle else []
    assert cycle is None, f"imports run back up: {' -> '.join(cycle)}\n" + "\n".join(detail)


def test_a_deferred_import_is_an_edge_and_a_type_checking_one_is_not(tmp_path: Path) -> None:
    # The rule's own check: a deferred import inside a function is an edge; one under TYPE_CHECKING is not.
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from autotune.study import run\n"
        "def f():\n    from autotune.trial import runner\n"
    )
    assert [name for name in _imports(source, "autotune.loop.m") if name.startswith("autotune")] == [
        "autotune.trial.runner"
    ]


# Inside autotune.study, the units (a subpackage, or a top-level module) from the bottom up. A unit may import only
# the units before it: the shared context and the helpers first, then the steps in the order a search runs them, so
# that no step imports a later one.
STUDY_ORDER = [
    "identity",  # which workload a study measured
    "standing",  # the complete trials that can still be the answer (none of a family the parity check rejected)
    "space",  # the knobs, the seeds, the pruner
    "shared",  # one study, many searchers: storage, tickets, heartbeats, the writer's claim
    "context",  # Prepared, Setup, SearchError
    "pools",
    "ranking",
    "clock",
    "failed",
    "planning",
    "answer",
    "checks",
    "setup",  # step 1
    "progress",  # the line per trial
    "trials",  # step 2
    "rounds",
    "finalists",  # step 3
    "profile",  # step 4
    "ending",
    "run",  # the four steps
    "gpus",  # --gpus: searchers that run the steps
]
STUDY = PACKAGE / "study"


def _study_unit(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["autotune", "study"] or len(parts) < 3:
        return None
    return parts[2]


def study_edges() -> dict[tuple[str, str], list[str]]:
    """(from unit, to unit) -> the imports that make the edge, for the units inside ``autotune.study``."""
    made: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(STUDY.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        source = _study_unit(module)
        if source is None:
            continue
        for imported in _imports(path, module):
            target = _study_unit(imported)
            if target is not None and target != source:
                made[(source, target)].append(f"{module} -> {imported}")
    return made


def test_every_unit_of_the_study_package_has_its_place_in_the_order() -> None:
    units = {p.stem if p.is_file() else p.name for p in STUDY.iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())}
    assert units == set(STUDY_ORDER)


def test_the_study_s_units_import_only_the_ones_below_them() -> None:
    upward = {f"{a} -> {b}": why[:2] for (a, b), why in study_edges().items()
              if STUDY_ORDER.index(b) > STUDY_ORDER.index(a)}
    assert upward == {}


def test_no_folder_of_the_package_holds_more_than_16_modules() -> None:
    crowded = {str(folder.relative_to(PACKAGE.parent)): n for folder in [PACKAGE, *PACKAGE.rglob("*")]
               if folder.is_dir() and (n := len([p for p in folder.glob("*.py") if p.stem != "__init__"])) > 16}
    assert crowded == {}


def test_no_two_modules_import_each_other() -> None:
    pairs = mutual_pairs()
    assert pairs == [], "modules that import each other:\n" + "\n".join(f"{a} <-> {b}" for a, b in pairs)


def test_a_pair_that_imports_each_other_only_for_types_is_found(tmp_path: Path) -> None:
    # The rule's own check: an import under TYPE_CHECKING makes half a pair, as a deferred one does.
    package = tmp_path / "autotune" / "loop"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from autotune.loop.b import B\n"
    )
    (package / "b.py").write_text("def f():\n    from autotune.loop import a\n")
    (package / "c.py").write_text("from autotune.loop import a\n")
    assert mutual_pairs(tmp_path / "autotune") == [("autotune.loop.a", "autotune.loop.b")]
