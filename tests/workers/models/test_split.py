"""A target's layers split over several GPUs: the placement, checked on CPU. There is no second device
here, so the map's GPU indices are computed with given memory budgets, and the loader is shown to hand
the map to transformers (relabelled to the CPU, where one device takes the whole model: the hooks that
move activations between GPUs run only on a machine with several)."""

from __future__ import annotations

import pytest
import torch

from workers.models import loading
from workers.models.split import split_map
from workers.runtime.device import hardware_of, pick_device, split_gpus, target_gpus

GIB = 1 << 30


def _config(tiny_target, tied: bool):
    config = tiny_target[0].config.__class__.from_dict(tiny_target[0].config.to_dict())
    config.tie_word_embeddings = tied
    return config


@pytest.mark.parametrize("gpus", [2, 3])
def test_consecutive_layers_are_balanced_over_the_gpus_with_the_embedding_first(tiny_target, gpus):
    config = _config(tiny_target, tied=False)
    placed = split_map(config, tuple(range(gpus)), torch.float32, max_memory={i: GIB for i in range(gpus)})
    layers = [placed[f"model.layers.{i}"] for i in range(config.num_hidden_layers)]
    assert layers == sorted(layers), "the layers run in order, GPU after GPU"
    assert set(layers) == set(range(gpus)), "every GPU holds layers"
    counts = [layers.count(g) for g in range(gpus)]
    assert max(counts) - min(counts) <= 2, counts
    assert placed["model.embed_tokens"] == 0
    assert placed["lm_head"] == placed["model.norm"] == gpus - 1


def test_a_tied_head_stays_with_the_embedding(tiny_target):
    placed = split_map(_config(tiny_target, tied=True), (0, 1), torch.float32, max_memory={0: GIB, 1: GIB})
    assert placed["lm_head"] == placed["model.embed_tokens"] == 0
    assert placed[f"model.layers.{tiny_target[0].config.num_hidden_layers - 1}"] == 1


def test_more_gpus_than_layers_or_too_little_memory_is_refused(tiny_target):
    config = _config(tiny_target, tied=False)
    with pytest.raises(ValueError, match=f"num_gpus: {config.num_hidden_layers + 1} GPUs for a target of"):
        split_map(config, tuple(range(config.num_hidden_layers + 1)), torch.float32, max_memory={0: GIB})
    with pytest.raises(ValueError, match="does not fit 2 GPUs"):
        split_map(config, (0, 1), torch.float32, max_memory={0: 1 << 16, 1: 1 << 16})


def test_a_split_target_loads_through_its_device_map_and_decodes_as_the_whole_one(tiny_target, tmp_path, monkeypatch):
    model, tokenizer, _ = tiny_target
    model.save_pretrained(tmp_path, safe_serialization=True)
    tokenizer.save_pretrained(tmp_path)
    maps = []

    def on_cpu(config, gpus, dtype):
        placed = split_map(config, gpus, dtype, max_memory={i: GIB for i in gpus})
        maps.append(placed)
        return {name: "cpu" for name in placed}

    load, given = loading.AutoModelForCausalLM.from_pretrained, []

    def spy(*args, **kwargs):
        given.append(kwargs.get("device_map"))
        return load(*args, **kwargs)

    monkeypatch.setattr(loading, "split_map", on_cpu)
    monkeypatch.setattr(loading.AutoModelForCausalLM, "from_pretrained", spy)
    split, _ = loading.load_model(folder=tmp_path, device=torch.device("cpu"), dtype=torch.float32, split=(0, 1))
    whole, _ = loading.load_model(folder=tmp_path, device=torch.device("cpu"), dtype=torch.float32)
    assert len(maps) == 1 and set(maps[0].values()) == {0, 1}
    # transformers is given the map; with one device in it here, it places the whole model there
    assert given == [{name: "cpu" for name in maps[0]}, None]
    ids = torch.tensor([[5, 17, 42, 8, 99, 3]])
    assert torch.equal(split(input_ids=ids).logits, whole(input_ids=ids).logits)
    assert not any(p.requires_grad for p in split.parameters())


def test_the_gpus_a_target_is_split_over_and_the_hardware_key(monkeypatch):
    assert [split_gpus(n) for n in (0, 0.5, 1, 2, 3)] == [(), (), (), (0, 1), (0, 1, 2)]
    assert [target_gpus(n) for n in (0, 0.5, 1, 2, 8)] == [1, 1, 1, 2, 8]
    model = torch.nn.Linear(2, 2)
    assert hardware_of(model) == f"cpu {torch.get_num_threads()}t x1 float32"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert pick_device(1) == torch.device("cuda", 0)
    with pytest.raises(RuntimeError, match="num_gpus=2 but torch sees 1 CUDA device"):
        pick_device(2)


def test_a_worker_splits_over_its_own_gpus(tiny_target):
    """A group's worker on a node whose GPUs all workers see splits over the ones it was given."""
    placed = split_map(_config(tiny_target, tied=False), (2, 3), torch.float32, max_memory={2: GIB, 3: GIB})
    assert set(placed.values()) == {2, 3} and placed["model.embed_tokens"] == 2
