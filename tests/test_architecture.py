"""The package's shape, checked: no import cycle (deferred imports included), a library that never
imports the harness or torch, and a README layout map that names the files that exist."""
import ast
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "roofline"


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """Every roofline module `path` imports, at any depth of the file (a deferred import counts)."""
    own = module_name(path)
    package = own if path.name == "__init__.py" else own.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != own and not own.startswith(name + "."):
                found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): imports_of(p, modules) for p in paths}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_package_import_graph_has_no_cycle_even_through_deferred_imports():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_would_catch_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_library_module_imports_the_validation_harness():
    offenders = [str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py")
                 if re.search(r"^\s*(from|import)\s+validation\b", p.read_text(), re.MULTILINE)]
    assert offenders == []


def test_import_roofline_loads_neither_torch_nor_the_harness_nor_streamlit():
    code = ("import sys, roofline, roofline.cli; "
            "print(sorted(m for m in ('torch', 'validation', 'streamlit') if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def layout_block() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Layout", 1)[1].split("\n## ", 1)[0]
    return section.split("```", 2)[1]


def test_the_readme_layout_map_names_every_library_file_and_no_other():
    """Each .py under roofline/ appears in the map by its name (a package's files on its line), and every
    name the map gives exists."""
    block = layout_block()
    files = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"}
    named = set()
    package = ""
    for line in block.splitlines():
        head = re.match(r"  (\w+)/", line)
        if re.match(r"\S", line):  # a top-level entry: roofline/ opens the map, app.py and the rest close it
            package = "" if line.startswith("roofline/") else None
        elif head:
            package = head.group(1) + "/"
        elif re.match(r"  \w", line):
            package = ""
        if package is None:
            continue
        for name in re.findall(r"\b([a-z_0-9]+\.py)\b", line):
            named.add(name if "/" in name or not package else package + name)
    missing = sorted(f for f in files if f not in named)
    stale = sorted(n for n in named if n not in files and not n.endswith("__init__.py"))
    assert missing == [] and stale == [], f"not in the README map: {missing}; in the map, not on disk: {stale}"


def test_the_public_api_names_exist_and_py_typed_ships():
    import roofline

    assert all(hasattr(roofline, name) for name in roofline.__all__)
    assert (PACKAGE / "py.typed").exists()


def test_the_app_uses_only_the_public_api():
    """app.py is a front end: every name it takes from the package is in `roofline.__all__` (`from roofline import
    ...` or `roofline.NAME`); no module path inside the package. The harness (validation/) is its own package."""
    import roofline

    tree = ast.parse((ROOT / "app.py").read_text())
    deep = [f"line {n.lineno}" for n in ast.walk(tree)
            if (isinstance(n, ast.ImportFrom) and (n.module or "").startswith("roofline."))
            or (isinstance(n, ast.Import) and any(a.name.startswith("roofline.") for a in n.names))]
    taken = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "roofline" for a in n.names}
    taken |= {n.attr for n in ast.walk(tree)
              if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "roofline"}
    assert deep == [], f"app.py imports modules inside roofline at {deep}: export the name in roofline.__all__"
    assert taken - set(roofline.__all__) == set()
