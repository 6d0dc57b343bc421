"""A digest of the definitions that give a run's numbers their meaning: the rules that
`aiperf.ruleset.RULES_VERSION` names (tests/test_rules_version.py holds the digest).

A module's digest is its top-level definitions: a constant by its *value* (a
dataclass field by field, so `60 * T` and `6e13` are the same rule), a function
or class by its syntax tree with docstrings left out, imports not at all. So a
comment, a docstring, a blank line or a re-wrapped line changes nothing, while a
changed figure, bound, formula or comparison does. Python's `ast.dump` is not
used: its text differs between Python versions (3.13 leaves empty fields out).
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import hashlib
import importlib
import json
import types
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

_DOCSTRING_HOLDERS = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[1:]
    return body


def canonical_tree(node: Any) -> Any:
    """A syntax tree as plain lists: node type and its non-empty fields, docstrings left out."""
    if isinstance(node, ast.AST):
        out: dict[str, Any] = {}
        for name in node._fields:
            value = getattr(node, name, None)
            if name == "body" and isinstance(node, _DOCSTRING_HOLDERS):
                value = _without_docstring(value)
            if name == "type_comment" or value is None or value == []:
                continue
            out[name] = canonical_tree(value)
        return [type(node).__name__, out]
    if isinstance(node, list):
        return [canonical_tree(x) for x in node]
    return [type(node).__name__, repr(node)]


def canonical_value(value: Any) -> Any:
    """A module-level value as plain JSON: what it is, never where it lives in memory."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [type(value).__name__, {f.name: canonical_value(getattr(value, f.name))
                                       for f in dataclasses.fields(value)}]
    if isinstance(value, enum.Enum):
        return [type(value).__name__, repr(value.value)]
    if isinstance(value, Mapping):
        return ["mapping", [[canonical_value(k), canonical_value(v)] for k, v in value.items()]]
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [canonical_value(x) for x in value]]
    if isinstance(value, (set, frozenset)):
        return ["set", sorted(json.dumps(canonical_value(x)) for x in value)]
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return [type(value).__name__, repr(value)]
    if isinstance(value, (type, types.FunctionType, types.ModuleType)):
        return ["reference", getattr(value, "__qualname__", value.__name__)]  # its own definition is digested
    raise TypeError(f"no canonical form for a {type(value).__name__} ({value!r})")


def _is_type_checking_block(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def _names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for t in target.elts for n in _names(t)]
    return []


def module_form(source: str, namespace: Mapping[str, Any], only: Iterable[str] | None = None) -> list[Any]:
    """The canonical form of a module's top-level definitions (`only`: those names, each of
    which must exist): constants by value from `namespace`, the rest by syntax tree."""
    wanted = set(only) if only is not None else None
    found: set[str] = set()
    form: list[Any] = []
    for node in _without_docstring(ast.parse(source).body):
        if isinstance(node, (ast.Import, ast.ImportFrom)) or _is_type_checking_block(node):
            continue
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for name in (n for t in targets for n in _names(t)):
                if wanted is None or name in wanted:
                    found.add(name)
                    form.append(["value", name, canonical_value(namespace[name])])
            continue
        name = getattr(node, "name", None)
        if wanted is None or name in wanted:
            found.add(name)
            form.append(["definition", canonical_tree(node)])
    if wanted is not None and wanted - found:
        raise LookupError(f"not defined at the top level: {', '.join(sorted(wanted - found))}")
    return form


def digest(form: Any) -> str:
    """16 hex digits of SHA-256 over the canonical JSON of `form`."""
    return hashlib.sha256(json.dumps(form, sort_keys=True).encode()).hexdigest()[:16]


def module_digest(module_name: str, only: Iterable[str] | None = None) -> str:
    module = importlib.import_module(module_name)
    source = Path(module.__file__).read_text(encoding="utf-8")
    return digest(module_form(source, vars(module), only))


def _flop_counts() -> Any:
    """The FLOP count's behaviour: every layer kind's forward and backward operations per image,
    summed per kind, of the networks the profiles start from (official and smoke)."""
    from aiperf.flops import count_flops
    from aiperf.profiles import PROFILES
    from aiperf.resnet import resnet50

    return {name: count_flops(resnet50(input_size=p.input_size, channels=p.channels, classes=p.num_classes,
                                       width=p.width)).to_dict()
            for name, p in PROFILES.items()}


# What the rules are, part by part (the failure names the parts that changed).
PARTS: dict[str, Callable[[], str]] = {
    "profiles": lambda: module_digest("aiperf.profiles"),
    "peaks": lambda: module_digest("aiperf.peaks"),
    "scoring": lambda: module_digest("aiperf.scoring"),
    "precisions": lambda: module_digest("aiperf.precision"),
    "audit": lambda: module_digest("aiperf.audit"),
    "official workload": lambda: module_digest("aiperf.official"),
    "flop count": lambda: digest(_flop_counts()),
    "lineage": lambda: module_digest("aiperf.lineage", ("LineageError", "operations_of", "widen_amounts", "_step",
                                                       "check_descent")),
    "limits": lambda: module_digest("aiperf.limits", ("CLOCK_SLACK_S", "MAX_OPS_PER_S_PER_ACCELERATOR")),
    # the master's rules read from a run's records: its scoring rules and peaks, the audit
    # and throughput rules of validity, officiality, the bound on a worker's reports, the
    # initialisation seed and the checkpoint's stamped digest
    "master rules": lambda: digest([
        module_form(*_source("master.core.run_rules"), ("rules_of", "accelerator_peaks", "datasheet_peaks",
                                                        "DatasheetPeaks", "_check_of", "_worker_checks",
                                                        "_cpu_check", "checked_rates", "checked_cpu_rates",
                                                        "with_checked_peaks", "worker_peak", "worker_ceiling",
                                                        "peak_verdict", "accelerator_bounds", "peak_bounds",
                                                        "cpu_bound", "check_graph_fits")),
        module_form(*_source("master.core.audits"), ("with_audit_rule", "with_throughput_rule")),
        module_form(*_source("master.core.officiality"), ("run_config", "unofficial_reasons",
                                                          "hardware_problems")),
        module_form(*_source("master.core.submission_rules"), ("batch_sizes", "check_submission", "_from_a_twin")),
        module_form(*_source("master.core.devices"), ("DeviceOwners",)),
        module_form(*_source("master.core.node_audits"), ("keyed_number", "draw", "plan", "_name", "inventory_check",
                                                          "node_audit_reasons")),
        module_form(*_source("master.core.budget"), ("ceiling_of", "WorkerBudget")),
        module_form(*_source("master.core.weight_lineage"), ("init_seed", "window_end", "check_checkpoint")),
    ]),
}


def _source(module_name: str) -> tuple[str, Mapping[str, Any]]:
    module = importlib.import_module(module_name)
    return Path(module.__file__).read_text(encoding="utf-8"), vars(module)


def rules_digests() -> dict[str, str]:
    """The digest of every part of the rules."""
    return {part: compute() for part, compute in PARTS.items()}
