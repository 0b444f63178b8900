"""Grounder NLL scoring against Hugging Face's own loss, batching invariance and the content mask."""

from __future__ import annotations

import copy
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    Gemma2Config,
    Gemma2ForCausalLM,
    LlamaConfig,
    MistralConfig,
    Qwen2Config,
    Qwen3Config,
)

from coalign.config import TinySpec
from coalign.formats.lumos import grounder_prompt, lumos_generation_prompt
from coalign.moat import scoring as score_module
from coalign.moat.scoring import (
    ActionScore,
    EncodedRow,
    argument_spans,
    encode_completion,
    prefix_groups,
    score_completions,
)
from coalign.models.agents import Agent, grounder_example
from coalign.models.load import make_tiny_model, render_prompt

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from scoring_memory import PeakTensorMemory, full_vocabulary_nll, peak_scoring, wide_grounder  # noqa: E402

SPEC = TinySpec(vocab_size=400, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128)
EXAMPLES = [
    grounder_example("Add 3 and 4.", ["Add 3 and 4"], ["R1 = Calculator(3 + 4)"]),
    grounder_example(
        "A box holds 28 pens; a seventh are red. How many are not red?",
        ["Find the red pens", "Subtract them from 28"],
        ["R1 = Calculator(28 * 1/7)", "R2 = Calculator(28 - R1)"],
    ),
    grounder_example(
        "Solve x + 2 = 5.", ["Set the equation", "Solve it"], ["R1 = SetEquation(x + 2 = 5)", "R2 = SolveEquation(R1)"]
    ),
    grounder_example("Count 1, 2, 3.", ["Count"], ["R1 = Count([1, 2, 3])"]),
    grounder_example("Halve 90.", ["Halve 90"], ["R1 = Calculator(90 / 2)"]),
]


@pytest.fixture(scope="module")
def agent(tmp_path_factory) -> Agent:
    texts = [lumos_generation_prompt(u) + c for u, c in EXAMPLES]
    path = make_tiny_model(texts, tmp_path_factory.mktemp("tiny"), SPEC, seed=0)
    return Agent.load(str(path))


def hf_row_loss(agent: Agent, user: str, completion: str) -> tuple[float, int]:
    """Summed completion NLL and its token count, from the model's own loss on one unpadded row."""
    tok = agent.tokenizer
    prompt = render_prompt(tok, user)
    p = tok(prompt)["input_ids"]
    ids = tok(prompt + completion + tok.eos_token)["input_ids"]
    assert ids[: len(p)] == p
    labels = [-100] * len(p) + ids[len(p) :]
    with torch.no_grad():
        loss = agent.model(torch.tensor([ids]), labels=torch.tensor([labels])).loss.item()
    n = len(ids) - len(p)
    return loss * n, n


def test_scores_equal_hugging_face_loss_row_by_row(agent):
    users, completions = zip(*EXAMPLES)
    scores = score_completions(agent, users, completions, batch_size=len(users))
    for (user, completion), score in zip(EXAMPLES, scores):
        nll_sum, n = hf_row_loss(agent, user, completion)
        assert score.n_tokens == n
        assert score.nll_sum == pytest.approx(nll_sum, rel=1e-4)
        assert score.value("mean") == pytest.approx(nll_sum / n, rel=1e-4)


def test_completion_that_already_ends_with_eos_scores_the_same(agent):
    user, completion = EXAMPLES[1]
    plain, with_eos = score_completions(agent, [user, user], [completion, completion + agent.tokenizer.eos_token])
    assert plain == with_eos


def test_batching_padding_and_sorting_do_not_change_scores(agent):
    users, completions = zip(*(EXAMPLES + EXAMPLES[::-1]))
    one = score_completions(agent, users, completions, batch_size=1)
    four = score_completions(agent, users, completions, batch_size=4)
    assert len(one) == len(four) == len(users)
    for a, b in zip(one, four):
        assert (a.n_tokens, a.n_content) == (b.n_tokens, b.n_content)
        assert b.nll_sum == pytest.approx(a.nll_sum, rel=1e-4)
        assert b.content_nll_sum == pytest.approx(a.content_nll_sum, rel=1e-4)
    # input order is kept: the second half is the first half reversed
    half = len(EXAMPLES)
    assert [s.n_tokens for s in one[half:]] == [s.n_tokens for s in one[:half]][::-1]
    assert len({s.n_tokens for s in one[:half]}) > 1


def test_argument_spans_allow_parentheses_and_semicolons():
    text = "R1 = Code(f(2); g(3)); R2, R3 = SolveEquation( x = 2 ); R4 = Define()"
    assert [text[a:b] for a, b in argument_spans(text)] == ["f(2); g(3)", "x = 2"]
    assert argument_spans("no actions here") == []


def test_content_mask_counts_only_argument_tokens(agent):
    user, completion = EXAMPLES[1]
    assert completion == "R1 = Calculator(28 * 1/7); R2 = Calculator(28 - R1)"
    score = score_completions(agent, [user], [completion])[0]
    row = encode_completion(agent.tokenizer, user, completion)
    assert all(i >= row.start for i, c in enumerate(row.content) if c)
    tokens = [agent.tokenizer.decode([t]) for t, c in zip(row.ids, row.content) if c]
    assert len(tokens) == score.n_content
    assert "".join(tokens).replace(" ", "") == "28*1/7" + "28-R1"
    assert 0 < score.n_content < score.n_tokens
    assert 0 < score.content_nll_sum < score.nll_sum


def test_value_and_ppl_for_each_reduction():
    score = ActionScore(nll_sum=6.0, n_tokens=3, content_nll_sum=1.0, n_content=2)
    assert score.value("mean") == 2.0
    assert score.value("content") == 0.5
    assert score.value("sum") == 6.0
    assert score.ppl == pytest.approx(math.exp(2.0))
    with pytest.raises(ValueError, match="reduction"):
        score.value("median")
    with pytest.raises(ValueError, match="content"):
        ActionScore(1.0, 2, 0.0, 0).value("content")


def test_empty_input_returns_empty_list(agent):
    assert score_completions(agent, [], []) == []


def test_mismatched_lengths_are_refused(agent):
    with pytest.raises(ValueError, match="completions"):
        score_completions(agent, ["a"], [])


class FullLogits:
    """The tiny model behind a forward without `logits_to_keep`, as some remote-code models have."""

    def __init__(self, model):
        self.model, self.device = model, model.device

    def forward(self, input_ids, attention_mask, use_cache):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=use_cache)

    __call__ = forward


def test_models_without_logits_to_keep_score_the_same(agent):
    users, completions = zip(*EXAMPLES)
    trimmed = score_completions(agent, users, completions, batch_size=3)
    full = score_completions(Agent(FullLogits(agent.model), agent.tokenizer), users, completions, batch_size=3)
    for a, b in zip(trimmed, full):
        assert (a.n_tokens, a.n_content) == (b.n_tokens, b.n_content)
        assert b.nll_sum == pytest.approx(a.nll_sum, rel=1e-4)


# Stage-1-like rows: K candidates per task (different lengths), a task with one candidate, and
# tasks whose text starts alike, so groups of one task and across tasks both pay off.
CANDIDATES = [
    (
        "Add 3 and 4.",
        ["Add 3 and 4", "Sum the two numbers 3 and 4 then report it", "Add", "3 plus 4"],
        "R1 = Calculator(3 + 4)",
    ),
    ("Add 30 and 40.", ["Add them", "Add 30 and 40 together"], "R1 = Calculator(30 + 40)"),
    ("Halve 90.", ["Halve 90"], "R1 = Calculator(90 / 2)"),
    (
        "Solve x + 2 = 5.",
        ["Set the equation; Solve it", "Solve", "Write x + 2 = 5 as an equation; Solve it for x"],
        "R1 = SetEquation(x + 2 = 5); R2 = SolveEquation(R1)",
    ),
]
STAGE1 = [(grounder_prompt(task, s), actions) for task, subgoals, actions in CANDIDATES for s in subgoals]
# Short user turns sharing only a few tokens: their groups run beside the grounder rows' (left padding).
SHORT = [
    ("Add 3 and 4.", "R1 = Calculator(3 + 4)"),
    ("Add 3 and 4 now.", "R1 = Calculator(3 + 4)"),
    ("Hi", "R1 = Count([1])"),
]


@pytest.fixture(scope="module")
def sharp(agent) -> Agent:
    """The tiny model with peaked attention: at initialisation attention is near uniform, so a wrong
    position or a key left unmasked would barely change a score."""
    model = copy.deepcopy(agent.model)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(8.0)
            layer.self_attn.k_proj.weight.mul_(8.0)
    return Agent(model, agent.tokenizer)


def assert_same_scores(plain: list[ActionScore], shared: list[ActionScore]) -> None:
    assert len(plain) == len(shared)
    for a, b in zip(plain, shared):
        assert (b.n_tokens, b.n_content) == (a.n_tokens, a.n_content)
        assert b.nll_sum == pytest.approx(a.nll_sum, rel=1e-4)
        assert b.content_nll_sum == pytest.approx(a.content_nll_sum, rel=1e-4)


@pytest.mark.parametrize("batch_size", [1, 2, 5, 64])
def test_shared_prefix_scores_equal_the_plain_path(sharp, batch_size):
    agent = sharp
    users, completions = zip(*(STAGE1 + EXAMPLES + SHORT))
    rows = [encode_completion(agent.tokenizer, u, c) for u, c in zip(users, completions)]
    if batch_size > 1:  # the shared path is taken: some rows run after a prefix cached for several
        assert any(len(g.rows) > 1 and g.shared > 0 for g in prefix_groups(rows, batch_size))
    plain = score_completions(agent, users, completions, batch_size)
    shared = score_completions(agent, users, completions, batch_size, share_prefix=True)
    assert_same_scores(plain, shared)
    assert len({s.n_tokens for s in shared}) > 1


def test_rows_that_can_share_nothing_score_as_the_plain_path(sharp, monkeypatch):
    """A row scored from its second token leaves no prefix to share (it runs without a prefix pass)."""
    encode = score_module.encode_completion
    monkeypatch.setattr(
        score_module,
        "encode_completion",
        lambda tok, user, completion: (
            replace(encode(tok, user, completion), start=1) if user.startswith("Add") else encode(tok, user, completion)
        ),
    )
    users, completions = zip(*(STAGE1 + EXAMPLES + SHORT))
    plain = score_completions(sharp, users, completions, 4)
    shared = score_completions(sharp, users, completions, 4, share_prefix=True)
    assert_same_scores(plain, shared)


def test_models_without_a_kv_cache_are_refused_for_sharing(agent):
    users, completions = zip(*STAGE1)
    with pytest.raises(TypeError, match="KV cache"):
        score_completions(Agent(FullLogits(agent.model), agent.tokenizer), users, completions, share_prefix=True)


TINY_SHAPE = {
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
}


@pytest.mark.parametrize("config", [LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config])
def test_plain_heads_are_their_models_logits(config):
    """`PLAIN_HEADS` scores through the decoder and the head alone: their product is the model's own logits."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config(vocab_size=64, **TINY_SHAPE)).eval()
    assert type(model).__name__ in score_module.PLAIN_HEADS and score_module._plain_head(model)
    ids = torch.tensor([[1, 5, 9, 40, 7]])
    with torch.no_grad():
        hidden = model.get_decoder()(input_ids=ids).last_hidden_state
        assert torch.equal(model.get_output_embeddings()(hidden), model(input_ids=ids).logits)


def test_a_model_with_a_logit_soft_cap_scores_its_own_logits(agent):
    """Gemma 2 caps its logits after the head (here at 1, so the cap matters): it is scored from its logits."""
    torch.manual_seed(0)
    config = Gemma2Config(vocab_size=len(agent.tokenizer), final_logit_softcapping=1.0, head_dim=8, **TINY_SHAPE)
    gemma = Agent(Gemma2ForCausalLM(config).eval(), agent.tokenizer)
    assert not score_module._plain_head(gemma.model)
    with torch.no_grad():
        ids = torch.tensor([[1, 5, 9, 40, 7]])
        hidden = gemma.model.get_decoder()(input_ids=ids).last_hidden_state
        assert not torch.allclose(gemma.model.get_output_embeddings()(hidden), gemma.model(input_ids=ids).logits)
    users, completions = zip(*EXAMPLES)
    for (user, completion), score in zip(EXAMPLES, score_completions(gemma, users, completions, batch_size=5)):
        nll_sum, n = hf_row_loss(gemma, user, completion)
        assert score.n_tokens == n and score.nll_sum == pytest.approx(nll_sum, rel=1e-4)


@pytest.mark.parametrize("share", [False, True])
def test_scoring_holds_a_few_chunks_of_logits_however_many_rows_and_tokens(agent, monkeypatch, share):
    """Issue 70: scoring made fp32 logits over the whole vocabulary for every kept column of every row (64 rows at
    Qwen's 152k vocabulary: gigabytes). Counted op by op, its peak is now a few chunks of `CHUNK_LOGITS` fp32
    logits (a chunk, the exponentials of its logsumexp), for 3 rows as for 15, where the old computation's
    (`full_vocabulary_nll`) is eight times that bound for 3 rows."""
    monkeypatch.setattr(score_module, "CHUNK_LOGITS", 2**20)  # 4 MiB a chunk: 8 tokens of a 131,072 vocabulary
    wide, bound = wide_grounder(agent.tokenizer, 2**17, 16), 3 * 2**20 * 4
    users, completions = zip(*(STAGE1 + EXAMPLES))
    full, before = peak_scoring(wide, users[:3], completions[:3], 64, full_vocabulary_nll)
    assert full > 8 * bound
    for n in (3, len(users)):
        with PeakTensorMemory() as peak:
            score_completions(wide, users[:n], completions[:n], 64, share_prefix=share)
        assert peak.peak < bound, n
    assert_same_scores(before, score_completions(wide, users[:3], completions[:3], 64, share_prefix=share))


def row(ids: list[int], start: int) -> EncodedRow:
    return EncodedRow(ids=ids, start=start, content=[False] * len(ids))


def test_prefix_groups_cover_every_row_once_and_cap_the_shared_prefix():
    rows = [
        row([1, 2, 3, 4, 5, 6], 4),  # 0: a task's candidates: prompts [1, 2, 3, 4] and [1, 2, 3, 4]
        row([8, 8, 8], 2),  # 1: shares nothing with the others
        row([1, 2, 3, 4, 9, 9], 4),  # 2
        row([1, 2, 3, 7, 7], 3),  # 3: another prompt with the same first tokens
        row([1, 2], 1),  # 4: scored from its second token: nothing left to share
        row([9, 9], 5),  # 5: nothing scored, yet at least one token stays in the suffix
        row([9, 9, 9, 9], 4),  # 6
    ]
    groups = prefix_groups(rows, max_rows=2)
    assert sorted(i for g in groups for i in g.rows) == list(range(len(rows)))
    for g in groups:
        assert 1 <= len(g.rows) <= 2
        assert len({tuple(rows[i].ids[: g.shared]) for i in g.rows}) == 1
        assert all(g.shared <= max(rows[i].start, 1) - 1 and g.shared < len(rows[i].ids) for i in g.rows)
    by_row = {i: (g.rows, g.shared) for g in groups for i in g.rows}
    # prompts [1, 2, 3, 4] share 3 tokens: the last prompt token predicts the first scored one
    assert by_row[0] == ((0, 2), 3)
    assert by_row[3] == ((3,), 2)
    assert by_row[1] == ((1,), 1)
    assert by_row[4] == ((4,), 0)
    assert by_row[5] == ((5, 6), 1)
    # a larger limit gathers the three rows starting [1, 2, 3]: sharing 2 tokens each saves more
    assert ((0, 2, 3), 2) in {(g.rows, g.shared) for g in prefix_groups(rows, max_rows=3)}
    assert all(len(g.rows) == 1 for g in prefix_groups(rows, max_rows=1))
    assert prefix_groups([], max_rows=4) == []
