"""A prompts file through `specfleet run`, to curves and depths per category. (Every shape and format
is read in test_prompts_file.py; one goes the whole way here: each `specfleet run` costs a cluster.)"""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from mlflow.tracking import MlflowClient
from test_end_to_end import specfleet

from db.store import Store
from pipeline.core.labels import LABEL_MAX
from pipeline.run.record import key_part, metric_key
from pipeline.run.tracking import fit
from tests.pipeline.core.test_conversations import write_json, write_jsonl
from tests.workers.data.test_prompts import TEMPLATE

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.long]  # tests/README.md: markers

TOPICS = {"code": "Write a function that {}.", "math": "What is {} times seven?", "chat": "Tell me about {}."}
WORDS = ["lists", "files", "sockets", "dates", "paths", "threads", "queues", "strings"]
# the names the file gives them: one as long as a stored label may be, not ASCII, with spaces
# (longer than MLflow keeps a metric named for it: the key is cut to fit, pipeline/run/tracking.py)
NAMES = {"code": "code", "math": "math", "chat": "chat about " + "é" * (LABEL_MAX - 11)}


def sharegpt(i, category):
    return {
        "conversations": [
            {"from": "human", "value": TOPICS[category].format(WORDS[i % 8])},
            {"from": "gpt", "value": "def f(x):\n    return x"},
        ],
        "category": NAMES[category],
    }


def openai(i, category):
    return {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": TOPICS[category].format(WORDS[i % 8])},
        ],
        "category": category,
    }


def plain(i, category):
    return {"prompt": TOPICS[category].format(WORDS[i % 8]), "category": category}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, tiny_target):
    """A target folder whose tokenizer has its own chat template, the training file and a ShareGPT
    prompts file."""
    tmp = tmp_path_factory.mktemp("prompts")
    model, tokenizer, _ = tiny_target
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = TEMPLATE
    model.save_pretrained(tmp / "target", safe_serialization=True)
    tok.save_pretrained(tmp / "target")
    write_jsonl(tmp / "sharegpt.jsonl", [sharegpt(i, c) for i in range(4) for c in TOPICS])
    write_json(
        tmp / "train.json",
        [
            openai(i, "code")
            | {
                "messages": openai(i, "code")["messages"]
                + [{"role": "assistant", "content": "def f(x):\n    return x"}]
            }
            for i in range(40)
        ],
    )
    return tmp


def _spec(prompts: str, **training) -> dict:
    return {
        "name": f"theirs-{prompts.split('.')[0]}",
        "targets": [{"name": "t", "hf": "target", "dtype": "float32"}],
        "drafters": [
            {
                "name": "d",
                "kind": "eagle3",
                "train": {"ttt_depth": 2, "steps": 6, "batch_size": 4, "seq_len": 96, "corpus": "regenerated"},
            }
        ],
        "training_data": {"prompts": "train.json", "tokens": 1500, "max_new_tokens": 12, **training},
        "evaluation": {
            "max_depth": 2,
            "num_prompts": 9,
            "prompt_len": 40,
            "continuation_len": 4,
            "prompts": prompts,
            "tree_topk": 0,
        },
        "cost": {"context_len": 8, "warmup": 0, "repeats": 2, "cost_ratio": 0.01, "tree_budget": 0},
    }


def test_a_prompts_file_runs_to_curves_and_depths_per_category(workdir):
    (workdir / "s.yaml").write_text(yaml.safe_dump(_spec("sharegpt.jsonl")))
    done = specfleet("run", "s.yaml", cwd=workdir)
    assert done.returncode == 0, done.stderr[-2000:]
    shown = specfleet("best", "--by-category", "--json", cwd=workdir)
    (row,) = json.loads(shown.stdout)
    assert [(c["category"], c["prompts"]) for c in row["categories"]] == [
        (NAMES[c], 3) for c in ("chat", "code", "math")
    ]
    table = specfleet("best", "--by-category", cwd=workdir).stdout
    assert "all prompts" in table and all(c[:10] in table for c in NAMES.values())  # a long one wraps, cut
    with Store(f"sqlite:///{workdir / '.specfleet' / 'specfleet.db'}") as store:
        curve = row["curve_job_hash"]
        mine = [r for r in store.curves(category=None) if r["job_hash"] == curve]
        assert sorted({r["category"] for r in mine}) == ["", *sorted(NAMES.values())] and len(mine) == 8
        run_id = next(j["mlflow_run_id"] for j in store.jobs() if j["job_hash"] == curve)
        regenerated = [j for j in store.jobs() if j["kind"] == "regenerate" and j["status"] == "done"]
    client = MlflowClient(f"sqlite:///{workdir / '.specfleet' / 'mlflow.db'}")
    keys = set(client.get_run(run_id).data.metrics)
    by_category = {fit(f"{metric_key('accept_len', 'default', 0.0)}/{key_part(c)}") for c in NAMES.values()}
    assert "accept_len/default/T0/code" in by_category and len(max(by_category, key=len)) == 250
    assert by_category <= keys, sorted(keys)
    assert len(regenerated) == 1  # the training file's text is made once and reused by every run
    # the report shows the depth per category and each category's curve
    assert specfleet("report", "theirs-sharegpt", "--out", "page", cwd=workdir).returncode == 0
    tables = (workdir / "page" / "tables.md").read_text()
    assert "Depth per prompt category" in tables and all(f"|  | {c} | 3 |" in tables for c in NAMES.values())
    assert (workdir / "page" / "t_d_categories.png").stat().st_size > 10_000


def test_written_answers_train_and_a_broken_file_stops_before_anything_starts(workdir):
    (workdir / "w.yaml").write_text(yaml.safe_dump(_spec("sharegpt.jsonl", answers="as_written") | {"name": "written"}))
    done = specfleet("run", "w.yaml", cwd=workdir)
    assert done.returncode == 0, done.stderr[-2000:]
    with Store(f"sqlite:///{workdir / '.specfleet' / 'specfleet.db'}") as store:
        texts = [
            store.finished_result(j["job_hash"])["metrics"]
            for j in store.jobs()
            if j["kind"] == "regenerate" and j["status"] == "done"
        ]
        experiments = len(store.experiments())
    written = [m for m in texts if "skipped_too_long" in m]  # as written: nothing generated
    assert len(texts) == 2 and len(written) == 1 and "generate_seconds" not in written[0]
    assert written[0]["tokens"] >= 1500 and 0 < written[0]["answer_tokens"] < written[0]["tokens"]
    broken = workdir / "broken.jsonl"
    broken.write_text(json.dumps(plain(0, "code")) + "\n" + '{"prompt": "a", "category": ["x"]}\n')
    (workdir / "b.yaml").write_text(yaml.safe_dump(_spec("broken.jsonl") | {"name": "broken"}))
    bad = specfleet("run", "b.yaml", cwd=workdir)
    assert bad.returncode == 2
    assert f"prompts file {broken}, line 2: category must be a non-empty string, got ['x']" in bad.stderr
    with Store(f"sqlite:///{workdir / '.specfleet' / 'specfleet.db'}") as store:
        assert len(store.experiments()) == experiments  # nothing written
