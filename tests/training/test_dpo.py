"""Planner DPO with TRL: preferences move the model towards the chosen completions."""

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from coalign.config import DPOSettings, TinySpec
from coalign.formats.lumos import lumos_generation_prompt, planner_prompt
from coalign.models.load import load_model, load_tokenizer, make_tiny_model, render_prompt
from coalign.training.dpo import dpo

SPEC = TinySpec(vocab_size=400, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128)
TRIPLES = [
    (planner_prompt(f"Add {a} and {b}."), f"Subgoal 1: Add {a} and {b}", "Subgoal 1: Find the total")
    for a, b in [(3, 4), (15, 27), (8, 61), (5, 9)]
]


def _margin(path, triples) -> float:
    """Mean log-prob of chosen minus rejected completion under the model at `path`."""
    tok, model = load_tokenizer(path), load_model(path, dtype="float32")
    total = 0.0
    for user, chosen, rejected in triples:
        prompt = tok(render_prompt(tok, user), add_special_tokens=False)["input_ids"]
        for sign, completion in ((1, chosen), (-1, rejected)):
            ids = tok(render_prompt(tok, user) + completion, add_special_tokens=False)["input_ids"]
            with torch.no_grad():
                logp = torch.log_softmax(model(torch.tensor([ids])).logits[0, :-1], -1)
            targets = torch.tensor(ids[1:])
            total += sign * logp[torch.arange(len(targets)), targets][len(prompt) - 1 :].sum().item()
    return total / len(triples)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    texts = [lumos_generation_prompt(u) + c + r for u, c, r in TRIPLES]
    return make_tiny_model(texts, tmp_path_factory.mktemp("tiny"), SPEC, seed=0)


def test_dpo_raises_chosen_over_rejected_margin(tiny, tmp_path):
    settings = DPOSettings(
        learning_rate=5e-3,
        beta=0.1,
        epochs=8,
        batch_size=4,
        grad_accum=1,
        warmup_ratio=0.0,
        lr_scheduler="constant",
        max_length=256,
        logging_steps=1,
    )
    before = _margin(tiny, TRIPLES)
    out = dpo(tiny, TRIPLES, tmp_path / "dpo", settings, seed=0)
    after = _margin(out, TRIPLES)
    assert after > before + 1.0
    log = json.loads((out / "train_log.json").read_text())
    assert log["pairs"] == 4 and log["steps"] == 8


def test_dpo_refuses_no_pairs(tiny, tmp_path):
    with pytest.raises(ValueError, match="no preference pairs"):
        dpo(tiny, [], tmp_path / "x", DPOSettings())


def test_held_aside_pairs_are_measured_once_trained_and_never_trained_on(tiny, tmp_path):
    """The held-aside pair changes no weight; its loss, margin and accuracy are TRL's DPO quantities against the
    reference (the model before the stage): margin = beta x the change in log-prob gap, loss = -log sigmoid."""
    settings = DPOSettings(
        learning_rate=5e-3,
        beta=0.1,
        epochs=4,
        batch_size=3,
        grad_accum=1,
        warmup_ratio=0.0,
        max_length=256,
        logging_steps=2,
    )
    train, aside = TRIPLES[:3], TRIPLES[3:]
    measured = dpo(tiny, train, tmp_path / "measured", settings, seed=0, held_aside=aside)
    alone = dpo(tiny, train, tmp_path / "alone", settings, seed=0)
    assert load_file(measured / "model.safetensors").keys() == load_file(alone / "model.safetensors").keys()
    for name, weight in load_file(alone / "model.safetensors").items():
        assert torch.equal(load_file(measured / "model.safetensors")[name], weight), name
    log = json.loads((measured / "train_log.json").read_text())
    assert (log["pairs"], log["held_aside_pairs"]) == (3, 1) and "eval" not in json.loads(
        (alone / "train_log.json").read_text()
    )
    eos = load_tokenizer(tiny).eos_token
    with_eos = [(user, chosen + eos, rejected + eos) for user, chosen, rejected in aside]
    margin = settings.beta * (_margin(measured, with_eos) - _margin(tiny, with_eos))
    held = log["eval"]
    assert held["margin"] == pytest.approx(margin, abs=1e-4)
    assert held["margin"] == pytest.approx(held["chosen_reward"] - held["rejected_reward"], abs=1e-5)
    assert held["loss"] == pytest.approx(-math.log(1 / (1 + math.exp(-margin))), abs=1e-4)
    assert held["accuracy"] == float(margin > 0)
    assert len(log["reward_margins"]) == len(log["reward_accuracies"]) >= 1  # train's, per log
