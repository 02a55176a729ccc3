"""Costs timed by the serving engine itself (`cost.timed_by: vllm`), through `specfleet run`: real
vLLM decodes the held-out prompts at every constant depth and profiled batch size, its clock
becomes the cost table the depth choice reads, the tuned config says which engine timed it, and
the serving check then judges that choice on a fresh engine. The tiny target's timings on a
shared 2-core machine are noise: what is held is where each number came from."""

from __future__ import annotations

import pytest
import yaml
from support.vllm import vllm_python
from test_end_to_end import specfleet
from test_serve_check_run import _spec

from db.store import Store
from pipeline.core.contracts import Profiled, Selected, Served
from workers.serving.vllm_engine import vllm_version

pytestmark = [pytest.mark.vllm, pytest.mark.ray, pytest.mark.slow, pytest.mark.long]


def _release() -> str:
    return f"vllm {vllm_version(vllm_python())}"


@pytest.fixture(scope="module")
def engine_timed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("engine-timed")
    spec = _spec(vllm_python())
    spec["name"] = "engine-timed"
    spec["drafters"] = spec["drafters"][:1]  # the pre-norm drafter vLLM loads
    spec["cost"] = {"batch_sizes": [1, 4], "timed_by": "vllm"}  # no cost ratio: the engine's clock decides
    spec["resources"]["engine_cost"] = {"num_cpus": 2}
    (tmp / "spec.yaml").write_text(yaml.safe_dump(spec))
    done = specfleet("run", str(tmp / "spec.yaml"), cwd=tmp)
    assert done.returncode == 0, done.stderr[-3000:]
    with Store(f"sqlite:///{tmp / '.specfleet' / 'specfleet.db'}") as store:
        jobs = {j["kind"]: j for j in store.jobs()}
        results = {kind: store.finished_result(j["job_hash"]) for kind, j in jobs.items()}
        (tuned,) = store.best()
    return tmp, jobs, results, tuned


def test_the_engines_clock_is_the_cost_table_the_choice_used(engine_timed):
    _, jobs, results, tuned = engine_timed
    assert "profile_cost" not in jobs and jobs["engine_cost"]["status"] == "done"
    cost = Profiled.model_validate(results["engine_cost"]).cost
    assert cost.timed_by == _release() and cost.hardware == "cpu 2t x1 float32"
    assert cost.batch_sizes == (1, 4) and len(cost.pass_ms) == 3
    assert [len(v) for v in cost.verify_ms_by_batch] == [3, 3] and cost.draft_ms_by_batch == (0.0, 0.0)
    assert all(ms > 0 for ms in cost.pass_ms)
    selected = Selected.model_validate(results["select_depth"])
    assert selected.timed_by == _release() and selected.choice.cost_model == "timed"
    assert selected.pass_cost == pytest.approx([ms / cost.pass_ms[0] for ms in cost.pass_ms])
    assert (tuned["timed_by"], tuned["cost_job_hash"]) == (_release(), jobs["engine_cost"]["job_hash"])


def test_the_serving_check_judges_the_engine_timed_choice(engine_timed):
    _, _, results, tuned = engine_timed
    check = Served.model_validate(results["serve_check"]).serving_check
    assert check.cost_hardware == check.hardware == "cpu 2t x1 float32"
    assert all(p.greedy_equal for p in (*check.sweep, *check.chosen))
    assert {p.batch_size for p in check.chosen} == {1, 4}
    assert next(p for p in check.chosen if p.batch_size == 1).depth == tuned["depth"]


def test_the_report_says_which_clock_timed_the_choice(engine_timed, tmp_path):
    run = engine_timed[0]
    done = specfleet("report", "engine-timed", "--out", str(tmp_path), cwd=run)
    assert done.returncode == 0, done.stderr
    tables = (tmp_path / "tables.md").read_text()  # --out is the report's own folder
    (tuned,) = [line for line in tables.splitlines() if line.startswith("| t0/pre | cpu 2t x1 float32 |")]
    assert f"| {_release()} |" in tuned
    assert "t0_pre_speedup.png" in tables  # predicted by depth from the engine-timed cost table
    assert "Served by the serving engine" in tables
