"""Production acceptance from vLLM's Prometheus counters, and clear refusals of bad metrics."""

from __future__ import annotations

import http.server
import threading

import pytest

from pipeline.autotune.prod_metrics import parse_counters, production_curve, read_source, window
from pipeline.errors import UserError

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def exposition(drafts, draft_tokens, accepted, per_pos, model=MODEL, engines=("0",)):
    lines = []
    for name, value in (("num_drafts", drafts), ("num_draft_tokens", draft_tokens), ("num_accepted_tokens", accepted)):
        lines += [f"# HELP vllm:spec_decode_{name}_total x", f"# TYPE vllm:spec_decode_{name}_total counter"]
        lines += [
            f'vllm:spec_decode_{name}_total{{engine="{e}",model_name="{model}"}} {value / len(engines)}'
            for e in engines
        ]
    lines += [
        "# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total x",
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
    ]
    for e in engines:
        lines += [
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="{e}",model_name="{model}",'
            f'position="{i}"}} {v / len(engines)}'
            for i, v in enumerate(per_pos)
        ]
    return "\n".join(lines) + "\n"


def test_two_scrapes_give_the_window_survival():
    before = parse_counters(exposition(100, 400, 150, [70, 45, 25, 10], engines=("0", "1")))
    after = parse_counters(exposition(300, 1200, 430, [230, 120, 60, 20], engines=("0", "1")))
    assert after.model_name == MODEL and after.num_drafts == 300  # summed over engines
    w = window(before, after)
    assert (w.num_drafts, w.accepted_per_pos) == (200, (160, 75, 35, 10))
    curve = production_curve(w, temperature=0.0)
    assert curve.survival == pytest.approx((0.8, 0.375, 0.175, 0.05))
    assert curve.accept_len[-1] == pytest.approx(1 + 0.8 + 0.375 + 0.175 + 0.05)
    assert curve.cond_accept[1] == pytest.approx(0.375 / 0.8)


@pytest.mark.parametrize(
    "text,message",
    [
        ("not metrics at all {{{", "not a Prometheus"),
        (exposition(10, 40, 5, [3, 2]).replace("num_draft_tokens", "other"), "num_draft_tokens"),
        (exposition(10, 40, 5, [3, 2, 0]).replace('position="1"', 'position="7"'), "positions [1, 3, 4, 5, 6]"),
        (exposition(10, 40, 5, [3, 2]) + exposition(1, 1, 1, [1, 1], model="other"), "several models"),
        (exposition(10, 20, 12, [5, 3]), "add up to 8 but vllm:spec_decode_num_accepted_tokens_total is 12"),
        (exposition(10, 30, 8, [5, 3]), "positions [2] are missing"),
    ],
)
def test_bad_metrics_are_refused_clearly(text, message):
    with pytest.raises(UserError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_counters(text)


def test_restart_and_empty_window_are_refused():
    before = parse_counters(exposition(300, 600, 350, [230, 120]))
    after = parse_counters(exposition(50, 100, 60, [40, 20]))
    with pytest.raises(UserError, match="went backwards"):
        window(before, after)
    with pytest.raises(UserError, match="no drafts"):
        production_curve(window(before, before), temperature=0.0)
    rising = parse_counters(exposition(10, 20, 8, [3, 5]))
    with pytest.raises(UserError, match="inconsistent"):
        production_curve(rising, temperature=0.0)


def test_reads_files_and_urls_on_loopback(tmp_path):
    text = exposition(10, 20, 8, [5, 3])
    path = tmp_path / "metrics.txt"
    path.write_text(text)
    assert read_source(str(path)) == text
    with pytest.raises(UserError, match="no such file"):
        read_source(str(tmp_path / "missing.txt"))

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(text.encode())

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.handle_request, daemon=True)
    thread.start()
    try:
        assert read_source(f"http://127.0.0.1:{server.server_port}/metrics") == text
    finally:
        thread.join(timeout=5)
        server.server_close()
