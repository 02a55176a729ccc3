"""No password or token from any connection-string form reaches output, logs, MLflow or the database."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO

from db.engine import mask_url
from db.secrets import mask_secrets
from db.store import Store, StoreError
from pipeline.run.tracking import flatten

SECRET = "s3cr3t-Pa55"
TOKEN = "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"  # the 34 characters after hf_
FORMS = [
    (f"postgresql+psycopg://me:{SECRET}@db.example:5432/tuning", "postgresql+psycopg://me:***@db.example:5432/tuning"),
    (
        f"postgresql://db.example/tuning?user=me&password={SECRET}&sslmode=require",
        "postgresql://db.example/tuning?user=me&password=***&sslmode=require",
    ),
    (f"host=db.example user=me password={SECRET} dbname=tuning", "host=db.example user=me password=*** dbname=tuning"),
    (f"host=db.example password='{SECRET} with space' dbname=tuning", "host=db.example password=*** dbname=tuning"),
    (f"http://admin:{SECRET}@mlflow.example:5000", "http://admin:***@mlflow.example:5000"),
    (f"https://mlflow.example/api?token={SECRET}#x", "https://mlflow.example/api?token=***#x"),
    (f"postgresql://me:p@{SECRET}@db.example/tuning", "postgresql://me:***@db.example/tuning"),  # unencoded @
    (f"HF_TOKEN={SECRET} MLFLOW_TRACKING_PASSWORD={SECRET}", "HF_TOKEN=*** MLFLOW_TRACKING_PASSWORD=***"),
    (f"Authorization: Bearer {SECRET}", "Authorization: Bearer ***"),
    (f"password: {SECRET}", "password: ***"),
    (f'{{"api_key": "{SECRET}"}}', '{"api_key": ***}'),
    (f"https://user:hf_{TOKEN}@huggingface.co/m", "https://user:***@huggingface.co/m"),
    (f"https://hf_{TOKEN}@huggingface.co/m", "https://***@huggingface.co/m"),  # the token as the user
    (f"401 for hf_{TOKEN}: invalid", "401 for ***: invalid"),
    (f"Authorization: token {SECRET}", "Authorization: token ***"),
    (f"Authorization: {SECRET}", "Authorization: ***"),
    (f"{{'Authorization': 'token {SECRET}'}}", "{'Authorization': 'token ***'}"),
    (f"X-Api-Key: {SECRET}", "X-Api-Key: ***"),
    (f"x-auth-token={SECRET}", "x-auth-token=***"),
]


@pytest.mark.parametrize("text,masked", FORMS)
def test_every_form_is_masked_and_the_rest_kept(text, masked):
    assert mask_secrets(text) == masked and SECRET not in mask_secrets(text)


@pytest.mark.parametrize(
    "text",
    [
        "sqlite:////tmp/x/specfleet.db",
        "postgresql+psycopg://me@db/tuning",
        "http://127.0.0.1:5000",
        "a tokenizer=fast run",
        "the password was wrong",
        "the Authorization header was missing",
        "workers/decoding/hf_generate.py",
    ],
)
def test_text_without_a_secret_is_unchanged(text):
    assert mask_secrets(text) == text


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://me:{SECRET}@127.0.0.1:1/x",
        f"postgresql://127.0.0.1:1/x?user=me&password={SECRET}",
        f"postgresql+psycopg:///x?host=127.0.0.1&port=1&password={SECRET}",
        f"postgresql://me:pa/{SECRET}@127.0.0.1:1/x",
    ],
)
def test_a_database_that_cannot_be_opened_names_it_without_the_password(url):
    with pytest.raises(StoreError) as caught:
        Store(url)
    assert SECRET not in str(caught.value) and "***" in str(caught.value)


@pytest.mark.parametrize(
    "name", ["MY_SERVICE_TOKEN", "OPENAI_API_KEY", "DB_PASSWORD", "GOOGLE_APPLICATION_CREDENTIALS", "BASIC_AUTH"]
)
def test_a_secret_variables_value_is_masked_wherever_it_appears(monkeypatch, name):
    monkeypatch.setenv(name, SECRET)
    assert mask_secrets(f"cloning with {SECRET} failed; retry {SECRET}") == "cloning with *** failed; retry ***"


@pytest.mark.parametrize(
    "name,value",
    [
        ("TOKENIZERS_PARALLELISM", "false-and-long"),  # a TOKEN inside a longer word
        ("PWD", "/work/experiments"),  # the shell's folder, not a password
        ("HF_TOKEN", "short"),  # under 8 characters: would garble ordinary words
    ],
)
def test_other_variables_values_are_kept(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    assert mask_secrets(f"in {value} now") == f"in {value} now"


@pytest.mark.parametrize(
    "url,shown",
    [
        (f"postgresql://me:pa/{SECRET}@db.example/tuning", "postgresql://me:***@db.example/tuning"),
        (f"postgresql://me:pa {SECRET}@db.example/tuning", "postgresql://me:***@db.example/tuning"),
        (f"postgresql://me:p@{SECRET}@db.example/tuning", "postgresql://me:***@db.example/tuning"),
        (f"host=db.example password={SECRET}", "host=db.example password=***"),  # no URL: masked as text
    ],
)
def test_a_database_url_is_shown_with_sqlalchemys_password_hiding(url, shown):
    assert mask_url(url) == shown


def test_mlflow_params_hold_no_secret():
    params = flatten({"targets": [{"hf": f"https://me:{SECRET}@hub.example/m"}], "env": {"HF_TOKEN": SECRET}})
    assert all(SECRET not in v for v in params.values())


@pytest.mark.parametrize("option", ["--db", "--mlflow"])
@pytest.mark.slow
def test_the_cli_prints_no_secret(tmp_path, option):
    url = (
        f"postgresql://me:{SECRET}@127.0.0.1:1/x?password={SECRET}"
        if option == "--db"
        else f"http://me:{SECRET}@127.0.0.1:1/?token={SECRET}"
    )
    spec = REPO / "experiments" / "quickstart.yaml"
    exe = Path(sys.executable).with_name("specfleet")
    for args in (["run", str(spec)], ["best"], ["status"]):
        if option == "--mlflow" and args[0] != "run":
            continue
        done = subprocess.run(
            [str(exe), *args, option, url, "--workdir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        )
        assert done.returncode != 0 and "***" in done.stderr, (args, done.stderr[-500:])
        assert SECRET not in done.stdout + done.stderr, (args, done.stderr[-500:])


def test_a_variable_another_thread_drops_mid_read_is_skipped(monkeypatch):
    """MLflow's telemetry removes a variable of its own while a run starts: masking, reading the
    environment at that moment, must neither fail nor lose the secrets that stay."""
    from collections.abc import Mapping

    import db.secrets as secrets

    class Dropping(Mapping):  # lists a name whose value is gone by the time it is read, as os.environ can
        data = {"HF_TOKEN": "hf_abcdefghijklmnopqrstuvwx", "_MLFLOW_TELEMETRY_SESSION_ID": None}

        def __iter__(self):
            return iter(self.data)

        def __len__(self):
            return len(self.data)

        def __getitem__(self, name):
            if self.data[name] is None:
                raise KeyError(name)
            return self.data[name]

    with monkeypatch.context() as patched:  # os.environ is the process's: restored before pytest writes to it
        patched.setattr(secrets.os, "environ", Dropping())
        masked = secrets.mask_secrets("token hf_abcdefghijklmnopqrstuvwx here")
    assert masked == f"token {secrets.MASK} here"
