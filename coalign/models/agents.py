"""The two agents as models: prompting and batched generation.

The planner maps a task to a subgoal sequence, the grounder maps (task, tools, subgoals) to an
action sequence; both are plain causal LMs prompted in Lumos's formats. Their text comes from the
agent's generation backend (`backends`: the model's own generate unless the config says vllm or openai).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from coalign.core.console import NoBar, progress_bar
from coalign.formats.lumos import format_actions, format_subgoals, grounder_prompt, planner_prompt
from coalign.models.backends import Backend, HFBackend, Role, make_backend
from coalign.models.load import inference_device, load_model, load_tokenizer, render_prompt
from coalign.tasks import Task

if TYPE_CHECKING:
    from coalign.config import GenerationSettings


class Agent:
    """A model with its tokenizer (padded left for generation), and where its text comes from: `backend` None is
    the model's own batched generate. With `load` in place of a model, the model is loaded at its first use."""

    def __init__(
        self, model: object, tokenizer: object, backend: Backend | None = None, load: Callable[[], object] | None = None
    ):
        self._model, self.tokenizer, self.backend, self._load = model, tokenizer, backend, load

    @property
    def model(self) -> object:
        """The model (loaded now where it was not yet)."""
        if self._model is None:
            self._model = self._load()
        return self._model

    @classmethod
    def load(
        cls,
        path: str,
        trust_remote_code: bool = False,
        generation: GenerationSettings | None = None,
        role: Role = "planner",
        bf16: bool = False,
    ) -> "Agent":
        """The checkpoint at `path`, its text from the backend `generation` (the config's block) names; `role`
        picks the agent's server under the openai backend. Scoring (stage 1's rewards, grounding PPL) needs the
        model's likelihoods, which no backend here gives: under a backend the model is loaded only when scoring
        first asks for it, so that it takes no GPU memory beside vLLM's engine where nothing scores. `bf16`: its
        weights in bf16 (the run's decision, `training.setup.inference_bf16`), else as saved."""
        tokenizer = load_tokenizer(path, trust_remote_code)
        backend = make_backend(generation, str(path), role, tokenizer, trust_remote_code, bf16)

        def load() -> object:
            dtype = "bfloat16" if bf16 else "auto"
            return load_model(path, trust_remote_code=trust_remote_code, dtype=dtype).to(inference_device())

        return cls(None, tokenizer, backend, load) if backend else cls(load(), tokenizer)


def generate(
    agent: Agent,
    users: Sequence[str | Sequence[dict[str, str]]],
    max_new_tokens: int,
    batch_size: int = 32,
    num_return_sequences: int = 1,
    temperature: float = 0.0,
    top_p: float = 1.0,
    desc: str = "generating",
    progress: bool = True,
) -> list[list[str]]:
    """Complete each user turn (or conversation so far, ending with a user turn); returns
    `num_return_sequences` texts per prompt, in input order.

    Prompts are rendered here (`render_prompt`), so every backend continues the same text. temperature 0 is
    greedy decoding. `batch_size`: prompts per `model.generate` call of the default backend (vLLM and a server
    schedule their own). `progress` False shows no bar (a caller with its own).
    """
    prompts = [render_prompt(agent.tokenizer, u) for u in users]
    backend = agent.backend or HFBackend(agent.model, agent.tokenizer, batch_size)
    with progress_bar() if progress else NoBar() as bar:
        task = bar.add_task(desc, total=len(prompts))
        return backend.complete(
            prompts, max_new_tokens, num_return_sequences, temperature, top_p, lambda done: bar.advance(task, done)
        )


def plan(planner: Agent, questions: Sequence[str], max_new_tokens: int, batch_size: int) -> list[str]:
    """Greedy subgoal sequence for each task."""
    users = [planner_prompt(q) for q in questions]
    return [o[0] for o in generate(planner, users, max_new_tokens, batch_size, desc="planner")]


def ground(
    grounder: Agent,
    tasks: Sequence[Task],
    subgoal_texts: Sequence[str],
    max_new_tokens: int,
    batch_size: int,
    desc: str = "grounder",
) -> list[str]:
    """Greedy action sequence for each (task, subgoals) pair, prompted with the task family's tool list."""
    users = [grounder_prompt(t.question, s, t.family) for t, s in zip(tasks, subgoal_texts, strict=True)]
    return [o[0] for o in generate(grounder, users, max_new_tokens, batch_size, desc=desc)]


def planner_example(question: str, subgoals: Sequence[str]) -> tuple[str, str]:
    """(user turn, completion) for planner SFT."""
    return planner_prompt(question), format_subgoals(list(subgoals))


def grounder_example(question: str, subgoals: Sequence[str], actions: Sequence[str], domain: str = "maths"):
    """(user turn, completion) for grounder SFT."""
    return grounder_prompt(question, format_subgoals(list(subgoals)), domain), format_actions(list(actions))
