"""The layering rules of docs/architecture.md, checked on the source itself.

Every import counts, lazy ones inside functions included, because a lazy import is
still a dependency: it only moves the failure to run time.
"""
from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("aiperf", "master", "worker", "aiperf_cli")
GENERATED = ("aiperf/api/aiperf_pb2.py", "aiperf/api/aiperf_pb2_grpc.py")
MAX_FILE_LINES = 700
MAX_FUNCTION_LINES = 80

# package -> packages it must never import
FORBIDDEN = {
    "aiperf": {"master", "worker", "aiperf_cli"},
    "master": {"worker", "aiperf_cli"},
    "worker": {"master", "aiperf_cli"},
}


def _sources() -> list[Path]:
    files = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py")) if (ROOT / pkg).is_dir()]
    return [p for p in files if "migrations" not in p.parts and p.relative_to(ROOT).as_posix() not in GENERATED]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(path: Path, known: set[str]) -> set[str]:
    """Project modules that `path` imports anywhere in its body."""
    module, tree = _module_name(path), ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, _is_package(path), node)
            # `from pkg import mod` imports the submodule when there is one
            names = [f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    files = _sources()
    known = {_module_name(p) for p in files}
    return {_module_name(p): _imports(p, known) for p in files}


def test_the_import_graph_has_no_cycle(graph: dict[str, set[str]]) -> None:
    # A module importing its own package's __init__ (and the reverse) is how Python
    # packages work, not a design cycle: drop edges from a package to its children.
    edges = {m: {d for d in deps if not d.startswith(m + ".")} for m, deps in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(edges.get(m, ())):
            if state.get(d) == 1:
                cycle = stack[stack.index(d):] + [d]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_layers_import_only_downwards(graph: dict[str, set[str]], package: str) -> None:
    bad = sorted(f"{m} -> {d}" for m, deps in graph.items() if m.split(".")[0] == package
                 for d in deps if d.split(".")[0] in FORBIDDEN[package])
    assert not bad, "forbidden imports:\n" + "\n".join(bad)


def test_the_pure_library_does_no_network_or_database_io(graph: dict[str, set[str]]) -> None:
    # aiperf.api is the gRPC client package and says so; the rest of aiperf/ is pure.
    io_modules = ("grpc", "sqlalchemy", "socket", "subprocess", "psycopg")
    bad = []
    for path in _sources():
        module = _module_name(path)
        if module.split(".")[0] != "aiperf" or module.startswith("aiperf.api"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            bad += [f"{module} imports {n}" for n in names if n.split(".")[0] in io_modules]
    assert not bad, bad


def test_no_source_file_is_over_the_size_limit() -> None:
    big = [(p.relative_to(ROOT).as_posix(), n) for p in _sources()
           if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES]
    assert not big, f"files over {MAX_FILE_LINES} lines: {big}"


def test_no_function_is_over_the_size_limit() -> None:
    long = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_the_checker_sees_lazy_imports(tmp_path: Path) -> None:
    # The rules above are only as good as the import finder: a lazy import must count.
    pkg = tmp_path / "aiperf"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from . import b\n    import aiperf.c\n")
    (pkg / "b.py").write_text("")
    (pkg / "c.py").write_text("")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        known = {"aiperf", "aiperf.a", "aiperf.b", "aiperf.c"}
        assert _imports(pkg / "a.py", known) == {"aiperf.b", "aiperf.c"}
    finally:
        ROOT = saved


# ---------------------------------------------------------------- master/: rooms in layers

# The master's sub-packages, top to bottom: a module imports its own room or rooms below it,
# never one above. The entry point (master.server) plugs the SQL store in: it alone, of the
# rooms above master.store.sql, imports it; everything else sees the store's protocols.
MASTER_LAYERS = ("master.server", "master.frontends", "master.rpc", "master.core", "master.observability",
                 "master.store.sql", "master.store")


def _master_layer(module: str) -> int | None:
    """Index in MASTER_LAYERS of the room holding `module` (the longest matching prefix)."""
    found = [i for i, room in enumerate(MASTER_LAYERS) if module == room or module.startswith(room + ".")]
    return max(found, key=lambda i: len(MASTER_LAYERS[i])) if found else None


def test_every_master_module_is_in_a_room(graph: dict[str, set[str]]) -> None:
    homeless = sorted(m for m in graph if m.startswith("master.") and _master_layer(m) is None)
    assert not homeless, f"modules of master/ outside {MASTER_LAYERS}: {homeless}"


def test_master_rooms_import_only_downwards(graph: dict[str, set[str]]) -> None:
    bad = []
    for module, deps in graph.items():
        here = _master_layer(module)
        if here is None:
            continue
        for dep in deps:
            there = _master_layer(dep)
            if there is None:
                continue
            if there < here:
                bad.append(f"{module} -> {dep} (upwards)")
            elif MASTER_LAYERS[there] == "master.store.sql" and here not in (0, there):
                bad.append(f"{module} -> {dep} (only master.server plugs the SQL store in)")
    assert not bad, "\n".join(sorted(bad))


def test_only_the_sql_store_speaks_sql(graph: dict[str, set[str]]) -> None:
    bad = []
    for path in _sources():
        module = _module_name(path)
        if not module.startswith("master.") or module.startswith("master.store.sql"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            bad += [f"{module} imports {n}" for n in names if n.split(".")[0] in ("sqlalchemy", "alembic", "psycopg")]
    assert not bad, bad


# ---------------------------------------------------------------- protobuf stops at the edges

PROTOBUF_EDGES = ("aiperf.api", "master.rpc")
# Folders outside the packages that may speak the wire itself, each with its reason. Every other
# Python file of the repository is held to the rule.
PROTOBUF_EXEMPT = {
    "tests": "hostile and raw requests the typed client refuses to build, checked at the master",
    "benchmarks": "the wire's own cost (message sizes, stream throughput) and forged requests",
}


def _repository_sources() -> list[Path]:
    """Every Python file of the repository but the exempt folders, the generated code and the
    virtual environment: what the protobuf rule holds to."""
    skip = set(PROTOBUF_EXEMPT) | {".venv", "protos"}
    files = [p for p in sorted(ROOT.rglob("*.py")) if not skip & set(p.relative_to(ROOT).parts[:1])
             and not any(part.startswith(".") for part in p.relative_to(ROOT).parts)]
    return [p for p in files if "migrations" not in p.parts and p.relative_to(ROOT).as_posix() not in GENERATED]


def _imported_names(path: Path) -> Iterator[list[str]]:
    """Each import statement of `path` (lazy ones too) as the dotted names it brings in: the
    module, and for `from m import x` also `m.x` (a submodule or a name of m)."""
    module = _module_name(path)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, _is_package(path), node)
            yield [base] + [f"{base}.{a.name}" for a in node.names]


def _protobuf_importers(sources: list[Path] | None = None) -> list[str]:
    found = []
    for path in _sources() if sources is None else sources:
        for names in _imported_names(path):
            if any(n.rpartition(".")[2] in ("aiperf_pb2", "aiperf_pb2_grpc") for n in names):
                found.append(_module_name(path))
    return sorted(set(found))


def test_protobuf_is_imported_only_at_the_edges() -> None:
    bad = [m for m in _protobuf_importers(_repository_sources())
           if not any(m == a or m.startswith(a + ".") for a in PROTOBUF_EDGES)]
    assert not bad, f"aiperf_pb2 imported outside {PROTOBUF_EDGES}: {bad}"


def test_the_protobuf_check_sees_every_form_of_import(tmp_path: Path) -> None:
    pkg = tmp_path / "worker"
    pkg.mkdir()
    forms = {"a": "from aiperf.api import aiperf_pb2 as pb\n", "b": "import aiperf.api.aiperf_pb2_grpc\n",
             "c": "def f():\n    from aiperf.api.aiperf_pb2 import Model\n", "d": "from aiperf.api import client\n"}
    for name, text in forms.items():
        (pkg / f"{name}.py").write_text(text)
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert _protobuf_importers(sorted(pkg.glob("*.py"))) == ["worker.a", "worker.b", "worker.c"]
    finally:
        ROOT = saved


# The CLI and the worker reach the master through the sessions (aiperf.api.control_session and
# aiperf.api.session), which answer plain records: never the wire-level clients, their stream, or
# the converters that take a message.
THROUGH_SESSIONS = ("aiperf_cli", "worker")
WIRE_LEVEL = ("aiperf.api.views", "aiperf.api.wire", "aiperf.api.stream", "aiperf.api.client.ControlClient",
              "aiperf.api.client.WorkerClient", "aiperf.api.client.WorkerStream")


def _wire_level_imports(sources: list[Path]) -> list[str]:
    found = []
    for path in sources:
        for names in _imported_names(path):
            found += [f"{_module_name(path)}: {n}" for n in names if n in WIRE_LEVEL]
    return sorted(set(found))


def test_the_cli_and_the_worker_talk_through_the_sessions() -> None:
    sources = [p for p in _sources() if p.relative_to(ROOT).parts[0] in THROUGH_SESSIONS]
    bad = _wire_level_imports(sources)
    assert not bad, f"wire-level API used outside aiperf.api (use the sessions): {bad}"


def test_the_session_check_sees_modules_and_names(tmp_path: Path) -> None:
    pkg = tmp_path / "aiperf_cli"
    pkg.mkdir()
    forms = {"a": "from aiperf.api.views import scoreboard_to_dict\n", "b": "import aiperf.api.wire\n",
             "c": "def f():\n    from aiperf.api.client import ControlClient\n",
             "d": "from aiperf.api.client import ApiError, NodeInventory\n",
             "e": "from aiperf.api import stream\n"}
    for name, text in forms.items():
        (pkg / f"{name}.py").write_text(text)
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert [f.split(":")[0] for f in _wire_level_imports(sorted(pkg.glob("*.py")))] == [
            "aiperf_cli.a", "aiperf_cli.b", "aiperf_cli.c", "aiperf_cli.e"]
    finally:
        ROOT = saved


# ---------------------------------------------------------------- states are the enums

STATE_SCOPE = PACKAGES
STATE_MODULE = "aiperf.states"
# The same words meaning something else, each with its reason.
NOT_A_STATE = {
    ("aiperf.audit", "failed"): "an audit's verdict and status",
    ("aiperf.api.stream", "done"): "an attribute name in __slots__",
    ("worker.agent", "stopping"): "a key of the health document (draining after a stop request)",
    ("worker.health", "stopping"): "a key of the health document (draining after a stop request)",
}


def _state_values() -> set[str]:
    from aiperf import states

    return {s.value for enum in (states.RunState, states.ModelState, states.WorkerState) for s in enum}


def _state_literals(module: str, source: str, values: set[str]) -> list[str]:
    """Every string constant of `source` (docstrings aside) that is a state's value, or holds one
    quoted as SQL does ('alive')."""
    tree = ast.parse(source)
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in docstrings:
            continue
        text = node.value
        hits = {text} & values | {v for v in values if f"'{v}'" in text}
        found += [f"{module}:{node.lineno} {v!r}" for v in sorted(hits) if (module, v) not in NOT_A_STATE]
    return found


def test_no_state_is_spelled_as_a_string() -> None:
    values = _state_values()
    bad = []
    for path in _sources():
        module = _module_name(path)
        if module.split(".")[0] in STATE_SCOPE and module != STATE_MODULE:
            bad += _state_literals(module, path.read_text(), values)
    assert not bad, "use aiperf.states (RunState, ModelState, WorkerState):\n" + "\n".join(bad)


def test_the_state_check_sees_comparisons_assignments_and_sql() -> None:
    source = '''"""Docstrings may say 'running' and "lost"."""
def f(run, row):
    """A run that is running."""
    if run.state == "running":
        row.state = 'lost'
    return "UPDATE workers SET state = 'alive'", "the run is running", "queued" in ("x",)
'''
    found = _state_literals("m", source, {"running", "lost", "alive", "queued"})
    assert found == ["m:4 'running'", "m:5 'lost'", "m:6 'alive'", "m:6 'queued'"]


# ---------------------------------------------------------------- one definition per limit


def _assigned_names(tree: ast.AST) -> list[tuple[str, int]]:
    names = []
    for node in ast.walk(tree):
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Name):
                    names.append((sub.id, node.lineno))
                elif isinstance(sub, ast.Attribute):
                    names.append((sub.attr, node.lineno))
    return names


def test_each_limit_is_defined_once() -> None:
    from aiperf import limits

    table = {name for name, _ in limits.LIMITS}
    bad = [f"{_module_name(path)}:{line} {name}" for path in _sources() if _module_name(path) != "aiperf.limits"
           for name, line in _assigned_names(ast.parse(path.read_text())) if name in table]
    assert not bad, "a limit of aiperf/limits.py assigned elsewhere: " + ", ".join(bad)


# ---------------------------------------------------------------- tests share helpers through tests/support


def _test_modules_imported(source: str) -> list[str]:
    """The test modules (test_*) that `source` imports: `from tests.test_x import ...`,
    `from test_x import ...`, `import tests.test_x`, `from tests import test_x`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names if node.module == "tests"]
        else:
            continue
        found += [n for n in names if any(part.startswith("test_") for part in n.split("."))]
    return found


def test_no_test_module_imports_another() -> None:
    # A helper two test files need lives in tests/support/: importing a test module runs its
    # module-level code and collects its tests twice under another name.
    files = sorted((ROOT / "tests").rglob("*.py")) + sorted((ROOT / "benchmarks").glob("*.py"))
    bad = [f"{p.relative_to(ROOT).as_posix()} imports {m}" for p in files
           for m in _test_modules_imported(p.read_text(encoding="utf-8"))]
    assert not bad, "move what is shared to tests/support/:\n" + "\n".join(bad)


def test_the_test_import_check_sees_every_form() -> None:
    source = ("import os\nfrom tests.support.ports import free_port\nfrom tests.test_a import x\n"
              "def f():\n    from test_b import y\n    import tests.test_c\n    from tests import test_d, support\n")
    assert _test_modules_imported(source) == ["tests.test_a", "test_b", "tests.test_c", "tests.test_d"]


# ---------------------------------------------------------------- comments say why, not which issue

ISSUE_NUMBER = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)


def _issue_references(source: str) -> list[int]:
    """Lines of `source` whose comment or docstring names one of the project's issues by number."""
    texts = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline)
             if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                texts.append((node.body[0].lineno, doc))
    return sorted(line for line, text in texts if ISSUE_NUMBER.search(text))


def test_no_comment_names_an_issue_number() -> None:
    # A comment says why the code is so; the issue that asked for it is in the history, not here.
    files = _sources() + sorted((ROOT / "tests").rglob("*.py")) + sorted((ROOT / "benchmarks").glob("*.py"))
    bad = [f"{p.relative_to(ROOT).as_posix()}:{line}" for p in files
           for line in _issue_references(p.read_text(encoding="utf-8"))]
    assert not bad, "comments or docstrings naming an issue: " + ", ".join(bad)


def test_the_issue_check_reads_comments_and_docstrings_only() -> None:
    source = ('"""Module (Issue 12)."""\nx = "issue 3"  # see issue #4\n\n\ndef f():\n    """Per issue 5."""\n'
              "    return 1  # tensorflow/tensorflow#97697 is upstream\n")
    assert _issue_references(source) == [1, 2, 6]


# ---------------------------------------------------------------- benchmarks: a package of the checkout


def test_the_benchmarks_are_a_package_that_edits_no_import_path() -> None:
    # run as `python -m benchmarks.NAME`: they import each other as modules, not by a path put first
    bench = ROOT / "benchmarks"
    assert (bench / "__init__.py").is_file()
    bad = [f"benchmarks/{p.name}:{n}" for p in sorted(bench.glob("*.py"))
           for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
           if "sys.path" in line or "noqa: E402" in line]
    assert not bad, f"import path edits: {bad}"


def test_an_install_brings_neither_benchmarks_nor_tests() -> None:
    import configparser

    from setuptools import find_packages

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    find = cfg["options.packages.find"]
    installed = set(find_packages(str(ROOT), include=find["include"].split(), exclude=find["exclude"].split()))
    assert {"aiperf", "master", "worker", "aiperf_cli"} <= installed
    assert not {p for p in installed if p.split(".")[0] in ("benchmarks", "tests")}, installed
def _limits_read_elsewhere(module: str, is_package: bool, tree: ast.AST, table: set[str]) -> list[str]:
    """Where `tree` takes a limit of the table from another module than aiperf.limits (a module that
    imported it: one more place a reader must look, and the first step to a second definition)."""
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _resolve(module, is_package, node)
            bad += [f"{module}:{node.lineno} {a.name} from {source}" for a in node.names
                    if a.name in table and source != "aiperf.limits"]
        elif isinstance(node, ast.Attribute) and node.attr in table:
            owner = node.value.id if isinstance(node.value, ast.Name) else ast.unparse(node.value)
            if owner != "limits":
                bad.append(f"{module}:{node.lineno} {owner}.{node.attr}")
    return bad


def test_each_limit_is_read_from_the_table() -> None:
    from aiperf import limits

    table = {name for name, _ in limits.LIMITS}
    bad = [hit for path in _sources() if _module_name(path) != "aiperf.limits"
           for hit in _limits_read_elsewhere(_module_name(path), _is_package(path), ast.parse(path.read_text()), table)]
    assert not bad, "read a limit from aiperf.limits itself: " + ", ".join(bad)


def test_the_limit_check_sees_re_exports_and_attributes() -> None:
    source = ("from aiperf.api.bounds import MAX_ID, clip_text\nfrom aiperf.limits import MAX_SEQ\n"
              "from aiperf import hyperparameters, limits\nx = hyperparameters.MAX_KERNEL_SIZE + limits.MAX_PAGE\n")
    found = _limits_read_elsewhere("worker.m", False, ast.parse(source),
                                   {"MAX_ID", "MAX_SEQ", "MAX_KERNEL_SIZE", "MAX_PAGE"})
    assert found == ["worker.m:1 MAX_ID from aiperf.api.bounds", "worker.m:4 hyperparameters.MAX_KERNEL_SIZE"]


# A MAX_* constant of another module whose number equals a limit of the table by coincidence, each
# with why it is not that limit; any other equal number is a limit defined twice under two names.
COINCIDENT_LIMITS = {
    ("worker.data.numpy_pipeline", "MAX_DEPTH"): "prefetch depth in batches, not accelerator models named",
    ("aiperf_cli.export", "MAX_SUBMISSION_TEXT"): "characters of --org and --platform, not an accelerator model",
    ("aiperf_cli.export", "MAX_COMPARE"): "runs one `aiperf compare` reads, not graph JSON nesting",
    ("aiperf_cli.options", "MAX_SMALL_FILE_BYTES"): "bytes of a token or certificate file, not graph JSON",
}


def _constant(node: ast.expr) -> int | float | None:
    """The number a constant expression (1 << 20, 30 * 86400.0, -1) stands for; None otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _constant(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.BinOp):
        left, right = _constant(node.left), _constant(node.right)
        ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
               ast.Pow: lambda a, b: a ** b, ast.LShift: lambda a, b: a << b}
        if left is not None and right is not None and type(node.op) in ops:
            return ops[type(node.op)](left, right)
    return None


def _max_constants(tree: ast.Module) -> list[tuple[str, int | float, int]]:
    """(name, value, line) of each module-level MAX_* constant with a constant value."""
    found = []
    for node in tree.body:
        target = (node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1
                  else node.target if isinstance(node, ast.AnnAssign) and node.value is not None else None)
        if isinstance(target, ast.Name) and target.id.startswith("MAX_"):
            value = _constant(node.value)
            if value is not None:
                found.append((target.id, value, node.lineno))
    return found


def test_no_limit_is_defined_again_under_another_name() -> None:
    from aiperf import limits

    values = {value: name for name, value, _ in limits.limits_table() if name.startswith("MAX_")}
    bad = [f"{module}:{line} {name} = {value!r} (aiperf.limits.{values[value]})" for path in _sources()
           if (module := _module_name(path)) != "aiperf.limits"
           for name, value, line in _max_constants(ast.parse(path.read_text()))
           if value in values and (module, name) not in COINCIDENT_LIMITS]
    assert not bad, "a limit's number defined again (import it from aiperf.limits):\n" + "\n".join(bad)
    stale = [key for key in COINCIDENT_LIMITS
             if not any(_module_name(p) == key[0] and any(n == key[1] for n, _, _ in _max_constants(ast.parse(p.read_text())))
                        for p in _sources())]
    assert not stale, f"COINCIDENT_LIMITS names constants that are gone: {stale}"


def test_the_duplicate_limit_check_reads_constant_expressions() -> None:
    tree = ast.parse("MAX_A = 8192\nMAX_B: int = 1 << 20\nMAX_C = 30 * 86400.0\nMAX_D = f(3)\nX = 5\n")
    assert _max_constants(tree) == [("MAX_A", 8192, 1), ("MAX_B", 1 << 20, 2), ("MAX_C", 30 * 86400.0, 3)]
