"""Generation backends: HF is the old path to the byte, vLLM builds the request it should (a fake module: no
GPU here), and an OpenAI-compatible server on loopback gets the HF path's prompts and gives n candidates."""

from __future__ import annotations

import json
import shutil
import sys
import types

import pytest
import torch
import yaml
from typer.testing import CliRunner

from coalign.cli import app
from coalign.config import ConfigError, DataSource, GenerationSettings, TinySpec, config_to_yaml, load_config
from coalign.core.endpoint_options import CriticBudget, OpenAIOptions
from coalign.core.errors import RunError
from coalign.formats.lumos import format_actions, format_subgoals, grounder_prompt, planner_prompt
from coalign.moat.sft_data import tokenizer_texts
from coalign.models import vllm_engine
from coalign.models.agents import Agent, generate
from coalign.models.backends import OpenAIBackend, VLLMBackend, make_backend
from coalign.models.load import load_model, load_tokenizer, make_tiny_model, render_prompt
from coalign.models.vllm_engine import engine_options, on_cpu
from coalign.tasks.sources import load_sources
from coalign.training.setup import check_generation, generation_settings
from tests.fault_server import KEY, Reply, Server
from tests.moat.test_baseline import TINY

SPEC = TinySpec(**TINY["models"]["tiny"])
TASKS = load_sources([DataSource(kind="suite", split="heldin", n=2)])
USERS = [
    planner_prompt(TASKS[0].question),
    grounder_prompt(TASKS[1].question, format_subgoals(TASKS[1].subgoals), "maths"),
    planner_prompt("Add 3 and 4."),
    [
        {"role": "user", "content": "Go."},
        {"role": "assistant", "content": "Subgoal 1: x"},
        {"role": "user", "content": "ok"},
    ],
    planner_prompt("What is 15 plus 27, then doubled?"),
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """An untrained tiny model with its own random output head: tied to the embeddings, a random model only
    repeats the prompt's last token, and every prompt would get the same text."""
    texts = [text for task in TASKS for text in tokenizer_texts(task)]
    path = make_tiny_model(texts, tmp_path_factory.mktemp("tiny"), SPEC, seed=0)
    model = load_model(path)
    torch.manual_seed(0)
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.lm_head.weight))
    model.save_pretrained(path)
    return path


def old_generate(model, tok, users, max_new_tokens, batch_size, n=1, temperature=0.0, top_p=1.0, seed=None):
    """`agents.generate` as it was before backends (commit 59e64e0), the oracle the HF backend must match;
    with `seed`, batch b samples from seed + b (as the backend does, so any process can compute any batch)."""
    prompts = [render_prompt(tok, u) for u in users]
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    out = [[] for _ in prompts]
    sampling = temperature > 0
    with torch.inference_mode():
        for b, start in enumerate(range(0, len(order), batch_size)):
            idx = order[start : start + batch_size]
            enc = tok([prompts[i] for i in idx], return_tensors="pt", padding=True)
            if seed is not None:
                torch.manual_seed(seed + b)
            gen = model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                do_sample=sampling,
                temperature=temperature if sampling else None,
                top_p=top_p if sampling else None,
                top_k=None,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
                num_return_sequences=n,
            )
            texts = tok.batch_decode(gen[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
            for j, i in enumerate(idx):
                out[i] = [t.strip() for t in texts[j * n : (j + 1) * n]]
    return out


# --------------------------------------------------------------------------- hf


def test_hf_backend_is_the_old_path_greedy_and_seeded(tiny):
    agent = Agent.load(str(tiny))
    assert agent.backend is None  # no generation block: the model's own generate
    greedy = generate(agent, USERS, 12, batch_size=2, progress=False)
    assert greedy == old_generate(agent.model, agent.tokenizer, USERS, 12, 2)
    assert len({g[0] for g in greedy}) > 1  # the prompts are told apart, so order is checked
    torch.manual_seed(7)
    sampled = generate(agent, USERS, 12, 2, num_return_sequences=3, temperature=1.0, top_p=0.95, progress=False)
    torch.manual_seed(7)
    seed = int(torch.randint(2**31 - 1, ()))
    assert sampled == old_generate(agent.model, agent.tokenizer, USERS, 12, 2, 3, 1.0, 0.95, seed)
    assert all(len(s) == 3 for s in sampled) and sampled != [[g[0]] * 3 for g in greedy]


def test_hf_is_the_default_and_an_explicit_hf_block_alike(tiny):
    tok = load_tokenizer(tiny)
    assert make_backend(None, str(tiny), "planner", tok) is None
    assert make_backend(GenerationSettings(backend="hf"), str(tiny), "grounder", tok) is None


# --------------------------------------------------------------------------- vllm (a fake module: no GPU here)


class FakeLLM:
    made: list[dict] = []
    calls: list[tuple] = []
    events: list[tuple] = []  # sleep, wake_up and reload_weights calls, in order
    n_out: int | None = None  # answer this many outputs per prompt instead of n

    def __init__(self, **kwargs):
        FakeLLM.made.append(kwargs)
        config = types.SimpleNamespace(max_model_len=kwargs.get("max_model_len") or 2048)
        self.llm_engine = types.SimpleNamespace(model_config=config)  # its engine core in a process of its own

    def sleep(self, level):
        FakeLLM.events.append(("sleep", level))

    def wake_up(self):
        FakeLLM.events.append(("wake_up",))

    def collective_rpc(self, method, kwargs):
        FakeLLM.events.append((method, kwargs["weights_path"]))

    def reset_prefix_cache(self):
        pass

    def generate(self, prompts, params, use_tqdm=True):
        """vLLM's contract with one SamplingParams per prompt: candidate i of a request sampled from its seed + i."""
        FakeLLM.calls.append((prompts, params, use_tqdm))
        assert len(params) == len(prompts)

        def outputs(p, kwargs):
            n = kwargs["n"] if FakeLLM.n_out is None else FakeLLM.n_out
            seeds = [None if kwargs["seed"] is None else kwargs["seed"] + i for i in range(n)]
            return [types.SimpleNamespace(index=i, text=f" {len(p)}:{i}:{seeds[i]}\n") for i in reversed(range(n))]

        return [types.SimpleNamespace(outputs=outputs(p, sp.kwargs)) for p, sp in zip(prompts, params)]


class FakeSamplingParams:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


# seeded requests on a CPU: `VLLMBackend.llm`; sleep mode on a GPU
CPU_ENGINE = {"enable_chunked_prefill": False, "enable_sleep_mode": False} if on_cpu() else {"enable_sleep_mode": True}
DEFAULTS = {"max_model_len": None, "tensor_parallel_size": 1}  # VLLMBackend's own


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM, module.SamplingParams = FakeLLM, FakeSamplingParams
    FakeLLM.made, FakeLLM.calls, FakeLLM.events, FakeLLM.n_out = [], [], [], None
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setattr(vllm_engine, "_held", None)  # this test's process engine, none before it
    # nor the real vLLM's CPU kernels, imported by an earlier test in this process: the stand-in takes any head size
    monkeypatch.setitem(sys.modules, "vllm.v1.attention.backends.cpu_attn", None)
    return module


def test_vllm_missing_is_a_clear_error_before_any_work(tiny, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` fails, as where it is not installed
    with pytest.raises(RunError, match=r"needs vLLM: .*pip install"):
        Agent.load(str(tiny), generation=GenerationSettings(backend="vllm"))
    config = load_config("tiny", {**TINY, "generation": {"backend": "vllm"}})
    with pytest.raises(RunError, match="needs vLLM"):
        check_generation(config, trains=True)
    result = CliRunner().invoke(app, ["train", _yaml(tmp_path, config), "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 2 and "needs vLLM" in result.output and not (tmp_path / "run").exists()


def test_pilotrl_rollouts_on_vllm_without_it_stop_the_run_before_its_folder(tmp_path, monkeypatch):
    """Found before the run starts, not when its GRPO stages start after the SFT."""
    import importlib.util

    from rich.console import Console

    from coalign.training.setup import prepare_run

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "vllm" else real_find_spec(name))
    config = load_config("tiny-pilotrl", {"pilotrl": {"rl": {"generation": "vllm_colocate"}}})
    with pytest.raises(RunError, match=r"^pilotrl\.rl\.generation: vllm_colocate needs vLLM"):
        prepare_run(config, tmp_path / "run", Console(quiet=True))
    assert not (tmp_path / "run").exists()


def test_vllm_asks_for_k_candidates_in_one_call_with_prefix_caching(tiny, fake_vllm):
    settings = GenerationSettings(backend="vllm", gpu_memory_utilization=0.3)
    agent = Agent.load(str(tiny), generation=settings, role="planner")
    assert isinstance(agent.backend, VLLMBackend) and FakeLLM.made == []  # started by the first generation
    torch.manual_seed(3)
    got = generate(agent, USERS, 9, batch_size=2, num_return_sequences=4, temperature=0.8, top_p=0.9, progress=False)
    ((prompts, params, tqdm),) = FakeLLM.calls
    assert prompts == [render_prompt(agent.tokenizer, u) for u in USERS] and tqdm is False  # one call, all prompts
    torch.manual_seed(3)
    seed = int(torch.randint(2**31 - 1, ()))  # the stage's seed fixes it
    assert [p.kwargs.pop("seed") for p in params] == [seed + 4 * i for i in range(len(USERS))]  # no overlap
    eos = agent.tokenizer.eos_token_id
    assert all(p.kwargs == dict(n=4, max_tokens=9, temperature=0.8, top_p=0.9, stop_token_ids=[eos]) for p in params)
    assert got == [[f"{len(p)}:{i}:{seed + 4 * j + i}" for i in range(4)] for j, p in enumerate(prompts)]  # by index
    assert FakeLLM.made == [
        dict(model=str(tiny), tokenizer=str(tiny), trust_remote_code=False, enable_prefix_caching=True,
             gpu_memory_utilization=0.3, **engine_options(tiny, bf16=False), **CPU_ENGINE, **DEFAULTS)
    ]  # fmt: skip
    greedy = agent.backend.sampling_params(9, 1, 0.0, 0.9, seed).kwargs
    assert (greedy["temperature"], greedy["top_p"], greedy["seed"]) == (0.0, 1.0, None)


def test_vllm_under_a_launcher_puts_one_engine_on_each_rank_s_gpu(tiny, fake_vllm, monkeypatch):
    """Under torchrun every rank builds an engine: vLLM's external launcher gives each its own GPU (LOCAL_RANK's)
    instead of all on cuda:0, with the same engine seed on every rank."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert VLLMBackend(str(tiny), load_tokenizer(tiny), False, 0.3, bf16=True).llm is not None
    assert FakeLLM.made == [
        dict(model=str(tiny), tokenizer=str(tiny), trust_remote_code=False, enable_prefix_caching=True,
             gpu_memory_utilization=0.3, distributed_executor_backend="external_launcher", seed=0,
             **engine_options(tiny, bf16=True), **CPU_ENGINE, **DEFAULTS)
    ]  # fmt: skip
    assert engine_options(tiny, bf16=True)["dtype"] == "bfloat16"
    assert engine_options(tiny, bf16=False)["dtype"] == "float32"  # as saved: vLLM's "auto" would take 16 bits


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_vllm_under_a_launcher_generates_its_share_and_gives_back_one_process_s_answers(
    tiny, fake_vllm, monkeypatch, temperature
):
    """Rank 1 of 2 generates only the second half of the prompts, each with the seed one process gives it, and
    returns every prompt's completions (rank 0's half gathered), as one process would."""
    from coalign.core import ranks

    tok = load_tokenizer(tiny)
    prompts = [render_prompt(tok, u) for u in USERS]
    torch.manual_seed(5)
    alone = VLLMBackend(str(tiny), tok, False, 0.3).complete(prompts, 9, 3, temperature, 0.9)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")

    class Group:  # rank 0 computed the first three prompts, as one process did
        def all_gather_object(self, parts, local):
            parts[:] = [alone[:3], local]

    monkeypatch.setattr(ranks, "_group", lambda: Group())
    FakeLLM.calls = []
    done = []
    torch.manual_seed(5)
    shared = VLLMBackend(str(tiny), tok, False, 0.3).complete(prompts, 9, 3, temperature, 0.9, done.append)
    ((asked, params, _),) = FakeLLM.calls
    assert asked == prompts[3:] and done == [2]
    seeds = [p.kwargs["seed"] for p in params]
    assert seeds == ([None, None] if temperature == 0 else [alone_seed(5) + 3 * i for i in (3, 4)])
    assert shared == alone


def test_under_a_launcher_a_rank_without_prompts_starts_its_engine_too(tiny, fake_vllm, monkeypatch):
    """vLLM's first group creation under a launcher is collective: rank 1 of 2, given one prompt (rank 0's
    share), starts its engine all the same, and generates nothing."""
    from coalign.core import ranks

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")

    class Group:  # rank 0's completion
        def all_gather_object(self, parts, local):
            parts[:] = [[["rank 0's"]], local]

    monkeypatch.setattr(ranks, "_group", lambda: Group())
    got = VLLMBackend(str(tiny), load_tokenizer(tiny), False, 0.3).complete(["hi"], 4, 1, 0.0, 1.0)
    assert got == [["rank 0's"]] and len(FakeLLM.made) == 1 and FakeLLM.calls == []


def alone_seed(stage_seed: int) -> int:
    """The seed a sampling call draws after the stage's `torch.manual_seed`."""
    torch.manual_seed(stage_seed)
    return int(torch.randint(2**31 - 1, ()))


def test_vllm_short_of_n_outputs_is_an_error(tiny, fake_vllm):
    agent = Agent.load(str(tiny), generation=GenerationSettings(backend="vllm"))
    FakeLLM.n_out = 2
    with pytest.raises(RunError, match=r"\[2\] completions, not n=3"):
        generate(agent, USERS[:2], 9, num_return_sequences=3, temperature=1.0, progress=False)


def test_vllm_refuses_an_adapter_folder_and_a_config_saving_adapters(tiny, fake_vllm, tmp_path):
    (tmp_path / "adapter_config.json").write_text("{}")
    with pytest.raises(RunError, match="LoRA adapter"):
        VLLMBackend(str(tmp_path), load_tokenizer(tiny), False, 0.4)
    with pytest.raises(ConfigError, match="lora.merge: true"):
        load_config("tiny", {**TINY, "generation": {"backend": "vllm"}, "lora": {"merge": False}})


def test_the_engine_takes_the_run_s_lengths_and_tensor_parallel_size(tiny, fake_vllm):
    """MOAT's engine holds the longest trained sequence plus the most new tokens (Qwen2.5-14B's config: 1,024 +
    512, not its 131,072 positions), pilotrl's its episode budget, a given length as given; within the model's
    positions; over `tensor_parallel_size` GPUs."""
    paper = load_config("paper-moat-qwen2.5-14b", {"generation": {"backend": "vllm"}})
    assert generation_settings(paper).max_model_len == 1024 + 512
    given = load_config("paper-moat-qwen2.5-14b", {"generation": {"backend": "vllm", "max_model_len": 4096}})
    assert generation_settings(given).max_model_len == 4096
    pilotrl = load_config("tiny-pilotrl", {"generation": {"backend": "vllm"}})
    assert generation_settings(pilotrl).max_model_len == pilotrl.pilotrl.max_context
    assert generation_settings(load_config("tiny", TINY)) is None  # hf: nothing to size
    settings = GenerationSettings(backend="vllm", max_model_len=300, tensor_parallel_size=2)
    agent = Agent.load(str(tiny), generation=settings)
    generate(agent, USERS[:1], 4, progress=False)
    (made,) = FakeLLM.made
    assert (made["max_model_len"], made["tensor_parallel_size"]) == (300, 2)
    assert SPEC.max_positions == 1024
    capped = VLLMBackend(str(tiny), agent.tokenizer, False, 0.4, max_model_len=1536)
    assert capped.max_model_len == 1024  # the model's positions


def test_one_engine_serves_both_agents_their_weights_swapped_and_hf_models_unloaded(tiny, fake_vllm, monkeypatch):
    """The planner and the grounder of one base in one engine, each call's agent's weights reloaded into it
    (by path: this stand-in runs in a process of its own, as a GPU engine of one process does); their HF models
    are never loaded by generation, and the grounder's is loaded when scoring asks for it."""
    from coalign.models import agents

    loaded, real_load = [], agents.load_model
    monkeypatch.setattr(agents, "load_model", lambda path, **kw: loaded.append(str(path)) or real_load(path, **kw))
    settings = GenerationSettings(backend="vllm")
    planner = Agent.load(str(tiny), generation=settings, role="planner")
    grounder_path = tiny.parent / "grounder"
    if not grounder_path.exists():
        shutil.copytree(tiny, grounder_path)
    grounder = Agent.load(str(grounder_path), generation=settings, role="grounder")
    for agent in (planner, grounder, grounder, planner):
        generate(agent, USERS[:2], 4, progress=False)
    assert len(FakeLLM.made) == 1 and FakeLLM.made[0]["model"] == str(tiny)
    reloads = [path for event, *path in FakeLLM.events if event == "reload_weights"]
    assert reloads == [[str(grounder_path)], [str(tiny)]]  # a swap where the agent changes
    assert loaded == []
    assert grounder.model is not None and loaded == [str(grounder_path)]  # scoring's model, loaded once asked


def test_a_moat_evaluation_runs_both_agents_on_one_engine(tiny, fake_vllm, monkeypatch, tmp_path):
    """`coalign eval` of a planner and a grounder under vLLM: one engine, each agent's weights swapped into it
    where the agents alternate (plans, then the grounder on the planner's, gold and blanked subgoals); only the
    grounder's HF model is loaded, for the grounding perplexity, and the planner's never."""
    import importlib.machinery

    from coalign.models import agents

    monkeypatch.setattr(fake_vllm, "__spec__", importlib.machinery.ModuleSpec("vllm", None))  # installed, to the checks
    monkeypatch.setitem(sys.modules, "vllm.v1.attention.backends.cpu_attn", None)
    loaded, real_load = [], agents.load_model
    monkeypatch.setattr(agents, "load_model", lambda path, **kw: loaded.append(str(path)) or real_load(path, **kw))
    planner, grounder = tmp_path / "planner", tmp_path / "grounder"
    shutil.copytree(tiny, planner)
    shutil.copytree(tiny, grounder)
    data = {**TINY["data"], "heldin": [{"kind": "suite", "split": "heldin", "n": 2}], "heldout": []}
    config = load_config("tiny", {**TINY, "data": data, "generation": {"backend": "vllm"}})
    run_dir = tmp_path / "run"
    args = ["eval", _yaml(tmp_path, config), "--run-dir", str(run_dir), "--planner", str(planner)]
    result = CliRunner().invoke(app, [*args, "--grounder", str(grounder)])
    assert result.exit_code == 0, result.output
    assert [made["model"] for made in FakeLLM.made] == [str(planner)]
    reloads = [path for event, path in FakeLLM.events if event == "reload_weights"]
    assert reloads == [str(grounder)]  # the planner's plans, then every grounder call
    assert len(FakeLLM.calls) == 4  # plans; the grounder on them, on gold and on blanked subgoals
    assert loaded == [str(grounder)]


def test_an_engine_another_model_or_length_cannot_use_is_refused(tiny, fake_vllm, tmp_path):
    """One engine a process: a checkpoint of another shape, or longer sequences than it was started for, is a
    clear error and no second engine."""
    tok = load_tokenizer(tiny)
    VLLMBackend(str(tiny), tok, False, 0.4, max_model_len=256).complete(["hi"], 4, 1, 0.0, 1.0)
    with pytest.raises(RunError, match=r"sequences of 512 tokens .* started for 256; set one length"):
        VLLMBackend(str(tiny), tok, False, 0.4, max_model_len=512).complete(["hi"], 4, 1, 0.0, 1.0)
    other = make_tiny_model(["a b c"], tmp_path / "other", SPEC.model_copy(update={"num_layers": 2}), seed=0)
    with pytest.raises(RunError, match=r"holds .*, which differs in num_hidden_layers .*give both agents one base"):
        VLLMBackend(str(other), load_tokenizer(other), False, 0.4).complete(["hi"], 4, 1, 0.0, 1.0)
    assert len(FakeLLM.made) == 1


def test_what_one_engine_a_process_cannot_serve_is_refused_before_any_work(monkeypatch):
    """Tensor parallelism under a launcher, a planner and a grounder of different shapes, and a GRPO engine in
    another precision than the evaluation that reuses it."""
    monkeypatch.setitem(sys.modules, "vllm.v1.attention.backends.cpu_attn", None)  # heads of any size, as on a GPU
    config = load_config("tiny", {**TINY, "generation": {"backend": "vllm", "tensor_parallel_size": 2}})
    check_generation(config, trains=True)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(RunError, match=r"tensor_parallel_size 2 with 2 processes: under a launcher"):
        check_generation(config, trains=True)
    monkeypatch.delenv("WORLD_SIZE")
    wider = {**TINY, "models": {**TINY["models"], "planner": "coalign-base-2"}, "generation": {"backend": "vllm"}}
    with pytest.raises(RunError, match=r"models.planner coalign-base-2 and models.grounder scratch differ in shape"):
        check_generation(load_config("tiny", wider), trains=True)
    rl = {"generation": "vllm_colocate", "bf16": True}
    mixed = load_config("tiny-pilotrl", {"pilotrl": {"rl": rl}, "generation": {"backend": "vllm"}, "bf16": False})
    with pytest.raises(RunError, match=r"pilotrl.rl.bf16 samples in bf16, the evaluation in the saved dtype"):
        check_generation(mixed, trains=True)


def test_on_a_gpu_the_engine_sleeps_outside_generation_phases(tiny, fake_vllm, monkeypatch):
    """Sleep mode where vLLM has it: started asleep unless a phase is on, woken once per phase however many
    calls it holds (a loop of turns), asleep again after it."""
    monkeypatch.setattr(vllm_engine, "on_cpu", lambda: False)
    tok = load_tokenizer(tiny)
    backend = VLLMBackend(str(tiny), tok, False, 0.4)
    assert backend.llm is not None and FakeLLM.made[0]["enable_sleep_mode"] is True
    assert FakeLLM.events == [("sleep", 1)]
    FakeLLM.events.clear()
    with backend.phase():
        for _ in range(3):
            backend.complete(["hi"], 4, 1, 0.0, 1.0)
    assert FakeLLM.events == [("wake_up",), ("sleep", 1)]
    FakeLLM.events.clear()
    backend.complete(["hi"], 4, 1, 0.0, 1.0)
    assert FakeLLM.events == [("wake_up",), ("sleep", 1)]


# --------------------------------------------------------------------------- openai-compatible server


def served(server: Server, **options) -> GenerationSettings:
    """The openai block for the loopback server, serving the planner as planner-m and the grounder as grounder-m."""
    endpoints = {role: {"base_url": server.url, "model": f"{role}-m"} for role in ("planner", "grounder")}
    return GenerationSettings(backend="openai", api_key_env="COALIGN_TEST_KEY", **endpoints, **options)


def backend(server: Server, max_retries: int = 1, max_concurrency: int = 4) -> OpenAIBackend:
    """A backend with a short back-off (the config's is the critic's default, 1 s and up)."""
    endpoint = OpenAIOptions(server.url, "m", api_key_env="COALIGN_TEST_KEY", timeout_s=5)
    budget = CriticBudget(max_concurrency=max_concurrency, max_retries=max_retries, backoff_s=0.01, max_delay_s=0.05)
    return OpenAIBackend(endpoint, budget, stop="</s>")


def test_server_gets_the_hf_paths_prompts_and_gives_n_candidates_in_order(tiny, server):
    server.models = [{"id": "planner-m", "root": str(tiny)}]
    agent = Agent.load(str(tiny), generation=served(server, max_concurrency=2), role="planner")
    got = generate(agent, USERS, 11, batch_size=1, num_return_sequences=3, temperature=0.7, top_p=0.9, progress=False)
    rendered = [render_prompt(agent.tokenizer, u) for u in USERS]
    assert got == [[f"{p}#{i}" for i in range(3)] for p in rendered]
    assert sorted(b["prompt"] for b in server.bodies) == sorted(rendered)
    sent = {k: v for k, v in server.bodies[0].items() if k != "prompt"}
    eos = agent.tokenizer.eos_token
    assert sent == {"model": "planner-m", "n": 3, "temperature": 0.7, "top_p": 0.9, "max_tokens": 11, "stop": [eos]}
    assert server.auth == [f"Bearer {KEY}"] * (1 + len(USERS))  # the model listing, then one request per prompt
    assert KEY not in repr(agent.backend) and KEY not in repr(agent)


def test_concurrency_is_bounded(server):
    server.default = Reply(delay_s=0.05)
    backend(server, max_concurrency=2).complete([f"p{i}" for i in range(8)], 4, 1, 0.0, 1.0)
    assert server.max_in_flight == 2


def test_choices_are_put_in_index_order(server):
    server.script = [Reply(None, raw=b'{"choices": [{"index": 1, "text": "b "}, {"index": 0, "text": " a"}]}')]
    assert backend(server).complete(["p"], 4, 2, 1.0, 1.0) == [["a", "b"]]


def test_a_500_is_retried_then_reported_with_the_endpoint(server):
    server.script = [Reply(status=500)]
    assert backend(server).complete(["p"], 4, 1, 0.0, 1.0) == [["p#0"]]
    server.script = [Reply(status=500)] * 3
    with pytest.raises(RunError, match=rf"{server.url}/completions: http 500 after 2 tries"):
        backend(server).complete(["p"], 4, 1, 0.0, 1.0)
    assert len(server.bodies) == 4


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b"<html>busy</html>", "not JSON"),
        (b'{"choices": [{"index": 0, "text": "a\\ud800"}, {"index": 1, "text": "b"}]}', "not valid Unicode"),
        (b'{"choices": [{"text": "no index"}]}', "malformed reply"),
        (b'{"error": "overloaded"}', "malformed reply"),
        (b'{"choices": [{"index": 0, "text": "one"}]}', "holds 1 choices, asked for n=2"),
        (b'{"choices": [{"index": 0, "text": "a"}, {"index": 0, "text": "a"}]}', "holds 2 choices, asked for n=2"),
        (b'{"choices": [{"index": 0, "text": "a"}, {"index": 1, "text": null}]}', "asked for n=2"),
    ],
)
def test_a_malformed_or_short_reply_is_an_error_naming_the_endpoint(server, raw, error):
    server.script = [Reply(None, raw=raw)]
    with pytest.raises(RunError, match=error) as info:
        backend(server).complete(["p"], 4, 2, 1.0, 1.0)
    assert str(info.value).startswith(f"{server.url}/completions: ")
    assert len(server.bodies) == 1  # not retried: the same request would get the same answer


def test_the_key_goes_in_a_header_and_never_into_an_error(server):
    server.script = [Reply(status=400, echo_auth=True)]
    with pytest.raises(RunError) as info:
        backend(server).complete(["p"], 4, 1, 0.0, 1.0)
    assert server.auth == [f"Bearer {KEY}"] and "***" in str(info.value) and KEY not in str(info.value)
    assert all(KEY not in json.dumps(b) for b in server.bodies)


def test_the_served_model_must_be_the_checkpoint(tiny, server, tmp_path):
    tok = load_tokenizer(tiny)
    server.models = [{"id": "other", "root": str(tiny)}]
    with pytest.raises(RunError, match=r"/models: the server serves \['other'\], not 'planner-m'"):
        make_backend(served(server), str(tiny), "planner", tok)
    server.models = [{"id": "planner-m", "root": str(tmp_path)}]  # another folder on this machine
    with pytest.raises(RunError, match="not the checkpoint to evaluate"):
        make_backend(served(server), str(tiny), "planner", tok)
    server.models = [{"id": "planner-m", "root": "/on/the/server/only"}, {"id": "grounder-m"}]
    assert isinstance(make_backend(served(server), str(tiny), "planner", tok), OpenAIBackend)
    assert isinstance(make_backend(served(server), str(tiny), "grounder", tok), OpenAIBackend)


# --------------------------------------------------------------------------- config


def _yaml(tmp_path, config) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(config_to_yaml(config))
    return str(path)


def _write(tmp_path, generation: str) -> str:
    path = tmp_path / "g.yaml"
    path.write_text("name: g\ndata:\n  train:\n    - {kind: suite, split: train, n: 2}\ngeneration:\n" + generation)
    return str(path)


def test_a_generation_block_validates_and_is_saved_only_when_given(tmp_path):
    config = load_config(
        _write(
            tmp_path,
            "  backend: openai\n  planner: {base_url: 'http://127.0.0.1:8000/v1', model: p}\n"
            "  grounder: {base_url: 'http://127.0.0.1:8001/v1', model: g}\n  api_key_env: MY_KEY\n  timeout_s: 30\n",
        )
    )
    g = config.generation
    assert (g.backend, g.planner.model, g.grounder.base_url, g.api_key_env, g.timeout_s) == (
        "openai", "p", "http://127.0.0.1:8001/v1", "MY_KEY", 30
    )  # fmt: skip
    assert yaml.safe_load(config_to_yaml(config))["generation"]["planner"]["model"] == "p"
    assert "generation" not in config_to_yaml(load_config("tiny"))  # runs saved before the block resume


@pytest.mark.parametrize(
    ("generation", "line", "key", "message"),
    [
        ("  backend: openai\n  api_key: sk-live-123\n", 7, "generation.api_key", "a secret is refused"),
        ("  backend: vllm\n  gpu_memory: 0.5\n", 7, "generation.gpu_memory", "unknown key"),
        ("  backend: openai\n  planner: {model: p}\n  grounder: {base_url: 'http://h/v1', model: g}\n", 7,
         "generation.planner.base_url", "Field required"),
        ("  backend: openai\n  planner: {base_url: 'http://u:pw@h/v1', model: p}\n", 7,
         "generation.planner.base_url", "must not hold credentials"),
        ("  backend: openai\n  planner: {base_url: 'http://h/v1', model: p}\n", 5, "generation",
         "needs generation.grounder"),
        ("  backend: hf\n  timeout_s: 5\n", 5, "generation", "generation.timeout_s does not apply to backend hf"),
        ("  backend: vllm\n  tensor_parallel_size: 0\n", 7, "generation.tensor_parallel_size",
         "greater than or equal to 1"),
        ("  backend: hf\n  tensor_parallel_size: 2\n", 5, "generation",
         "generation.tensor_parallel_size does not apply to backend hf"),
        ("  backend: sglang\n", 6, "generation.backend", "'hf', 'vllm' or 'openai'"),
    ],
)  # fmt: skip
def test_a_bad_generation_block_names_file_line_and_key(tmp_path, generation, line, key, message):
    path = _write(tmp_path, generation)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    text = str(err.value)
    assert f"{path}, line {line}: field '{key}'" in text and message in text and "sk-live-123" not in text


def test_training_with_a_server_is_refused_before_any_work(tmp_path):
    endpoint = {"base_url": "http://127.0.0.1:9/v1", "model": "m"}
    generation = {"backend": "openai", "planner": endpoint, "grounder": endpoint}
    config = load_config("tiny", {**TINY, "generation": generation})
    check_generation(config, trains=False)
    result = CliRunner().invoke(app, ["train", _yaml(tmp_path, config), "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 2 and "coalign eval --planner P --grounder G" in result.output
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match="pilotrl's episodes are written token by token"):
        load_config("tiny-pilotrl", {"generation": generation})
    assert load_config("tiny-pilotrl", {"generation": {"backend": "vllm"}}).generation.backend == "vllm"


# --------------------------------------------------------------------------- coalign eval on loopback


def test_coalign_eval_generates_on_the_servers(tiny, server, tmp_path):
    """Tiny untrained local models, servers that answer each task's gold plan and actions: a perfect score says
    every text evaluated came from the servers, and each request holds the prompt the HF path renders."""
    planner, grounder = tmp_path / "planner", tmp_path / "grounder"
    shutil.copytree(tiny, planner)
    shutil.copytree(tiny, grounder)
    server.models = [{"id": "planner-m", "root": str(planner)}, {"id": "grounder-m", "root": str(grounder)}]
    by_question = {t.question: t for t in TASKS}

    def gold(body: dict) -> list[str]:
        task = next(t for q, t in by_question.items() if q in body["prompt"])
        if body["model"] == "planner-m":
            return [format_subgoals(task.subgoals)] * body["n"]
        return [format_actions(list(task.actions))] * body["n"]

    server.completions = gold
    config = load_config(
        "tiny",
        {
            **TINY,
            "data": {**TINY["data"], "heldin": [{"kind": "suite", "split": "heldin", "n": 2}], "heldout": []},
            "generation": {
                "backend": "openai",
                "planner": {"base_url": server.url, "model": "planner-m"},
                "grounder": {"base_url": server.url, "model": "grounder-m"},
                "api_key_env": "COALIGN_TEST_KEY",
            },
        },
    )
    run_dir = tmp_path / "run"
    args = ["eval", _yaml(tmp_path, config), "--run-dir", str(run_dir)]
    result = CliRunner().invoke(app, [*args, "--planner", str(planner), "--grounder", str(grounder)])
    assert result.exit_code == 0, result.output
    (folder,) = run_dir.glob("eval-*")
    metrics = json.loads((folder / "eval" / "metrics.json").read_text())["heldin"]["sets"]["suite-heldin"]
    assert metrics["accuracy"] == metrics["grounder_acc_gold_subgoals"] == 1.0 and metrics["n"] == 2
    tok = load_tokenizer(planner)
    planner_prompts = sorted(b["prompt"] for b in server.bodies if b["model"] == "planner-m")
    assert planner_prompts == sorted(render_prompt(tok, planner_prompt(t.question)) for t in TASKS)
    assert sum(b["model"] == "grounder-m" for b in server.bodies) == 3 * len(TASKS)  # planner's, gold, blanked
    assert all(auth == f"Bearer {KEY}" for auth in server.auth)
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert files and not any(KEY.encode() in p.read_bytes() for p in files) and KEY not in result.output
    assert metrics["grounding_ppl"] > 1  # scored by the local grounder: a server gives no likelihoods


def test_an_eval_that_fails_before_any_result_leaves_no_folder(tiny, tmp_path):
    """Servers that are not up: each try fails, and none leaves an eval-<time>/ folder (nor the run folder it
    would have been made in) behind."""
    down = {"base_url": "http://127.0.0.1:9/v1", "model": "m"}
    generation = {"backend": "openai", "planner": down, "grounder": down, "max_retries": 0, "timeout_s": 5}
    config = load_config("tiny", {**TINY, "generation": generation})
    run_dir = tmp_path / "runs" / "run"
    args = ["eval", _yaml(tmp_path, config), "--run-dir", str(run_dir), "--planner", str(tiny), "--grounder", str(tiny)]
    for _ in range(2):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2 and "127.0.0.1:9" in result.output, result.output
    assert not (tmp_path / "runs").exists()


def test_eval_of_a_finished_run_with_a_generation_block_needs_no_force(tiny, tmp_path):
    """The generation backend is how an evaluation writes its text, not what the run trained: the run's saved
    config is left as training wrote it, and no --force is needed."""
    from coalign.core.runs import Run
    from coalign.training.setup import record_config

    trained = load_config("tiny", {**TINY, "data": {**TINY["data"], "heldout": []}})
    run_dir = tmp_path / "run"
    for agent in ("planner", "grounder"):
        shutil.copytree(tiny, run_dir / "checkpoints" / f"{agent}_sft")
    run = Run(run_dir)
    record_config(run, trained)
    run.mark_done("planner_sft", [run_dir / "checkpoints" / "planner_sft"])
    saved = (run_dir / "config.yaml").read_bytes()
    args = ["eval", _yaml(tmp_path, trained), "--run-dir", str(run_dir), "--set", "generation.backend=hf"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert (run_dir / "config.yaml").read_bytes() == saved and not (run_dir / "config.history").exists()
    assert json.loads((run_dir / "eval" / "metrics.json").read_text())["heldin"]["sets"]
    assert json.loads((run_dir / "stages" / "eval.json").read_text())["settings"]["generation"]["backend"] == "hf"
