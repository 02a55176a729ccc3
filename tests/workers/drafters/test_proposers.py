"""Every drafter family's proposer, drafting by sampling at a temperature other than 1: the q a
proposer returns for each draft must be the distribution that draft was drawn from,
softmax(logits / T). The engine's accept rule divides p by that q, so a q at the wrong
temperature biases the output although every draft is still a real draw."""

from __future__ import annotations

import pytest
import torch

import workers.drafters.chain.proposer as chain_module
import workers.drafters.dflash.proposer as block_module
import workers.drafters.standalone.proposer as model_module
from tests.workers.decoding.test_chain import _tiny_llama
from workers.decoding.chain import generate
from workers.decoding.sampling import sample
from workers.drafters.chain.proposer import ChainProposer
from workers.drafters.dflash.model import drafter_from_target as dflash_from_target
from workers.drafters.dflash.proposer import BlockProposer
from workers.drafters.dflash.train import dflash_config_for
from workers.drafters.eagle3.model import drafter_from_target
from workers.drafters.eagle3.train import drafter_config_for
from workers.drafters.mtp.model import head_from_target
from workers.drafters.mtp.train import mtp_config_for
from workers.drafters.standalone.proposer import ModelProposer

TEMPERATURE = 0.6


def _eagle(target):
    torch.manual_seed(2)
    cfg = drafter_config_for(target, norm="pre", fc_norm=False, fusion="tri")
    return ChainProposer(drafter_from_target(target, cfg).eval())


def _mtp(target):
    torch.manual_seed(2)
    return ChainProposer(head_from_target(target, mtp_config_for(target, norm="post")).eval())


def _dflash(target):
    torch.manual_seed(2)
    cfg = dflash_config_for(target, layers=1, block_size=5, mask_token_id=39)
    return BlockProposer(dflash_from_target(target, cfg).eval())


PROPOSERS = {
    "eagle3": (chain_module, _eagle),
    "mtp": (chain_module, _mtp),
    "dflash": (block_module, _dflash),
    "standalone": (model_module, lambda target: ModelProposer(_tiny_llama(1, vocab=40, layers=1))),
}


@torch.no_grad()
@pytest.mark.parametrize("family", list(PROPOSERS))
def test_each_drafts_q_is_the_distribution_it_was_drawn_from(family, monkeypatch):
    module, make = PROPOSERS[family]
    target = _tiny_llama(0, vocab=40)
    proposer = make(target)
    generate(target, proposer, torch.tensor([[1, 5, 3, 7, 2]]), max_new=2, depth=1, temperature=0.0)  # started
    draws = []

    def recorded(logits, temperature, gen):
        token = sample(logits, temperature, gen)
        draws.append((logits.clone(), temperature, int(token)))
        return token

    monkeypatch.setattr(module, "sample", recorded)
    drafts, qs = proposer.propose(3, TEMPERATURE, torch.Generator().manual_seed(0))
    assert [d[2] for d in draws] == drafts and qs.shape[0] == 3
    for (logits, temperature, _), q in zip(draws, qs):
        assert temperature == TEMPERATURE
        drawn_from = torch.softmax(logits / temperature, dim=-1)
        torch.testing.assert_close(q, drawn_from)
        # the temperature matters here: the untempered softmax is a different distribution
        assert 0.5 * float((torch.softmax(logits, dim=-1) - drawn_from).abs().sum()) > 0.01
