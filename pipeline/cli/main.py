"""The `specfleet` command: one Typer app whose commands live by what they do.

- pipeline/cli/experiments.py: validate, run, status
- pipeline/cli/queries.py: best, speedups
- pipeline/cli/autotune.py: autotune
- pipeline/cli/serve.py: serve
- pipeline/cli/results.py: drift, report, bench, fleet-sim
"""

from __future__ import annotations

import sys

import typer

from db.errors import StoreError, one_line
from db.secrets import mask_secrets
from pipeline.cli import autotune, experiments, queries, results, serve
from pipeline.core.labels import shown
from pipeline.errors import SpecError, UserError

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Tune speculative-decoding depth and draft trees across a fleet."
)

for command in (experiments.validate, experiments.run, queries.best, queries.speedups, experiments.status):
    app.command()(command)
app.command()(autotune.autotune)
app.command()(serve.serve)
app.command()(results.drift)
app.command()(results.report)
app.command()(results.bench)
app.command("fleet-sim")(results.fleet_sim)


def main() -> None:
    """Usage errors are typer's (exit 2); a spec or user error, a refusal of the store and a path the
    system refuses are printed as plain lines, no traceback."""
    try:
        app()
    except SpecError as exc:  # plain writes: rich would wrap long lines
        sys.stderr.write(f"{exc.source}: {len(exc.messages)} error(s)\n" + "".join(f"{m}\n" for m in exc.messages))
        sys.exit(exc.exit_code)
    except UserError as exc:
        sys.stderr.write(f"error: {mask_secrets(str(exc))}\n")
        sys.exit(exc.exit_code)
    except StoreError as exc:  # a refusal of the store that no check where the value entered caught
        sys.stderr.write(f"error: {one_line(exc)}\n")
        sys.exit(1)
    except OSError as exc:  # a path the system refuses (too long, unreadable) that no check caught
        if exc.filename is None:
            raise
        sys.stderr.write(f"error: {shown(str(exc.filename))}: {exc.strerror or exc}\n")
        sys.exit(1)
