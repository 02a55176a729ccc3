"""What the workers' processes get besides specfleet's code: Ray's `runtime_env`.

A spec's `runtime_env` section and `specfleet run --runtime-env JSON` (the form of Ray's own
`--runtime-env-json`) take the same two keys: `env_vars` (for example the `HF_TOKEN` a gated
model needs, or `HF_HOME`) and `pip` (packages the workers install). A spec file is stored
with the experiment, so a secret never goes in it literally: it names the variable of the
shell the run starts from, `HF_TOKEN: ${HF_TOKEN}`, expanded when the run starts. Neither
changes what a job computes, so neither is part of any job's identity.
"""

from __future__ import annotations

import json
import os
import re

from pydantic import Field, ValidationError, field_validator

from db.secrets import is_secret_name
from pipeline.core.settings import Strict
from pipeline.errors import UserError

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class RuntimeEnv(Strict):
    env_vars: dict[str, str] = Field(
        default_factory=dict,
        max_length=256,
        description="variables set in every worker process; ${NAME} takes NAME from the environment the run starts in",
    )
    pip: list[str] = Field(
        default_factory=list,
        max_length=256,
        description="requirements the workers install (Ray builds one environment for them)",
    )

    @field_validator("env_vars")
    @classmethod
    def _names_and_sizes(cls, value: dict[str, str]):
        for name, text in value.items():
            if not re.fullmatch(ENV_NAME, name) or len(name) > 256:
                raise ValueError(f"{name[:60]!r} is not an environment variable name")
            if len(text) > 65_536:
                raise ValueError(f"{name}: a value of {len(text)} characters (at most 65536)")
        return value

    @field_validator("pip")
    @classmethod
    def _requirements(cls, value: list[str]):
        for req in value:
            if not req.strip() or len(req) > 1000 or "\n" in req:
                raise ValueError(f"{req[:60]!r} is not a requirement line")
        return value

    def literal_secrets(self) -> list[str]:
        """Variables with a secret's name whose value is written out rather than taken from ${...}."""
        return [n for n, v in self.env_vars.items() if is_secret_name(n) and not _VARIABLE.fullmatch(v)]

    def for_ray(self, field: str) -> dict:
        """Ray's runtime_env dict, each ${NAME} replaced from this process's environment (a variable
        that is not set is refused, naming `field`)."""
        env = {}
        for name, text in self.env_vars.items():
            missing = [v for v in _VARIABLE.findall(text) if v not in os.environ]
            if missing:
                raise UserError(
                    f"{field}.env_vars.{name}: ${{{missing[0]}}} is not set in the environment this run starts from"
                )
            env[name] = _VARIABLE.sub(lambda m: os.environ[m.group(1)], text)
        out: dict = {}
        if env:
            out["env_vars"] = env
        if self.pip:
            out["pip"] = list(self.pip)
        return out


def from_cli(text: str | None) -> RuntimeEnv | None:
    """`--runtime-env JSON`: the same keys as the spec's section; one line naming the option when bad."""
    if text is None:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"--runtime-env: not JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(data, dict):
        raise UserError('--runtime-env: give a JSON object, e.g. \'{"env_vars": {"HF_TOKEN": "..."}}\'')
    try:
        return RuntimeEnv.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise UserError(
            f"--runtime-env{'.' + where if where else ''}: {err['msg'].removeprefix('Value error, ')}"
        ) from None


def merged(spec_env: RuntimeEnv | None, cli_env: RuntimeEnv | None) -> dict:
    """Ray's runtime_env for a run: the spec's, with the command line's on top (its variables win)."""
    out: dict = spec_env.for_ray("runtime_env") if spec_env is not None else {}
    if cli_env is not None:
        extra = cli_env.for_ray("--runtime-env")
        out["env_vars"] = {**out.get("env_vars", {}), **extra.get("env_vars", {})}
        out["pip"] = [*out.get("pip", []), *extra.get("pip", [])]
    return {k: v for k, v in out.items() if v}
