"""Hostile production-metrics inputs: files, URLs and CLI values that must be refused with one line
naming the input, never a traceback, never a hang, and with nothing stored; plus fuzzing."""

from __future__ import annotations

import http.server
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.paths import DATA

from db.store import Store
from pipeline.autotune.prod_metrics import MAX_BYTES, parse_counters, production_curve, read_source
from pipeline.errors import UserError

GOOD = (DATA / "vllm_metrics" / "dflash_k7_window.prom").read_text()
HEAD = (
    'vllm:spec_decode_num_drafts_total{model_name="m"} 10\n'
    'vllm:spec_decode_num_draft_tokens_total{model_name="m"} 20\n'
    'vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 9\n'
)


def per_pos(*values, label=None) -> str:
    return "".join(
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="m",position="{label or i}"}} {v}\n'
        for i, v in enumerate(values)
    )


TEXTS = [  # (name, exposition text, what the error says)
    ("empty", "", "no vllm:spec_decode_num_drafts_total counter"),
    ("html page", "<html><body>Not Found</body></html>", "not a Prometheus text exposition"),
    ("json", '{"num_drafts": 10}', "not a Prometheus text exposition"),
    ("nan counter", HEAD.replace(" 10\n", " NaN\n", 1) + per_pos(6, 3), "is nan"),
    ("inf counter", HEAD.replace(" 20\n", " +Inf\n", 1) + per_pos(6, 3), "is inf"),
    ("negative counter", HEAD.replace(" 9\n", " -9\n", 1) + per_pos(6, 3), "is -9"),
    ("negative per position", HEAD + per_pos(12, -3), "is -3"),
    ("position not a number", HEAD + per_pos(6, label="first"), "position label 'first'"),
    ("position huge", HEAD + per_pos(6, label="99999999999999"), "position label '99999999999999'"),
    ("position negative", HEAD + per_pos(6, label="-1"), "position label '-1'"),
    (
        "no position label",
        HEAD + 'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m"} 6\n',
        "position label None",
    ),
    ("no per-position counters", HEAD, "no vllm:spec_decode_num_accepted_tokens_per_pos_total counters"),
    ("position gap", HEAD + per_pos(6, 3).replace('position="1"', 'position="2"'), "missing for positions [1]"),
    ("per-position sum off", HEAD + per_pos(3, 1), "add up to 4"),
    (
        "two models",
        HEAD + per_pos(6, 3) + HEAD.replace('"m"', '"n"') + per_pos(6, 3).replace('"m"', '"n"'),
        "several models",
    ),
    (
        "no drafts",
        HEAD.replace(" 10\n", " 0\n", 1).replace(" 20\n", " 0\n", 1).replace(" 9\n", " 0\n", 1) + per_pos(0, 0),
        "no drafts were verified",
    ),
    ("survival above one", HEAD.replace(" 9\n", " 25\n", 1) + per_pos(20, 5), "inconsistent"),
    ("rising survival", HEAD + per_pos(3, 6), "inconsistent"),
    ("short drafts", HEAD.replace(" 20\n", " 12\n", 1) + per_pos(6, 3), "per-batch-size depth"),
    ("trimmed positions", HEAD.replace(" 20\n", " 30\n", 1) + per_pos(6, 3), "positions [2] are missing"),
    ("unclosed labels", 'vllm:spec_decode_num_drafts_total{model_name="m" 1\n', "not a Prometheus text exposition"),
    ("duplicate type lines", "# TYPE x counter\n# TYPE x gauge\nx 1\n", "no vllm:spec_decode_num_drafts_total"),
]


@pytest.mark.parametrize("name,text,message", TEXTS, ids=[t[0] for t in TEXTS])
def test_a_hostile_exposition_is_refused_in_one_line(name, text, message):
    with pytest.raises(UserError) as caught:
        production_curve(parse_counters(text), temperature=0.0)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_files_that_are_not_metrics_pages(tmp_path):
    (tmp_path / "latin.prom").write_bytes(b'vllm:spec_decode_num_drafts_total{model_name="caf\xe9"} 1\n')
    with pytest.raises(UserError, match=r"latin.prom is not UTF-8 text"):
        read_source(str(tmp_path / "latin.prom"))
    with pytest.raises(UserError, match="no such file"):
        read_source(str(tmp_path))  # a folder
    with pytest.raises(UserError, match="no such file"):
        read_source(str(tmp_path / "missing.prom"))
    big = tmp_path / "big.prom"
    with open(big, "wb") as f:
        f.truncate(MAX_BYTES + 1)  # sparse: the size is checked before anything is read
    with pytest.raises(UserError, match=f"larger than {MAX_BYTES} bytes"):
        read_source(str(big))


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802 (the stdlib's name)
        if self.path == "/slow":  # a server that trickles its answer
            self.send_response(200)
            self.end_headers()
            for _ in range(40):
                self.wfile.write(b"# x\n")
                self.wfile.flush()
                time.sleep(0.1)
        elif self.path == "/huge":
            self.send_response(200)
            self.end_headers()
            block = b"#" * (1 << 20)
            try:
                for _ in range(MAX_BYTES // len(block) + 2):
                    self.wfile.write(block)
            except OSError:
                pass  # the client stopped reading, as it should
        elif self.path == "/good":
            self.send_response(200)
            self.end_headers()
            self.wfile.write(GOOD.encode())
        else:
            self.send_error(404)


@pytest.fixture(scope="module")
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_urls_are_bounded_in_size_and_time(server):
    assert read_source(f"{server}/good") == GOOD
    t0 = time.monotonic()
    with pytest.raises(UserError, match="did not answer in full within 1 s"):
        read_source(f"{server}/slow", timeout_s=1.0)
    assert time.monotonic() - t0 < 5
    with pytest.raises(UserError, match=f"answered more than {MAX_BYTES} bytes"):
        read_source(f"{server}/huge")
    for url, message in (
        (f"{server}/missing", "Not Found"),
        ("http://127.0.0.1:1/metrics", "refused"),
        ("http://[::1/metrics", "cannot read"),
        ("http://exa mple.com/metrics", "cannot read"),
        ("https://127.0.0.1:1/metrics", "refused"),
    ):
        with pytest.raises(UserError, match=message) as caught:
            read_source(url, timeout_s=5)
        assert "\n" not in str(caught.value)


def _autotune(tmp_path: Path, metrics: Path, *extra: str) -> subprocess.CompletedProcess:
    """`specfleet autotune --engine vllm --from-metrics METRICS` for an EAGLE-3 drafter folder in
    `tmp_path` at cost ratio 0.1, then `extra` (a flag given again there wins: the last one counts)."""
    drafter = tmp_path / "drafter"
    drafter.mkdir(exist_ok=True)
    (drafter / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"]}')
    command = ["autotune", "--engine", "vllm", "--from-metrics", str(metrics), "--drafter-path", str(drafter)]
    return subprocess.run(
        [
            str(Path(sys.executable).with_name("specfleet")),
            *command,
            "--method",
            "eagle3",
            "--cost-ratio",
            "0.1",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


CLI = [  # (extra arguments, what stderr says)
    (["--temperature", "-3"], "--temperature: -3 is outside [0, 2]"),
    (["--temperature", "nan"], "--temperature: nan is outside [0, 2]"),
    (["--cost-ratio", "0"], "--cost-ratio: 0 is outside (0, 1000]"),
    (["--cost-ratio", "inf"], "--cost-ratio: inf is outside (0, 1000]"),
]


@pytest.mark.parametrize("extra,message", CLI)
def test_bad_cli_values_are_refused_before_anything_is_stored(tmp_path, extra, message):
    db = f"sqlite:///{tmp_path / 'db.sqlite'}"
    done = _autotune(tmp_path, DATA / "vllm_metrics" / "dflash_k7_window.prom", *extra, "--db", db)
    assert done.returncode != 0 and message in done.stderr and "Traceback" not in done.stderr, done.stderr
    if (tmp_path / "db.sqlite").exists():
        with Store(db) as store:
            assert store.best(history=True) == []


LONG = "x" * 300
LABELS = [  # (extra arguments, the page's model_name label, what stderr says): labels refused where they enter
    (["--hardware", LONG], None, "--hardware: 'xxx"),
    (["--hardware", ""], None, "--hardware: '' is empty"),
    (["--hardware", "H100\nA100"], None, "--hardware: 'H100\\nA100' holds the non-printing character"),
    (["--model", LONG], None, "--model: 'xxx"),
    (["--drafter", LONG], None, "--drafter: 'xxx"),
    (["--drafter", " "], None, "--drafter: ' ' is empty"),
    (["--drafter-path", "org/" + LONG], None, "--drafter-path: 'xxx"),
    (["--engine-version", "0." * 200], None, "is not a release number"),
    ([], LONG, "the model_name label 'xxx"),
    ([], "a\\nb", "the model_name label 'a\\nb' holds the non-printing"),  # a newline, escaped as on the page
]


@pytest.mark.slow
@pytest.mark.parametrize("extra,change,message", LABELS, ids=[f"label{i}" for i in range(len(LABELS))])
def test_overlong_and_odd_labels_are_one_line_and_store_nothing(tmp_path, db_url, extra, change, message):
    """Each label that would reach the database (hardware, target, drafter) or the config (engine
    release), from a flag or from the metrics page: one `error:` line naming it, exit 1, nothing stored."""
    metrics = tmp_path / "metrics.prom"
    text = GOOD
    if change is not None:
        text = re.sub(r'model_name="[^"]*"', lambda _: f'model_name="{change}"', text)
        assert text != GOOD
    metrics.write_text(text)
    done = _autotune(tmp_path, metrics, *extra, "--db", db_url, "--workdir", str(tmp_path / "work"))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert message in lines[0] and len(lines[0]) < 400, lines[0]
    if db_url.startswith("sqlite"):
        assert not Path(db_url.removeprefix("sqlite:///")).exists()  # refused before the store was opened
    with Store(db_url) as store:
        assert store.best(history=True) == []


def test_the_corpus_is_large_enough():
    assert len(TEXTS) + 5 + 8 + len(CLI) + len(LABELS) >= 40  # expositions, files, URLs, CLI values, labels


# -- fuzzing -------------------------------------------------------------------------------------

NAMES = st.sampled_from(
    [
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total",
        "other_total",
    ]
)
LABEL = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
NUMBER = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr), st.integers().map(str), st.text(max_size=6)
)
LINE = st.builds(lambda n, m, p, v: f'{n}{{model_name="{m}",position="{p}"}} {v}', NAMES, LABEL, LABEL, NUMBER)
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _outcome(text: str) -> None:
    try:
        production_curve(parse_counters(text), temperature=0.0)
    except UserError as exc:
        assert "\n" not in str(exc)


@FUZZ
@given(st.lists(LINE, max_size=12))
def test_fuzzed_expositions(lines):
    _outcome("\n".join(lines) + "\n")


@FUZZ
@given(st.text(max_size=300))
def test_fuzzed_text(text):
    _outcome(text)
