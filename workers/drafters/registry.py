"""The drafter families: a family's name (a drafter spec's `kind`) -> where its parts live.

Each family is one package, `workers/drafters/<family>/`, holding its model, training,
checkpoint layouts, export, chain drafting for measurement and engine proposer. Two entry
points name it here, as "module:attribute" strings so that this module imports nothing (the
job registry, pipeline/core/kinds.py, reads it on the driver without torch):

- `family`: the object that loads, drafts chains with, proposes with, times and exports a
  drafter of the family (`family_of(name)` returns it, imported then);
- `trainer`: the function a `train_drafter` job runs for it. A train_drafter job's code
  version covers only its own family's trainer, so changing one trainer retrains no drafter
  of another family.

Adding a family is one package and one line here (and its spec section in
pipeline/core/model_settings.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FamilyEntry:
    family: str  # "module:class" of the family object
    # "module:function(*, target, tokenizer, spec, seed, device, progress, data, features, replicas, resume)"
    trainer: str

    @property
    def trainer_module(self) -> str:
        return self.trainer.partition(":")[0]

    @property
    def family_module(self) -> str:
        return self.family.partition(":")[0]


FAMILIES: dict[str, FamilyEntry] = {
    "eagle3": FamilyEntry("workers.drafters.eagle3.family:Eagle3Family", "workers.drafters.eagle3.train:train_eagle3"),
    "dflash": FamilyEntry("workers.drafters.dflash.family:DFlashFamily", "workers.drafters.dflash.train:train_dflash"),
    "mtp": FamilyEntry("workers.drafters.mtp.family:MtpFamily", "workers.drafters.mtp.train:train_mtp"),
    "standalone": FamilyEntry(
        "workers.drafters.standalone.family:StandaloneFamily", "workers.drafters.standalone.train:train_standalone"
    ),
}


def entry(name: str) -> FamilyEntry:
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown drafter family {name!r}; known: {', '.join(FAMILIES)}") from None


def family_of(name: str):
    """The family object of drafter family `name` (imports that family's package, and torch)."""
    from pipeline.core.kinds import resolve  # the job registry reads this module: imported when called

    return resolve(entry(name).family)()


def trainer_of(name: str):
    """The training function of drafter family `name`."""
    from pipeline.core.kinds import resolve

    return resolve(entry(name).trainer)
