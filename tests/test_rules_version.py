"""The rules version (aiperf/ruleset.py) changes whenever the rules do.

RECORDED holds the version and the digest of every part of the rules
(tests/support/rules_digest.py: profiles, datasheet peaks, scoring and validity, FLOP
count, ...) as they were when that version was set. A change of any part with
the same version fails here: runs scored by the new rules would read as scored
by the old ones.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import sys
import types
from pathlib import Path

import pytest

from aiperf.ruleset import RULES_VERSION
from tests.support import rules_digest
from tests.support.rules_digest import canonical_tree, digest, module_form, rules_digests

RECORDED_VERSION = "aiperf-rules 1.0"
RECORDED_DIGESTS = {
    "profiles": "d864d8dbbb615f73",
    "peaks": "d81b7a684216a635",
    "scoring": "beb6bb4602e65b4a",
    "precisions": "84a3fac877e01c31",
    "audit": "949fca44fba5e2af",
    "official workload": "166a6e8fe14614a8",
    "flop count": "db2d4e91190f5091",
    "lineage": "7ae4538a95798a2d",
    "limits": "2e1aaaa6b9110740",
    "master rules": "6a72e83f12f7462b",
}
VERSION_FORMAT = re.compile(r"aiperf-rules (\d+)\.(\d+)")


def _version(text: str) -> tuple[int, int]:
    m = VERSION_FORMAT.fullmatch(text)
    assert m, f"a rules version reads 'aiperf-rules MAJOR.MINOR', got {text!r}"
    return int(m[1]), int(m[2])


def test_the_rules_version_changes_whenever_the_rules_do() -> None:
    try:
        now = rules_digests()
    except LookupError as exc:  # a definition named in tests/support/rules_digest.py PARTS is gone
        pytest.fail(f"{exc}: update PARTS in tests/support/rules_digest.py to where that rule lives now")
    table = "{\n" + "".join(f"    {k!r}: {v!r},\n" for k, v in now.items()) + "}"
    changed = sorted(p for p in now.keys() | RECORDED_DIGESTS.keys() if now.get(p) != RECORDED_DIGESTS.get(p))
    if RULES_VERSION == RECORDED_VERSION:
        assert not changed, (
            f"the rules changed ({', '.join(changed)}) but aiperf/ruleset.py still says {RULES_VERSION!r}. "
            f"Bump RULES_VERSION there (a run keeps the version it started under, so old and new runs stay "
            f"apart), then in tests/test_rules_version.py set RECORDED_VERSION to the new version and "
            f"RECORDED_DIGESTS to {table}")
    else:
        assert _version(RULES_VERSION) > _version(RECORDED_VERSION), (
            f"RULES_VERSION {RULES_VERSION!r} must be above {RECORDED_VERSION!r}: versions only go up")
        pytest.fail(f"RULES_VERSION is now {RULES_VERSION!r}: in tests/test_rules_version.py set RECORDED_VERSION "
                    f"to it and RECORDED_DIGESTS to {table}")


def test_the_version_is_well_formed_and_defined_once() -> None:
    _version(RULES_VERSION)
    root = Path(__file__).resolve().parents[1]
    defining = [p.relative_to(root).as_posix() for package in ("aiperf", "master", "aiperf_cli", "worker")
                for p in sorted((root / package).rglob("*.py"))
                if re.search(r"^RULES_VERSION\s*[:=]", p.read_text(encoding="utf-8"), re.M)]
    assert defining == ["aiperf/ruleset.py"]
    for doc in ("README.md", "docs/spec.md"):  # the docs name the version in force
        assert RULES_VERSION in (root / doc).read_text(encoding="utf-8"), f"{doc} does not name {RULES_VERSION}"


# ----------------------------------------------------------------- the digest can fail, and only then

SCORING = Path(rules_digest.__file__).resolve().parents[2] / "aiperf" / "scoring.py"


def _load(source: str, name: str) -> dict:
    """`source` run as a module of its own (registered, so its dataclasses resolve), its namespace."""
    module = types.ModuleType(name)
    sys.modules[name] = module
    try:
        exec(compile(source, name, "exec"), module.__dict__)
    finally:
        del sys.modules[name]
    return module.__dict__


def _scoring_digest(source: str) -> str:
    return digest(module_form(source, _load(source, "aiperf_scoring_variant")))


def test_comments_docstrings_and_formatting_do_not_change_the_digest() -> None:
    source = SCORING.read_text(encoding="utf-8")
    base = _scoring_digest(source)
    reworded = source.replace('"""FLOPS(t) = F(t) / (t - t0); 0 when t <= t0."""', '"""Operations per second."""')
    assert reworded != source
    commented = "# a comment at the top\n" + reworded.replace("\n\n\ndef ", "\n\n\n# why it is so\ndef ")
    reformatted = ast.unparse(ast.parse(source))  # every line re-wrapped, every comment gone
    for variant in (commented, reformatted):
        assert _scoring_digest(variant) == base


@pytest.mark.parametrize("old, new", [
    ("VALID_FLOPS_EXPONENT = 5", "VALID_FLOPS_EXPONENT = 6"),                      # a constant of a formula
    ("ERROR_FLOOR = 1e-6", "ERROR_FLOOR = 1e-07"),                                 # its value, not its spelling
    ("err = _open(f.error <= rules.max_error", "err = _open(f.error < rules.max_error"),  # a validity rule
    ("return flops * (accuracy / target_accuracy)", "return flops * (accuracy / target_accuracy / 2)"),
])
def test_a_change_of_a_rule_changes_the_digest(old: str, new: str) -> None:
    source = SCORING.read_text(encoding="utf-8")
    assert source.count(old) == 1, old
    assert _scoring_digest(source.replace(old, new)) != _scoring_digest(source)


def test_the_same_value_spelled_otherwise_is_the_same_rule() -> None:
    source = SCORING.read_text(encoding="utf-8")
    assert _scoring_digest(source.replace("ERROR_FLOOR = 1e-6", "ERROR_FLOOR = 0.000001")) == _scoring_digest(source)


def test_a_profile_a_datasheet_figure_or_a_flop_rule_changes_its_part(monkeypatch) -> None:
    import aiperf.peaks as peaks
    import aiperf.profiles as profiles
    from aiperf.layers import KINDS

    base = rules_digests()
    changed = dict(profiles.PROFILES, official=dataclasses.replace(profiles.OFFICIAL, max_error=0.35))
    monkeypatch.setattr(profiles, "PROFILES", changed)
    h100_sxm = peaks.TABLE[2]
    assert h100_sxm.name == "H100 SXM"
    table = peaks.TABLE[:2] + (dataclasses.replace(h100_sxm, fp16=1979e12),) + peaks.TABLE[3:]
    monkeypatch.setattr(peaks, "TABLE", table)
    relu = KINDS["relu"]
    monkeypatch.setattr(type(relu), "flops", lambda self, layer, x, out, reads_image: (0, 0))
    now = rules_digests()
    assert {p for p in now if now[p] != base[p]} == {"profiles", "peaks", "flop count"}


def test_a_definition_the_digest_names_must_exist() -> None:
    with pytest.raises(LookupError, match="not defined at the top level: gone"):
        module_form("def kept():\n    return 1\n", {}, only=("kept", "gone"))


def test_the_tree_form_keeps_code_and_drops_only_docstrings() -> None:
    def form(src: str) -> object:
        return canonical_tree(ast.parse(src))

    assert form('def f():\n    """doc"""\n    return 1\n') == form("def f():\n    return 1\n")
    assert form("def f():\n    return 1\n") != form("def f():\n    return 2\n")
    assert form('def f():\n    return "doc"\n') != form("def f():\n    return 1\n")  # a string that is code


# ----------------------------------------------------------------- recorded with each run, kept by it


def _recorded_runs(db_url: str) -> tuple[int, int]:
    """Two finished runs written as earlier masters wrote them: one under an older rules
    version, one that is then taken back to before versions were recorded (0008) and forward."""
    from master.store.records import NewRun
    from master.store.sql.sql_store import SqlStore
    from tests.support.schema_round_trip import down_and_up

    s = SqlStore(db_url)
    try:
        older = s.create_run(NewRun("smoke", 1, 600.0, "fp32", {"limits": {}}, {}, rules_version="aiperf-rules 0.9"),
                             100.0)
        s.finish_run(older.id, 200.0, "aborted", "test")
        before = s.create_run(NewRun("smoke", 2, 600.0, "fp32", {"limits": {}}, {}, rules_version=RULES_VERSION),
                              300.0)
        s.finish_run(before.id, 400.0, "aborted", "test")
        assert s.get_run(older.id).rules_version == "aiperf-rules 0.9"
    finally:
        s.close()
    down_and_up(db_url, "0008")
    return older.id, before.id


def test_migration_0009_round_trips_and_older_runs_read_not_recorded(db_url: str) -> None:
    from master.store.sql.sql_store import SqlStore

    older, before = _recorded_runs(db_url)
    s = SqlStore(db_url)
    try:
        assert s.get_run(older).rules_version == ""  # the column went with the downgrade: not recorded
        assert s.get_run(before).rules_version == ""
    finally:
        s.close()


def test_a_run_shows_the_rules_it_was_recorded_with_and_a_new_run_todays(master_server, tmp_path, capsys,
                                                                         monkeypatch) -> None:
    from aiperf_cli.main import main
    from master.store.records import NewRun
    from master.store.sql.sql_store import SqlStore

    url = f"sqlite:///{tmp_path / 'old.db'}"
    s = SqlStore(url)
    try:
        old = s.create_run(NewRun("smoke", 1, 600.0, "fp32", {"limits": {}}, {}, rules_version="aiperf-rules 0.9"),
                           100.0)
        s.finish_run(old.id, 200.0, "aborted", "test")
        unversioned = s.create_run(NewRun("smoke", 2, 600.0, "fp32", {"limits": {}}, {}), 300.0)  # recorded none
        s.finish_run(unversioned.id, 400.0, "aborted", "test")
    finally:
        s.close()
    h = master_server(url)
    monkeypatch.setenv("AIPERF_MASTER", h.address)
    monkeypatch.setenv("AIPERF_ADMIN_TOKEN", h.admin_token)
    monkeypatch.setenv("COLUMNS", "200")

    def cli(*argv: str) -> str:
        rc = main(list(argv))
        out, err = capsys.readouterr()
        assert rc == 0, err
        return out

    import json

    board = json.loads(cli("scoreboard", "--run", str(old.id), "--json"))
    assert board["rules_version"] == "aiperf-rules 0.9" and board["scoring_rules_version"] == RULES_VERSION
    assert f"aiperf-rules 0.9; this master scores by {RULES_VERSION}" in cli("scoreboard", "--run", str(old.id))
    assert json.loads(cli("scoreboard", "--run", str(unversioned.id), "--json"))["rules_version"] is None
    assert "not recorded (the run predates rules versions)" in cli("scoreboard", "--run", str(unversioned.id))
    new = json.loads(cli("start", "--duration", "5m", "--profile", "smoke", "--json"))
    assert new["rules_version"] == RULES_VERSION
    assert json.loads(cli("scoreboard", "--json"))["rules_version"] == RULES_VERSION
    assert json.loads(cli("export", "--run", str(old.id), "--format", "json"))["scoreboard"]["rules_version"] == \
        "aiperf-rules 0.9"
