"""vLLM as the generation engine, run for real: on this CPU vLLM's CPU build (`make install` puts it in the venv),
on SmolLM2-135M-Instruct (the shipped GGUF, converted once), against the model's own `generate`.

In fp32 both compute the same function with different kernels, so greedy decoding agrees token for token except
where the two best tokens are all but tied (counted, and each such split checked to be one)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from coalign.config import GenerationSettings, load_config
from coalign.core.errors import RunError
from coalign.moat.sample import sample_completions
from coalign.models import vllm_engine
from coalign.models.agents import Agent, generate
from coalign.models.backends import VLLMBackend
from coalign.models.bases import starting_point
from coalign.models.load import load_model, render_prompt
from coalign.models.turn_writers import generate_turns
from coalign.models.vllm_engine import on_cpu, reload_weights, tied_names
from coalign.tasks.gsm8k import load_gsm8k
from coalign.training.setup import check_generation

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not on_cpu() and __import__("importlib").util.find_spec("vllm") is None,
        reason="a GPU machine installs vLLM itself (pip install -e '.[vllm]'); on a CPU make install does",
    ),
]
ROOT = Path(__file__).parents[2]
DATA = ROOT / "coalign" / "data" / "gsm8k" / "test.jsonl"
NEW_TOKENS = 32
TIE = 0.05  # nats between the two best next tokens under which kernels' rounding may pick either


LAUNCH_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture(scope="module", autouse=True)
def process_group_closed_after():
    """An engine in this process starts a torch.distributed group of one (vLLM's), after which accelerate sets
    RANK, WORLD_SIZE and MASTER_PORT=29500 for every trainer, and TRL's colocated engine holds that port. After
    this module both are undone, so that the worker's later tests, and the processes they start, run alone."""
    yield
    import torch.distributed as dist
    from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel

    destroy_model_parallel()
    destroy_distributed_environment()
    if dist.is_initialized():
        dist.destroy_process_group()
    for name in LAUNCH_VARIABLES:
        os.environ.pop(name, None)


@pytest.fixture(scope="module")
def smol():
    """SmolLM2 twice: on vLLM's engine (fp32, as saved) and on its own generate."""
    path = starting_point("smollm2-135m")
    settings = GenerationSettings(backend="vllm")
    return Agent.load(path, generation=settings), Agent.load(path), path


@pytest.fixture(scope="module")
def contexts(smol):
    vllm_agent, _, _ = smol
    tok = vllm_agent.tokenizer
    questions = [task.question for task in load_gsm8k(DATA)[:6]]
    return [tok(render_prompt(tok, q))["input_ids"] for q in questions]


def first_split(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


def test_greedy_tokens_equal_the_model_s_own_except_at_ties(smol, contexts):
    vllm_agent, hf_agent, _ = smol
    ours = vllm_agent.backend.turns(contexts, NEW_TOKENS, 0.0, 1.0)
    theirs = generate_turns(hf_agent.model, hf_agent.tokenizer, contexts, NEW_TOKENS, 0.0, 1.0)
    splits = [(i, first_split(a, b)) for i, (a, b) in enumerate(zip(ours, theirs))]
    splits = [(i, at) for i, at in splits if at is not None]
    assert len(splits) <= len(contexts) // 3, splits
    for i, at in splits:  # where they part, the model's own two best tokens are all but tied
        with torch.no_grad():
            logits = hf_agent.model(torch.tensor([contexts[i] + theirs[i][:at]])).logits[0, -1].log_softmax(-1)
        best = logits.topk(2).values
        assert float(best[0] - best[1]) < TIE, (i, at, best)


def test_sampling_logprobs_are_the_model_s_own(smol, contexts):
    """vLLM's log-probabilities of the tokens it sampled, against the model's own scoring of the same tokens."""
    vllm_agent, hf_agent, _ = smol
    backend = vllm_agent.backend
    params = backend.sampling(n=1, max_tokens=24, temperature=1.0, top_p=1.0, seed=3, logprobs=0)
    outs = backend.llm.generate([{"prompt_token_ids": ids} for ids in contexts[:4]], params, use_tqdm=False)
    worst = 0.0
    for ids, out in zip(contexts, outs):
        sampled = list(out.outputs[0].token_ids)
        theirs = [step[token].logprob for step, token in zip(out.outputs[0].logprobs, sampled)]
        with torch.no_grad():
            logits = hf_agent.model(torch.tensor([ids + sampled])).logits[0, len(ids) - 1 : -1].log_softmax(-1)
        own = logits.gather(1, torch.tensor(sampled)[:, None])[:, 0]
        worst = max(worst, float((own - torch.tensor(theirs)).abs().max()))
    assert worst < 1e-3, worst


def test_new_weights_reach_the_running_engine(smol, contexts):
    """The in-place reload (what a GRPO step's sync calls on a CPU): halved MLP weights change the greedy text;
    the original weights put back give the original text, token for token."""
    vllm_agent, hf_agent, _ = smol
    backend = vllm_agent.backend
    before = backend.turns(contexts[:3], 24, 0.0, 1.0)
    weights = dict(hf_agent.model.state_dict())
    halved = {name: w * 0.5 if ".mlp." in name else w for name, w in weights.items()}
    reload_weights(backend.llm, halved.items())
    changed = backend.turns(contexts[:3], 24, 0.0, 1.0)
    reload_weights(backend.llm, weights.items())
    assert changed != before
    assert backend.turns(contexts[:3], 24, 0.0, 1.0) == before


def test_a_tied_head_follows_its_embeddings_through_a_reload(smol, contexts):
    """SmolLM2 ties its output head to its input embeddings, and `named_parameters()` (what TRL's sync iterates)
    names that weight once: moved embeddings reloaded with the tie move the engine's head too, and its
    log-probabilities are the moved model's. Without the tie the engine kept its old head."""
    vllm_agent, hf_agent, _ = smol
    backend, model = vllm_agent.backend, hf_agent.model
    params = backend.sampling(n=1, max_tokens=1, temperature=0.0, top_p=1.0, seed=0, logprobs=5)

    def engine_top(ids):
        out = backend.llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)[0].outputs[0]
        return torch.tensor(sorted(step.logprob for step in out.logprobs[0].values()))

    def model_top(ids):
        with torch.no_grad():
            return model(torch.tensor([ids])).logits[0, -1].log_softmax(-1).topk(5).values.sort().values

    embeddings = model.get_input_embeddings().weight
    kept = embeddings.detach().clone()
    tied = tied_names(model)
    assert tied == {"model.embed_tokens.weight": ["lm_head.weight"]}
    try:
        with torch.no_grad():
            embeddings.add_(torch.randn(embeddings.shape, generator=torch.Generator().manual_seed(0)) * 0.05)
        reload_weights(backend.llm, model.named_parameters(), tied)
        worst = max(float((engine_top(ids) - model_top(ids)).abs().max()) for ids in contexts[:3])
    finally:
        with torch.no_grad():
            embeddings.copy_(kept)
        reload_weights(backend.llm, model.named_parameters(), tied)
    assert worst < 1e-3, worst


def test_stage_one_samples_k_per_task_and_a_seed_fixes_them(smol):
    """MOAT's stage 1 through the engine: K candidates per task in one request each, fixed by the stage's seed
    whatever else is in the call. 12 tasks x 4 are more prompt tokens than one engine step takes (4,096), so
    prompts wait for a later step: a split prefill would fail on a CPU (its seeded generators)."""
    vllm_agent, _, _ = smol
    questions = [task.question for task in load_gsm8k(DATA)[:12]]

    def sample(seed: int, n: int) -> list[list[str]]:
        torch.manual_seed(seed)
        return sample_completions(vllm_agent, questions[:n], 4, 1.0, 0.95, 8, 64)

    first = sample(0, 12)
    assert [len(c) for c in first] == [4] * 12 and all(all(c) for c in first)
    assert sample(0, 3) == first[:3]
    assert sample(1, 3) != first[:3]


def test_completions_equal_the_backends_turns(smol):
    """Text (`complete`, MOAT's and evaluation's path) and token ids (`turns`, PilotRL's) are one computation."""
    vllm_agent, _, _ = smol
    tok = vllm_agent.tokenizer
    users = ["What is 17 times 3?", "Name a colour."]
    texts = generate(vllm_agent, users, 24, progress=False)
    ids = vllm_agent.backend.turns([tok(render_prompt(tok, u))["input_ids"] for u in users], 24, 0.0, 1.0)
    assert [t[0] for t in texts] == [tok.decode(i, skip_special_tokens=True).strip() for i in ids]


def test_an_agent_that_only_scores_starts_no_engine(smol, monkeypatch):
    _, _, path = smol
    monkeypatch.setattr(vllm_engine, "_held", None)  # no engine in this process yet
    agent = Agent.load(path, generation=GenerationSettings(backend="vllm"))
    assert isinstance(agent.backend, VLLMBackend) and agent.model is not None  # the model scoring asks for
    assert vllm_engine._held is None


def test_one_engine_takes_each_checkpoint_s_weights_in_turn(smol, contexts, tmp_path, monkeypatch):
    """Two agents of one base (SmolLM2, and a copy with moved embeddings, which its output head is tied to, and
    halved MLP weights) generate in turn from the process's one engine: at each turn the engine's log-probabilities
    are those of the agent's own checkpoint, and no second engine is started."""
    import vllm

    _, hf_agent, path = smol
    started, real_init = [], vllm.LLM.__init__
    monkeypatch.setattr(vllm.LLM, "__init__", lambda self, **kw: started.append(kw["model"]) or real_init(self, **kw))
    moved = load_model(path)
    with torch.no_grad():
        embeddings = moved.get_input_embeddings().weight
        embeddings.add_(torch.randn(embeddings.shape, generator=torch.Generator().manual_seed(1)) * 0.05)
        for name, weight in moved.named_parameters():
            if ".mlp." in name:
                weight.mul_(0.5)
    moved.save_pretrained(tmp_path / "moved")
    hf_agent.tokenizer.save_pretrained(tmp_path / "moved")
    settings = GenerationSettings(backend="vllm")
    planner = Agent.load(path, generation=settings, role="planner")
    grounder = Agent.load(str(tmp_path / "moved"), generation=settings, role="grounder")

    def gap(agent: Agent, model) -> float:
        """The largest difference of the engine's top-5 next-token log-probabilities from `model`'s."""
        params = agent.backend.sampling(n=1, max_tokens=1, temperature=0.0, seed=0, logprobs=5)
        worst = 0.0
        with agent.backend.phase() as llm:
            outs = llm.generate([{"prompt_token_ids": ids} for ids in contexts[:3]], params, use_tqdm=False)
        for ids, out in zip(contexts, outs):
            engine = torch.tensor(sorted(step.logprob for step in out.outputs[0].logprobs[0].values()))
            with torch.no_grad():
                own = model(torch.tensor([ids])).logits[0, -1].log_softmax(-1).topk(5).values.sort().values
            worst = max(worst, float((engine - own).abs().max()))
        return worst

    for agent, model in ((grounder, moved), (planner, hf_agent.model), (grounder, moved)):
        assert gap(agent, model) < 1e-3
    assert gap(grounder, hf_agent.model) > 1e-2  # the two checkpoints differ where it is measured
    assert len(started) <= 1  # none where this module's engine runs already
    assert planner._model is None and grounder._model is None  # nothing scored: no HF model loaded


def test_a_model_the_cpu_kernels_cannot_run_is_one_clear_error(tmp_path):
    """vLLM's CPU attention has no kernel for the shipped tiny bases' 16-wide heads: the error names the folder."""
    if not on_cpu():
        pytest.skip("a GPU's kernels take these heads")
    base = Path(starting_point("coalign-base"))
    assert json.loads((base / "config.json").read_text())["head_dim"] == 16
    agent = Agent.load(str(base), generation=GenerationSettings(backend="vllm"))
    with pytest.raises(RunError, match=rf"^{base}: attention heads of size 16, and vLLM's CPU kernels take 32, "):
        generate(agent, ["hi"], 4, progress=False)
    # and a run that would generate with it on vLLM stops before any work, not after its SFT
    config = load_config("tiny-pilotrl", {"pilotrl": {"rl": {"generation": "vllm_colocate"}}})
    with pytest.raises(RunError, match=r"^pilotrl.model coalign-base-2: attention heads of size 16"):
        check_generation(config, trains=True)
    scratch = {
        "pilotrl": {"model": "scratch"},
        "models": {"tiny": {"hidden_size": 64, "num_heads": 2, "num_kv_heads": 2}},
    }
    check_generation(load_config("tiny-pilotrl", {**scratch, "generation": {"backend": "vllm"}}), trains=True)


# --------------------------------------------------------------------------- several processes

VLLM_TINY = {
    "vocab_size": 400,
    "hidden_size": 64,
    "num_layers": 2,
    "num_heads": 2,
    "num_kv_heads": 2,
    "intermediate_size": 96,
    "max_positions": 512,
}  # fmt: skip  (heads of 32: the CPU kernels' smallest)


def test_under_a_launcher_every_rank_starts_its_engine_with_or_without_prompts(tmp_path):
    """Two gloo processes (`tests/vllm_ranks_job.py`), one prompt: rank 1 has none of its own, and still starts
    its engine with rank 0, whose engine's start waits for every rank; then rank 0 alone writes turns in a phase
    both entered. Both finish with rank 0's completion (when only ranks with prompts started engines, rank 0
    waited for rank 1 until the collectives' timeout)."""
    from coalign.config import TinySpec
    from coalign.models.load import make_tiny_model

    model = make_tiny_model(["step forward", "open door", "Nothing happened."], tmp_path / "tiny",
                            TinySpec(**VLLM_TINY), seed=0)  # fmt: skip
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    launch = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
        "--master_port", str(port), "-m", "tests.vllm_ranks_job", str(model), str(tmp_path),
    ]  # fmt: skip
    done = subprocess.run(launch, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    first, second = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert first["texts"] == second["texts"] and len(first["texts"]) == 1
    assert first["turns"] and not second["turns"]


# --------------------------------------------------------------------------- PilotRL with vLLM, end to end


@pytest.fixture
def toy_registered(monkeypatch):
    from coalign import envs

    monkeypatch.setitem(envs.REGISTRY, "toy", "tests.toy_env:ToyEnv")


def test_a_pilotrl_run_rolls_out_syncs_and_evaluates_on_one_vllm_engine(tmp_path, toy_registered, monkeypatch):
    """SFT, two GRPO stages whose rollouts TRL's colocated engine writes, its weights synced before each step's
    rollouts under the names the checkpoint holds, and an evaluation whose turns the engine writes: all on the
    one engine the first stage started, each stage's and the evaluation's checkpoint loaded into it, so that the
    evaluation's log-probabilities are the last checkpoint's own."""
    import vllm
    from rich.console import Console

    from coalign.config import RunConfig
    from coalign.pilotrl import rollout
    from coalign.pilotrl.recipe import run_pilotrl
    from coalign.training import grpo

    monkeypatch.setattr(vllm_engine, "_held", None)  # this run's engine, not the module's SmolLM2 one
    started, real_init = [], vllm.LLM.__init__
    monkeypatch.setattr(vllm.LLM, "__init__", lambda self, **kw: started.append(kw["model"]) or real_init(self, **kw))
    loaded, real_load = [], vllm_engine.load_checkpoint
    monkeypatch.setattr(vllm_engine, "load_checkpoint", lambda llm, path, trust: loaded.append(str(path)) or
                        real_load(llm, path, trust))  # fmt: skip
    synced, written, ties = [], [], []
    real_reload, real_generate = grpo.reload_weights, rollout.VLLMTurns._generate

    def spy_reload(llm, weights, tied):
        def seen():
            for name, tensor in weights:
                synced.append((name, tuple(tensor.shape)))
                yield name, tensor

        ties.append(tied)
        real_reload(llm, seen(), tied)

    def spy_generate(self, prompts):
        written.append(len(prompts))
        return real_generate(self, prompts)

    monkeypatch.setattr(grpo, "reload_weights", spy_reload)
    monkeypatch.setattr(rollout.VLLMTurns, "_generate", spy_generate)
    turns = []
    real_turns = VLLMBackend.turns
    monkeypatch.setattr(VLLMBackend, "turns", lambda self, *a: turns.append(len(a[0])) or real_turns(self, *a))
    settings = {"heldin": ["toy"], "heldout": ["toy"], "train_tasks": 6, "eval_tasks": 2, "eval_seed": 100,
                "max_new_tokens": 12, "max_context": 400, "eval_update_every": [1],
                "sft": {"learning_rate": 3e-3, "epochs": 1, "batch_size": 8, "grad_accum": 1, "max_length": 1024},
                "rl": {"order": ["executor", "joint"], "tasks": 2, "num_generations": 2, "batch_size": 4,
                       "grad_accum": 1, "learning_rate": 1e-3, "save_steps": 1,
                       "epochs": {"executor": 1, "joint": 1}, "generation": "vllm_colocate"}}  # fmt: skip
    cfg = RunConfig.model_validate({"name": "t", "recipe": "pilotrl", "threads": 1, "models": {"tiny": VLLM_TINY},
                                    "pilotrl": settings, "generation": {"backend": "vllm"}})  # fmt: skip
    results = run_pilotrl(cfg, tmp_path, Console(quiet=True))
    assert results["k1"]["envs"]["toy"]["tasks"] == 2 and turns  # the evaluation's turns came from vLLM
    assert written and sum(written) >= 8  # each step's 2 tasks x 2 rollouts, each turn through the engine
    checkpoints = tmp_path / "checkpoints"
    last = load_model(checkpoints / "grpo2-joint")
    saved = last.state_dict()
    names = dict(synced)
    assert names and set(names) <= set(saved)  # synced under the checkpoint's names
    assert all(names[n] == tuple(saved[n].shape) for n in names)
    assert {n for n in saved if n != "lm_head.weight"} <= set(names)
    assert ties[-1] == {"model.embed_tokens.weight": ["lm_head.weight"]}  # the tied head goes under its name too
    assert started == [str(checkpoints / "sft")]  # one engine, started by the first stage
    assert loaded == [str(checkpoints / "grpo1-executor"), str(checkpoints / "grpo2-joint")]  # stage 2, evaluation
    tok = vllm_engine._held.llm.get_tokenizer()
    ids = tok("step forward")["input_ids"]
    params = vllm.SamplingParams(n=1, max_tokens=1, temperature=0.0, logprobs=5)
    out = vllm_engine._held.llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)[0].outputs[0]
    engine = torch.tensor(sorted(step.logprob for step in out.logprobs[0].values()))
    with torch.no_grad():
        own = last(torch.tensor([ids])).logits[0, -1].log_softmax(-1).topk(5).values.sort().values
    assert float((engine - own).abs().max()) < 1e-3  # the evaluation sampled the last checkpoint, not stale weights
