"""`specfleet autotune`: the engine read as users spell it (others refused in one line); from production
metrics, a version stored once per distinct input, a dry run that stores and creates nothing, and no
database made by a call that fails."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from support.paths import DATA

from db.store import Store
from pipeline.cli import main as cli_main


def _main(monkeypatch, capsys, *argv: str) -> tuple[int, list[str]]:
    monkeypatch.setattr(sys, "argv", ["specfleet", *argv])
    with pytest.raises(SystemExit) as exited:
        cli_main.main()
    return exited.value.code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize(
    "spelling,name",
    [
        ("vLLM", "vllm"),
        ("VLLM", "vllm"),
        ("SGLang", "sglang"),
        ("TensorRT-LLM", "trtllm"),
        ("tensorrt-llm", "trtllm"),
        ("trt-llm", "trtllm"),
        ("hf", "transformers"),
    ],
)
def test_the_engine_is_read_as_users_spell_it(monkeypatch, capsys, tmp_path, spelling, name):
    # a release that is no release number stops it at the engine's own check, which names the engine
    argv = ("autotune", "--engine", spelling, "--engine-version", "v-next", "--workdir", str(tmp_path))
    code, lines = _main(monkeypatch, capsys, *argv)
    assert code == 1 and len(lines) == 1
    assert lines[0].startswith(f"error: --engine-version: {name}: 'v-next' is not a release number"), lines


def test_an_engine_of_no_name_known_is_refused_naming_the_option(monkeypatch, capsys, tmp_path):
    code, lines = _main(monkeypatch, capsys, "autotune", "--engine", "tgi", "--workdir", str(tmp_path))
    assert (code, lines) == (
        1,
        ["error: --engine: unknown engine 'tgi'; use one of vllm, sglang, trtllm, transformers"],
    )


# `autotune --from-metrics`: one stored version per distinct input, --dry-run, and no database
# made by a call that stores nothing

DFLASH = DATA / "vllm_metrics" / "dflash_k7_window.prom"  # a real k = 7 window: depth 3 at c = 0.1
TARGET = "qwen3.5-9b-allava-val-weight-test"


def _run(monkeypatch, capsys, *argv: str) -> tuple[int, str, list[str]]:
    """(exit code, stdout, stderr lines) of `specfleet ARGV` run in this process."""
    monkeypatch.setattr(sys, "argv", ["specfleet", *argv])
    try:
        cli_main.main()
        code = 0
    except SystemExit as exited:
        code = exited.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err.strip().splitlines()


def _drafter(folder: Path, config: bool = True) -> Path:
    """An EAGLE-3 drafter's folder, as the engine would load it (without config.json: of no known kind)."""
    folder.mkdir()
    if config:
        (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"]}')
    return folder


def _retune(drafter: Path, *extra: str) -> tuple[str, ...]:
    return ("autotune", "--from-metrics", str(DFLASH), "--drafter-path", str(drafter), *extra)


def _versions(db: str) -> list[tuple]:
    with Store(db) as store:
        return [(r["version"], r["active"], r["source"], r["cost_ratio"]) for r in store.best(history=True)]


def test_the_same_metrics_for_every_engine_store_one_version(monkeypatch, capsys, tmp_path, db_url):
    drafter = _drafter(tmp_path / "dflash-drafter")
    said, printed = [], []
    for engine in ("vllm", "sglang", "trtllm", "vllm"):
        code, out, err = _run(
            monkeypatch, capsys, *_retune(drafter, "--engine", engine, "--cost-ratio", "0.1", "--db", db_url)
        )
        assert code == 0 and out, err
        said.append(err[0].split(": depth")[0])
        printed.append(out)
    pairing = f"{TARGET}/dflash-drafter"
    reused = f"reused production version 1 for {pairing} (the active one, from the same inputs)"
    assert said == [f"stored production version 1 for {pairing}", reused, reused, reused]
    assert printed[0] == printed[3] and "--speculative-num-steps 3" in printed[1]
    assert _versions(db_url) == [(1, True, "production", 0.1)]
    # another cost ratio is another decision; the first one again comes after it, so it is stored anew
    for ratio, version in (("0.2", 2), ("0.1", 3)):
        code, _, err = _run(
            monkeypatch, capsys, *_retune(drafter, "--engine", "vllm", "--cost-ratio", ratio, "--db", db_url)
        )
        assert code == 0 and err[0].startswith(f"stored production version {version} for {pairing}: depth"), err
    assert _versions(db_url) == [
        (3, True, "production", 0.1),
        (2, False, "production", 0.2),
        (1, False, "production", 0.1),
    ]


def test_a_dry_run_prints_the_config_and_creates_nothing(monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("SPECFLEET_DB", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    drafter = _drafter(tmp_path / "dflash-drafter")
    for where in (("--workdir", str(tmp_path / "wd")), ("--db", f"sqlite:///{tmp_path / 'new' / 'db.sqlite'}"), ()):
        code, out, err = _run(
            monkeypatch, capsys, *_retune(drafter, "--engine", "vllm", "--cost-ratio", "0.1", "--dry-run", *where)
        )
        assert code == 0, err
        assert json.loads(shlex.split(out)[1])["num_speculative_tokens"] == 3
        assert err[0].startswith(f"dry run: production version for {TARGET}/dflash-drafter not stored: depth 3;")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["dflash-drafter"]  # no work directory, no database


def test_a_dry_run_on_a_database_reads_it_and_stores_nothing(monkeypatch, capsys, tmp_path, db_url):
    drafter = _drafter(tmp_path / "dflash-drafter")
    code, _, err = _run(
        monkeypatch, capsys, *_retune(drafter, "--engine", "vllm", "--cost-ratio", "0.1", "--db", db_url)
    )
    assert code == 0, err
    for ratio, depth in (("0.1", 3), ("0.3", 2)):  # the same inputs as version 1, and new ones: neither stored
        code, out, err = _run(
            monkeypatch,
            capsys,
            *_retune(drafter, "--engine", "vllm", "--cost-ratio", ratio, "--db", db_url, "--dry-run"),
        )
        assert code == 0 and err[0].startswith("dry run: production version for"), err
        assert json.loads(shlex.split(out)[1])["num_speculative_tokens"] == depth
    assert _versions(db_url) == [(1, True, "production", 0.1)]


def test_a_dry_run_writes_no_file_the_config_names(monkeypatch, capsys, tmp_path):
    """SGLang reads a depth per batch size from a file: a dry run prints the flags naming it, says it
    is not written, and writes nothing (the schedule comes from the offline choice's batch-size costs)."""
    from db.rows import ChoiceRows
    from pipeline.core.contracts import Profiled
    from pipeline.core.types import CostProfile

    db = f"sqlite:///{tmp_path / 'db.sqlite'}"
    cost = CostProfile(
        "gpu",
        1.0,
        4.0,
        5.2,
        batch_sizes=(1, 8, 32),
        draft_ms_by_batch=(1.0, 1.2, 2.0),
        verify_ms_by_batch=((4.0, 4.4, 4.8, 5.2), (5.0, 6.5, 8.0, 9.5), (8.0, 14.0, 20.0, 26.0)),
        pass_ms=(4.0, 6.0, 6.4, 6.8),
    )
    with Store(db) as store:
        exp = store.ensure_experiment(name="e", spec_hash="s", spec_yaml="name: e\n", code_version="v")
        for job, kind in (("cost-1", "profile_cost"), ("select-1", "select_depth")):
            store.link_job(exp, job_hash=job, kind=kind, name=job, config={})
            store.mark_running(job, mlflow_run_id=None)
        store.mark_done("cost-1", result=Profiled(cost=cost).model_dump(mode="json"))
        tuned = dict(
            experiment_id=exp,
            target=TARGET,
            drafter="dflash-drafter",
            hardware="gpu",
            condition="default",
            temperature=0.0,
            depth=3,
            accept_len=2.0,
            speedup=1.3,
            cost_ratio=0.25,
            spec_hash="s",
            code_version="v",
            mlflow_run_id="r",
            cost_job_hash="cost-1",
            cost_model="timed",
            pass_cost=cost.pass_cost,
            schedule=[[1, 8, 3], [9, 64, 1]],
        )
        store.mark_done("select-1", result={}, rows=ChoiceRows(tuned=tuned))
    drafter = _drafter(tmp_path / "dflash-drafter")
    workdir = tmp_path / "wd"
    argv = _retune(drafter, "--engine", "sglang", "--db", db, "--workdir", str(workdir), "--dry-run")
    code, out, err = _run(monkeypatch, capsys, *argv)
    assert code == 0, err
    flags = shlex.split(out)
    named = Path(flags[flags.index("--speculative-adaptive-config") + 1])
    assert named.parent == (workdir / "engine-configs").resolve()
    assert f"note: dry run: {named} is not written; run without --dry-run to write it" in err
    assert not workdir.exists()
    with Store(db) as store:
        assert [r["source"] for r in store.best(history=True)] == ["offline"]


FAILING = [  # (arguments besides the metrics and the drafter's place, the error)
    (("--cost-ratio", "0.1"), "error: --drafter-path: name the deployed drafter (its path goes into the config)"),
    (("--drafter-path", "{bare}", "--cost-ratio", "0.1"), "error: --method: cannot tell what {bare} is"),
    (("--drafter-path", "{drafter}"), f"error: --cost-ratio: no stored cost table for {TARGET}/dflash-drafter"),
]


@pytest.mark.parametrize("extra,message", FAILING, ids=["no-drafter-path", "unknown-method", "no-cost-table"])
@pytest.mark.parametrize("named", [False, True], ids=["workdir", "db"])
def test_a_failing_retune_creates_no_database(monkeypatch, capsys, tmp_path, extra, message, named):
    monkeypatch.delenv("SPECFLEET_DB", raising=False)
    monkeypatch.chdir(tmp_path)
    paths = {"drafter": str(_drafter(tmp_path / "dflash-drafter")), "bare": str(_drafter(tmp_path / "bare", False))}
    where = ("--db", f"sqlite:///{tmp_path / 'new' / 'db.sqlite'}") if named else ("--workdir", str(tmp_path / "wd"))
    argv = ("autotune", "--engine", "vllm", "--from-metrics", str(DFLASH), *(a.format(**paths) for a in extra), *where)
    code, out, err = _run(monkeypatch, capsys, *argv)
    assert (code, out, len(err)) == (1, "", 1) and err[0].startswith(message.format(**paths)), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bare", "dflash-drafter"]  # no database, no folder for one


def test_a_config_from_a_missing_database_is_refused_and_makes_none(monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("SPECFLEET_DB", raising=False)
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(monkeypatch, capsys, "autotune", "--engine", "vllm", "--target", "t", "--drafter", "d")
    assert (code, out) == (1, "")
    assert err == [
        "error: --workdir: .specfleet holds no specfleet database (specfleet.db); "
        "`specfleet run SPEC --workdir .specfleet` makes one, or name one with --db"
    ]
    assert list(tmp_path.iterdir()) == []


def test_a_dry_run_without_metrics_is_refused(monkeypatch, capsys, tmp_path):
    code, _, err = _run(monkeypatch, capsys, "autotune", "--engine", "vllm", "--dry-run", "--workdir", str(tmp_path))
    assert (code, err) == (
        1,
        ["error: --dry-run: only with --from-metrics (a config from a stored version stores nothing)"],
    )
