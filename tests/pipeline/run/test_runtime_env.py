"""runtime_env: what the workers get (variables, pip packages), from the spec and the command line,
with no secret ever written in a spec file or printed."""

from __future__ import annotations

import pytest
import yaml

from pipeline.errors import SpecError, UserError
from pipeline.run.runtime_env import from_cli, merged
from pipeline.spec import parse_spec


def _spec(runtime_env) -> str:
    return yaml.safe_dump(
        {
            "name": "r",
            "targets": [{"name": "t", "builtin": {}}],
            "drafters": [{"name": "d"}],
            "runtime_env": runtime_env,
        }
    )


def test_variables_are_taken_from_the_shell_and_the_command_line_wins(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_fromShell")
    spec = parse_spec(
        _spec({"env_vars": {"HF_TOKEN": "${HF_TOKEN}", "HF_HOME": "/data/hf"}, "pip": ["accelerate>=1.0"]})
    )
    cli = from_cli('{"env_vars": {"HF_HOME": "/scratch/hf"}, "pip": ["gguf"]}')
    assert merged(spec.runtime_env, cli) == {
        "env_vars": {"HF_TOKEN": "hf_fromShell", "HF_HOME": "/scratch/hf"},
        "pip": ["accelerate>=1.0", "gguf"],
    }
    assert merged(None, None) == {}


@pytest.mark.parametrize("name", ["HF_TOKEN", "PGPASSWORD", "AWS_SECRET_ACCESS_KEY", "DB_PASSWD", "WANDB_API_KEY"])
def test_a_secret_written_in_the_spec_is_refused_without_echoing_it(name):
    with pytest.raises(SpecError) as caught:
        parse_spec(_spec({"env_vars": {name: "literal123", "HF_HOME": "/data/hf"}}))
    assert f"runtime_env: env_vars.{name}: the spec is stored with the experiment" in str(caught.value)
    assert "literal123" not in str(caught.value)


def test_a_variable_missing_from_the_shell_is_one_line_naming_it(monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    spec = parse_spec(_spec({"env_vars": {"HF_TOKEN": "${HF_TOKEN}"}}))
    with pytest.raises(UserError, match=r"^runtime_env.env_vars.HF_TOKEN: \$\{HF_TOKEN\} is not set"):
        merged(spec.runtime_env, None)


@pytest.mark.parametrize(
    "text,message",
    [
        ("{", r"--runtime-env: not JSON"),
        ("[1]", r"--runtime-env: give a JSON object"),
        ('{"env_vars": {"1A": "x"}}', r"--runtime-env.env_vars: '1A' is not an environment variable name"),
        ('{"conda": "env"}', r"--runtime-env.conda: Extra inputs are not permitted"),
        ('{"pip": ["ok", ""]}', r"--runtime-env.pip: '' is not a requirement line"),
        ('{"env_vars": {"A": 3}}', r"--runtime-env.env_vars.A: Input should be a valid string"),
    ],
)
def test_a_bad_command_line_runtime_env_is_one_line_naming_the_option(text, message):
    with pytest.raises(UserError, match=message) as caught:
        from_cli(text)
    assert "\n" not in str(caught.value)
