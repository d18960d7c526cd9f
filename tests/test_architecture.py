"""The dependency table of ``docs/architecture.md`` is checked against the code.

The table (header ``| package | responsibility | may import |``) has one row per top-level
package or module of ``agentrl`` plus ``retriever/``. Its "may import" cell names the other
agentrl packages that package may import (short names such as ``core, engines``, or ``—``);
third-party libraries may be mentioned in words there and are ignored. Every ``.py`` file
under ``agentrl/`` and ``retriever/`` is parsed with ``ast`` (imports inside functions count,
relative imports are resolved, ``from __future__`` is ignored) and each import of an agentrl
package, or of ``retriever``, must be allowed by the row of the importing file's package.
Importing one's own package is always allowed; the word ``agentrl`` in a cell stands for the
package root, ``agentrl/__init__.py``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DOC_PATH = REPO_ROOT / "docs" / "architecture.md"
HEADER = "| package | responsibility | may import |"
ROOT_KEY = "agentrl"  # the row of agentrl/__init__.py itself
RETRIEVER = "retriever"
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Row:
    label: str  # the package cell as written, e.g. "agentrl/core/"
    key: str  # the short name imports are matched against, e.g. "core"
    allowed: frozenset[str]
    line: int


@dataclass(frozen=True)
class Import:
    path: Path
    line: int
    module: str  # the imported module, absolute, e.g. "agentrl.core.masked"
    package: str  # the package it belongs to: "core", "seeding", "retriever", ...


def shown(path: Path) -> str:
    """``path`` relative to the repository when it is inside it (messages stay short)."""
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def _key_of_label(label: str) -> str | None:
    """Short name of a package cell: ``agentrl/core/`` → core, ``agentrl/seeding.py`` → seeding."""
    if label == f"{RETRIEVER}/":
        return RETRIEVER
    if label == "agentrl/__init__.py":
        return ROOT_KEY
    match = re.fullmatch(r"agentrl/(\w+)/|agentrl/(\w+)\.py", label)
    return (match.group(1) or match.group(2)) if match else None


def read_table(doc: Path) -> dict[str, Row]:
    """The rows of the one dependency table in ``doc``, by short name."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == HEADER]
    assert len(starts) == 1, (
        f"{doc}: expected exactly one table with the header {HEADER!r}, found {len(starts)}"
    )
    rows: dict[str, Row] = {}
    for i in range(starts[0] + 2, len(lines)):  # skip the header and the |---| line
        text = lines[i].strip()
        if not text.startswith("|"):
            break
        cells = [cell.strip() for cell in text.strip("|").split("|")]
        assert len(cells) == 3, (
            f"{doc}:{i + 1}: a row of the dependency table needs 3 cells, got {len(cells)}"
        )
        label = cells[0].strip("`").strip()
        key = _key_of_label(label)
        assert key is not None, (
            f"{doc}:{i + 1}: package cell {cells[0]!r} is not "
            "`agentrl/NAME/`, `agentrl/NAME.py` or `retriever/`"
        )
        assert key not in rows, (
            f"{doc}:{i + 1}: package {label!r} has a second row (first at line {rows[key].line})"
        )
        rows[key] = Row(label, key, frozenset(NAME.findall(cells[2])), i + 1)
    assert rows, f"{doc}: the dependency table has no rows"
    return rows


def packages_on_disk(root: Path) -> dict[str, Path]:
    """Every top-level package or module of agentrl, and the retriever, by short name."""
    found: dict[str, Path] = {}
    for child in sorted((root / "agentrl").iterdir()):
        if child.is_dir() and any(child.rglob("*.py")):
            found[child.name] = child
        elif child.suffix == ".py":
            found[ROOT_KEY if child.name == "__init__.py" else child.stem] = child
    found[RETRIEVER] = root / RETRIEVER
    return found


def package_of_file(path: Path, root: Path) -> str:
    parts = path.relative_to(root).parts
    if parts[0] == RETRIEVER:
        return RETRIEVER
    if len(parts) == 2:
        return ROOT_KEY if parts[1] == "__init__.py" else Path(parts[1]).stem
    return parts[1]


def _package_of_module(module: str, names: list[str]) -> list[str]:
    """Packages an import of ``module`` (``from module import names``) reaches; [] if not ours."""
    head, _, rest = module.partition(".")
    if head == RETRIEVER:
        return [RETRIEVER]
    if head != "agentrl":
        return []
    if rest:
        return [rest.split(".")[0]]
    return names or [ROOT_KEY]  # ``import agentrl`` / ``from agentrl import core, seeding``


def imports_of(path: Path, root: Path, known: set[str]) -> list[Import]:
    """Imports of agentrl packages and of the retriever anywhere in ``path`` (functions included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    module_parts = list(path.relative_to(root).with_suffix("").parts)
    package_parts = module_parts[:-1]  # the package a relative import starts from (also for __init__)
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                for package in _package_of_module(alias.name, []):
                    found.append(Import(path, node.lineno, alias.name, package))
        elif isinstance(node, ast.ImportFrom):
            if node.module == "__future__":
                continue
            if node.level:
                base = package_parts[: len(package_parts) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            names = [a.name for a in node.names]
            if module == "agentrl":
                packages = [n if n in known else ROOT_KEY for n in names]
            else:
                packages = _package_of_module(module, names)
            for package in packages:
                found.append(Import(path, node.lineno, module, package))
    return found


def source_files(root: Path) -> list[Path]:
    return sorted(p for top in ("agentrl", RETRIEVER) for p in (root / top).rglob("*.py"))


def violations(root: Path, rows: dict[str, Row], doc: Path) -> list[str]:
    """One message per import the table does not allow, naming the file, the package and the row."""
    known = set(packages_on_disk(root))
    problems = []
    for path in source_files(root):
        own = package_of_file(path, root)
        row = rows.get(own)
        for imp in imports_of(path, root, known):
            if imp.package == own:
                continue
            rel = path.relative_to(root)
            if row is None:
                problems.append(
                    f"{rel}:{imp.line} imports {imp.module} (package {imp.package!r}) but package {own!r} "
                    f"has no row in {shown(doc)}"
                )
            elif imp.package not in row.allowed:
                allowed = ", ".join(sorted(row.allowed & (known | {RETRIEVER}))) or "—"
                problems.append(
                    f"{rel}:{imp.line} imports {imp.module} (package {imp.package!r}), which row "
                    f"`{row.label}` ({shown(doc)} line {row.line}) does not allow; it may import: {allowed}"
                )
    return problems


LAYER_LINE = re.compile(r"^(\w+)\s+((?:(?:agentrl/\w+(?:/|\.py)|retriever/)\s*(?:→\s*)?)+)")
PACKAGE_LABEL = re.compile(r"agentrl/\w+/|agentrl/\w+\.py|retriever/")


def read_layers(doc: Path) -> dict[str, tuple[int, int]]:
    """The layer diagram above the table: short name → (layer, position on its line).

    Layer 0 is the top line of the fenced block that follows the section heading; a package
    left of another on the same line sits above it (``engines → models``).
    """
    text = doc.read_text(encoding="utf-8")
    section = text.split("## Packages and the direction of dependencies", 1)[1]
    block = section.split("```", 2)[1]
    layers: dict[str, tuple[int, int]] = {}
    level = 0
    for line in block.splitlines():
        if not LAYER_LINE.match(line.strip()):
            continue
        labels = PACKAGE_LABEL.findall(line.split("(")[0])
        for position, label in enumerate(labels):
            key = _key_of_label(label)
            assert key is not None and key not in layers, f"{doc}: layer diagram names {label!r} twice"
            layers[key] = (level, position)
        level += 1
    assert layers, f"{doc}: no layer diagram found under 'Packages and the direction of dependencies'"
    return layers


def upward_permissions(
    rows: dict[str, Row], layers: dict[str, tuple[int, int]], known: set[str]
) -> list[str]:
    """Rows that allow importing a package above (or beside, to the left of) their own."""
    problems = []
    for key, row in rows.items():
        if key == ROOT_KEY:
            continue
        if key not in layers:
            problems.append(f"`{row.label}` has a row but no place in the layer diagram")
            continue
        for other in sorted(row.allowed & known - {key}):
            if other == ROOT_KEY:
                continue
            if other not in layers:
                problems.append(f"`{row.label}` may import {other!r}, which the layer diagram does not place")
                continue
            elif layers[other] < layers[key]:
                above = layers[other][0]
                problems.append(
                    f"`{row.label}` (layer {layers[key][0]}) may import {other!r} (layer {above}): upward"
                )
    return problems


def unused_permissions(root: Path, rows: dict[str, Row]) -> list[str]:
    """Packages a row allows that no file of that package imports."""
    known = set(packages_on_disk(root))
    used: dict[str, set[str]] = {key: set() for key in rows}
    for path in source_files(root):
        own = package_of_file(path, root)
        for imp in imports_of(path, root, known):
            used.setdefault(own, set()).add(imp.package)
    problems = []
    for key, row in rows.items():
        unused = sorted((row.allowed & (known | {RETRIEVER})) - used.get(key, set()) - {key})
        if unused:
            problems.append(
                f"`{row.label}` (line {row.line}) allows {unused}, which none of its files imports"
            )
    return problems


def module_of_file(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_graph(root: Path) -> dict[str, set[str]]:
    """Module → the modules of ours it imports (functions included), resolved to files.

    ``from pkg import name`` points at ``pkg.name`` when that is a module, else at ``pkg``.
    A submodule's implicit import of its parent package is not an edge.
    """
    files = {module_of_file(p, root): p for p in source_files(root)}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    module = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    module = node.module or ""
                targets = [
                    f"{module}.{a.name}" if f"{module}.{a.name}" in files else module for a in node.names
                ]
            for target in targets:
                while target and target not in files:  # ``import a.b.c`` of a name inside a module
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(target + "."):
                    graph[name].add(target)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80
WHY_LONG = re.compile(r"#\s*long\b", re.IGNORECASE)  # "# long: <why>", above the def or atop the module


def oversized(root: Path) -> list[str]:
    """Modules over MAX_MODULE_LINES and functions over MAX_FUNCTION_LINES without a ``# long:`` why."""
    problems = []
    for path in source_files(root):
        lines = path.read_text(encoding="utf-8").splitlines()
        rel = path.relative_to(root)
        if len(lines) > MAX_MODULE_LINES and not any(WHY_LONG.match(line.strip()) for line in lines[:40]):
            problems.append(
                f"{rel}: {len(lines)} lines (> {MAX_MODULE_LINES}) and no '# long: <why>' near the top"
            )
        for node in ast.walk(ast.parse("\n".join(lines), filename=str(path))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES and not (first >= 2 and WHY_LONG.match(lines[first - 2].strip())):
                problems.append(
                    f"{rel}:{node.lineno} {node.name}(): {length} lines (> {MAX_FUNCTION_LINES}) "
                    "and no '# long: <why>' comment on the line above"
                )
    return problems


# --- the checks on this repository ----------------------------------------------------------


@pytest.fixture(scope="module")
def table() -> dict[str, Row]:
    return read_table(DOC_PATH)


def test_every_package_imports_only_what_the_architecture_table_allows(table):
    problems = violations(REPO_ROOT, table, DOC_PATH)
    assert not problems, (
        f"imports that the dependency table of {shown(DOC_PATH)} does not allow "
        "(remove the import, or add the package to the row's 'may import' cell if the "
        "dependency is intended):\n  " + "\n  ".join(problems)
    )


def test_every_package_on_disk_has_a_row_in_the_architecture_table(table):
    missing = sorted(set(packages_on_disk(REPO_ROOT)) - set(table))
    assert not missing, f"packages without a row in the dependency table of {shown(DOC_PATH)}: {missing}"


def test_every_row_of_the_architecture_table_names_a_package_that_exists(table):
    on_disk = packages_on_disk(REPO_ROOT)
    stale = sorted(f"`{row.label}` (line {row.line})" for key, row in table.items() if key not in on_disk)
    assert not stale, (
        f"rows of the dependency table in {shown(DOC_PATH)} whose package does not exist: {stale}"
    )


def test_no_row_of_the_architecture_table_allows_an_import_upward(table):
    known = set(packages_on_disk(REPO_ROOT)) | {RETRIEVER}
    problems = upward_permissions(table, read_layers(DOC_PATH), known)
    assert not problems, f"{shown(DOC_PATH)}: permissions against the layer diagram:\n  " + "\n  ".join(
        problems
    )


def test_every_permission_in_the_architecture_table_is_used_by_an_import(table):
    problems = unused_permissions(REPO_ROOT, table)
    assert not problems, (
        f"{shown(DOC_PATH)}: permissions that no import uses (drop them from the row):\n  "
        + "\n  ".join(problems)
    )


def test_no_module_under_agentrl_or_the_retriever_is_part_of_an_import_circle():
    cycles = import_cycles(module_graph(REPO_ROOT))
    assert not cycles, "modules that import each other (directly or around a circle):\n  " + "\n  ".join(
        " ↔ ".join(cycle) for cycle in cycles
    )


def test_no_module_or_function_is_oversized_without_a_comment_saying_why():
    problems = oversized(REPO_ROOT)
    assert not problems, "split these, or say why they are long:\n  " + "\n  ".join(problems)


RETRIEVER_MAY_IMPORT = {"ports"}  # a standard-library leaf: the service stays free of torch and Ray


def test_the_retriever_row_allows_nothing_of_agentrl_but_the_standard_library_leaf_ports(table):
    row = table.get(RETRIEVER)
    assert row is not None, f"the dependency table of {shown(DOC_PATH)} has no `retriever/` row"
    allowed = row.allowed & (set(packages_on_disk(REPO_ROOT)) - {RETRIEVER})
    assert allowed <= RETRIEVER_MAY_IMPORT, (
        f"`retriever/` must import nothing of agentrl but {sorted(RETRIEVER_MAY_IMPORT)}, "
        f"but its row allows {sorted(allowed)}"
    )
    for leaf in RETRIEVER_MAY_IMPORT:
        imported = {imp.package for imp in imports_of(REPO_ROOT / "agentrl" / f"{leaf}.py", REPO_ROOT, set())}
        assert not imported, f"agentrl/{leaf}.py, which the retriever imports, imports {sorted(imported)}"


def test_the_architecture_doc_cites_no_design_document_that_is_not_in_the_repository():
    text = DOC_PATH.read_text(encoding="utf-8")
    cited = sorted(set(re.findall(r"DESIGN(?:\.md)?\s*§\s*\d*|DESIGN\.md", text)))
    assert not cited, f"{shown(DOC_PATH)} cites a design document that is not in the repository: {cited}"


# --- the checker itself, on a made-up tree ---------------------------------------------------


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _toy_repo(tmp_path: Path, core_may_import: str) -> tuple[Path, Path]:
    _write(tmp_path, "agentrl/__init__.py", "")
    _write(tmp_path, "agentrl/core/__init__.py", "from __future__ import annotations\nfrom . import maths\n")
    _write(
        tmp_path,
        "agentrl/core/maths.py",
        "def f():\n    from agentrl.trainer.loop import fit\n    return fit\n",
    )
    _write(tmp_path, "agentrl/trainer/loop.py", "from ..core import maths\nimport retriever.server\n")
    _write(tmp_path, "retriever/server.py", "import agentrl.seeding\n")
    _write(tmp_path, "agentrl/seeding.py", "")
    doc = tmp_path / "architecture.md"
    doc.write_text(
        "# toy\n\n"
        f"{HEADER}\n|---|---|---|\n"
        "| `agentrl/__init__.py` | root | — |\n"
        f"| `agentrl/core/` | maths (torch, numpy) | {core_may_import} |\n"
        "| `agentrl/trainer/` | the loop | core, retriever |\n"
        "| `agentrl/seeding.py` | seeds | — |\n"
        "| `retriever/` | search service (faiss) | — |\n\n"
        "After the table.\n",
        encoding="utf-8",
    )
    return tmp_path, doc


def test_an_import_inside_a_function_that_the_row_does_not_allow_is_reported_with_file_package_and_row(
    tmp_path,
):
    root, doc = _toy_repo(tmp_path, "—")
    problems = violations(root, read_table(doc), doc)
    core = [p for p in problems if p.startswith("agentrl/core/")]
    assert len(core) == 1, problems
    assert "agentrl/core/maths.py:2" in core[0]
    assert "'trainer'" in core[0]
    assert "`agentrl/core/`" in core[0]


def test_the_retriever_importing_agentrl_is_reported(tmp_path):
    root, doc = _toy_repo(tmp_path, "trainer")
    problems = violations(root, read_table(doc), doc)
    assert len(problems) == 1, problems
    assert problems[0].startswith("retriever/server.py:1 imports agentrl.seeding (package 'seeding')")
    assert "`retriever/`" in problems[0]


def test_relative_imports_and_listed_packages_are_allowed(tmp_path):
    root, doc = _toy_repo(tmp_path, "trainer")
    (root / "retriever" / "server.py").write_text("from retriever import base\n", encoding="utf-8")
    assert violations(root, read_table(doc), doc) == []


def test_third_party_words_in_the_may_import_cell_allow_nothing(tmp_path):
    root, doc = _toy_repo(tmp_path, "none of ours (torch, numpy)")
    problems = violations(root, read_table(doc), doc)
    core = [p for p in problems if p.startswith("agentrl/core/")]
    assert len(core) == 1 and core[0].endswith("it may import: —"), problems


def test_an_upward_permission_and_an_unused_one_are_reported(tmp_path):
    root, doc = _toy_repo(tmp_path, "trainer")
    with doc.open("a", encoding="utf-8") as f:
        f.write(
            "\n## Packages and the direction of dependencies\n\n```\n"
            "drivers  agentrl/trainer/\nleaves   agentrl/core/   agentrl/seeding.py\n"
            "service  retriever/\n```\n"
        )
    rows = read_table(doc)
    known = set(packages_on_disk(root))
    upward = upward_permissions(rows, read_layers(doc), known)
    assert len(upward) == 1 and "`agentrl/core/`" in upward[0] and "'trainer'" in upward[0], upward
    (root / "agentrl" / "trainer" / "loop.py").write_text("from ..core import maths\n", encoding="utf-8")
    unused = unused_permissions(root, rows)
    assert any("`agentrl/trainer/`" in p and "'retriever'" in p for p in unused), unused


def test_a_circle_of_imports_between_files_is_found_even_through_a_function(tmp_path):
    _write(tmp_path, "agentrl/__init__.py", "")
    _write(tmp_path, "agentrl/engines/__init__.py", "from agentrl.engines.hf import HF\n")
    _write(tmp_path, "agentrl/engines/hf.py", "from agentrl.engines import base\nclass HF: ...\n")
    _write(tmp_path, "agentrl/engines/base.py", "def f():\n    from .continuous import C\n")
    _write(tmp_path, "agentrl/engines/continuous.py", "from agentrl.engines.hf import HF\nC = 1\n")
    _write(tmp_path, "agentrl/engines/alone.py", "import agentrl.engines.base\n")
    (tmp_path / RETRIEVER).mkdir()
    cycles = import_cycles(module_graph(tmp_path))
    assert cycles == [["agentrl.engines.base", "agentrl.engines.continuous", "agentrl.engines.hf"]]


def test_an_oversized_function_needs_a_comment_saying_why(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    _write(
        tmp_path,
        "agentrl/big.py",
        f"def quiet():\n{body}\n\n# long: one table, read top to bottom\ndef why():\n{body}",
    )
    (tmp_path / RETRIEVER).mkdir()
    problems = oversized(tmp_path)
    assert len(problems) == 1 and "quiet()" in problems[0], problems
