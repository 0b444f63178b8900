"""Where planner and grounder text comes from: one interface over the model's own `generate`, vLLM's offline
engine and an OpenAI-compatible server.

A backend completes *rendered* prompts (the text `load.render_prompt` makes, once, in `agents.generate`), so
all three continue the same string, and returns `n` stripped completions per prompt, in input order. The
config's `generation` block picks one for the lumos and moat recipes, pilotrl's evaluation and `coalign eval`
(`make_backend`):

- `hf` (default): batched `model.generate`.
- `vllm`: the checkpoint in vLLM's engine (`vllm_engine`: a GPU, or a CPU with vLLM's CPU build), every
  prompt in one call with its `n` candidates as one request, prefix caching on, so a task's K samples and
  prompts sharing a prefix reuse its KV cache. PilotRL's episodes take their turns from it as token ids
  (`VLLMBackend.turns`).
- `openai`: a server's `/completions` (`vllm serve`, SGLang) through the LLM critic's HTTP client. A server
  holds one fixed checkpoint while a training run changes its models every stage, so runs that train refuse
  it (`training.setup.check_generation`) and it serves `coalign eval` of finished checkpoints, each checked
  against what the server says it loaded (`OpenAIBackend.check_served`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

import torch

from coalign.core import ranks
from coalign.core.endpoint_options import CriticBudget, OpenAIOptions
from coalign.core.errors import RunError
from coalign.models.endpoint import RETRYABLE, CallError, request_json, retry_delay
from coalign.models.load import is_adapter
from coalign.models.vllm_engine import awake, engine, folder_config, import_vllm, on_cpu

if TYPE_CHECKING:
    from coalign.config import GenerationSettings

Role = Literal["planner", "grounder"]
Advance = Callable[[int], None]  # told how many more prompts are done (a progress bar)


def _quiet(done: int) -> None:
    return None


class Backend(Protocol):
    def complete(
        self,
        prompts: Sequence[str],
        max_new_tokens: int,
        n: int,
        temperature: float,
        top_p: float,
        advance: Advance = _quiet,
    ) -> list[list[str]]:
        """`n` completions of each rendered prompt, stripped, in input order; temperature 0 is greedy."""
        ...


def decoding(tokenizer, max_new_tokens: int, temperature: float, top_p: float) -> dict:
    """`generate` settings: greedy at temperature 0, else sampling with nucleus `top_p` (no top-k)."""
    sampling = temperature > 0
    return dict(
        max_new_tokens=max_new_tokens,
        do_sample=sampling,
        temperature=temperature if sampling else None,
        top_p=top_p if sampling else None,
        top_k=None,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )


class HFBackend:
    """The model's own `generate` on batches of `batch_size` prompts, sorted by length so little compute goes
    to padding. Sampling seeds each batch from one draw of torch's generator (a stage's `torch.manual_seed`)
    plus its index, so a batch samples the same whichever process of a multi-process run computes it
    (`ranks.share`: each rank generates a contiguous run of the batches)."""

    def __init__(self, model, tokenizer, batch_size: int = 32):
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size

    @torch.inference_mode()
    def complete(
        self,
        prompts: Sequence[str],
        max_new_tokens: int,
        n: int,
        temperature: float,
        top_p: float,
        advance: Advance = _quiet,
    ) -> list[list[str]]:
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        batches = [order[start : start + self.batch_size] for start in range(0, len(order), self.batch_size)]
        seed = int(torch.randint(2**31 - 1, ())) if temperature > 0 else 0
        settings = decoding(self.tokenizer, max_new_tokens, temperature, top_p)

        def batch(b: int) -> list[list[str]]:
            texts = self._generate([prompts[i] for i in batches[b]], settings, n, seed + b)
            advance(len(batches[b]))
            return texts

        out: list[list[str]] = [[] for _ in prompts]
        for idx, texts in zip(batches, ranks.share(batch, range(len(batches)))):
            for i, completions in zip(idx, texts):
                out[i] = completions
        return out

    def _generate(self, prompts: list[str], settings: dict, n: int, seed: int) -> list[list[str]]:
        tok, model = self.tokenizer, self.model
        enc = tok(prompts, return_tensors="pt", padding=True)  # special tokens as TRL trains
        enc = {k: v.to(model.device) for k, v in enc.items()}
        cuda = [model.device.index or 0] if model.device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda):
            torch.manual_seed(seed)
            gen = model.generate(**enc, **settings, num_return_sequences=n)
        texts = tok.batch_decode(gen[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        return [[t.strip() for t in texts[j * n : (j + 1) * n]] for j in range(len(prompts))]


class VLLMBackend:
    """A checkpoint in vLLM's offline engine: all prompts in one `generate` call, `n` candidates per request,
    prefix caching on. It decodes as `decoding` does (greedy at temperature 0, else nucleus `top_p`, no
    top-k, stop at the tokenizer's EOS); a sampling call draws one seed from torch's generator, so the
    stage's `torch.manual_seed` fixes vLLM's samples too, and prompt i samples from that seed + i * n (vLLM
    seeds candidate j of a request from its seed + j), whichever process computes it.

    Under a launcher (torchrun, accelerate: several processes) each rank holds its own engine on its own GPU
    (vLLM's `external_launcher` executor, which takes the device from LOCAL_RANK), generates its contiguous
    share of the prompts (`ranks.share_all`) and every rank gets all completions back, in input order, as one
    process would have computed them.

    The engine is the process's one (`vllm_engine.engine`), this checkpoint's weights reloaded into it at each
    call that generates, so the planner and the grounder take turns in it: an agent loaded only to score (a
    grounder's perplexity) never starts or loads it. `max_model_len`: the longest prompt and completion it
    holds (within the model's positions); `tensor_parallel_size`: GPUs it spreads the model over."""

    def __init__(
        self,
        path: str,
        tokenizer,
        trust_remote_code: bool,
        gpu_memory_utilization: float,
        bf16: bool = False,
        max_model_len: int | None = None,
        tensor_parallel_size: int = 1,
    ):
        vllm = import_vllm()
        if is_adapter(path):
            raise RunError(f"{path} is a LoRA adapter; generation.backend vllm loads whole models (lora.merge: true)")
        self.sampling, self.eos_token_id = vllm.SamplingParams, tokenizer.eos_token_id
        self.path, self.trust_remote_code, self.bf16 = path, trust_remote_code, bf16
        self.gpu_memory_utilization, self.tensor_parallel_size = gpu_memory_utilization, tensor_parallel_size
        positions = folder_config(path).get("max_position_embeddings")
        if isinstance(positions, int) and max_model_len is not None:
            max_model_len = min(max_model_len, positions)
        self.max_model_len = max_model_len

    @property
    def llm(self):
        """The process's engine holding this checkpoint's weights (started by the first use; on a GPU asleep
        outside `vllm_engine.awake`)."""
        # Several processes: one engine per rank, tensor parallel 1, on the GPU of its LOCAL_RANK (vLLM's mode
        # for torchrun-launched data parallel; left to its default executor, every rank's engine lands on
        # cuda:0). The engine seed is the same on every rank, as vLLM asks; requests carry their own anyway.
        launched = ranks.world_size() > 1
        options = {"distributed_executor_backend": "external_launcher", "seed": 0} if launched else {}
        if on_cpu():  # a prompt's prefill split over steps rewinds its request's seeded generator, which on a
            options["enable_chunked_prefill"] = False  # CPU fails ("CPU Generator does not use offset")
        return engine(
            self.path, self.trust_remote_code, self.bf16, enable_prefix_caching=True,
            gpu_memory_utilization=self.gpu_memory_utilization, max_model_len=self.max_model_len,
            tensor_parallel_size=self.tensor_parallel_size, **options,
        )  # fmt: skip

    def sampling_params(self, max_new_tokens: int, n: int, temperature: float, top_p: float, seed: int):
        """vLLM's settings for one request, its candidates sampled from `seed` (greedy at temperature 0: none)."""
        sampling = temperature > 0
        return self.sampling(
            n=n,
            max_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p if sampling else 1.0,
            stop_token_ids=[self.eos_token_id],
            seed=seed if sampling else None,
        )

    def complete(
        self,
        prompts: Sequence[str],
        max_new_tokens: int,
        n: int,
        temperature: float,
        top_p: float,
        advance: Advance = _quiet,
    ) -> list[list[str]]:
        seed = int(torch.randint(2**31 - 1, ())) if temperature > 0 else 0  # drawn alike on every rank

        def mine(indices: list[int]) -> list[list[str]]:
            if not indices:
                return []
            params = [self.sampling_params(max_new_tokens, n, temperature, top_p, seed + i * n) for i in indices]
            results = self.llm.generate([prompts[i] for i in indices], params, use_tqdm=False)
            out = [[c.text.strip() for c in sorted(r.outputs, key=lambda c: c.index)] for r in results]
            if len(out) != len(indices) or any(len(texts) != n for texts in out):
                counts = sorted({len(texts) for texts in out})
                raise RunError(
                    f"vLLM answered {len(out)} of {len(indices)} prompts with {counts} completions, not n={n}"
                )
            advance(len(indices))
            return out

        with self.phase():  # on every rank, prompts or none
            return ranks.share_all(mine, range(len(prompts)))

    @contextmanager
    def phase(self) -> Iterator[object]:
        """A generation phase of this agent (`vllm_engine.awake`): the engine, its weights this checkpoint's from
        the start. Entered on every rank at once: the engine's start is collective (`vllm_engine.engine`), and a
        rank without prompts of its own would otherwise leave the others waiting for it."""
        with awake():
            yield self.llm

    def turns(
        self, batch: Sequence[list[int]], max_new_tokens: int, temperature: float, top_p: float
    ) -> list[list[int]]:
        """A turn writer (`turn_writers.TurnWriter`): each context's completion ids through its end of sequence,
        all contexts in one call, so that vLLM batches the episodes' turns as it schedules and its prefix cache
        keeps an episode's context from one turn to the next. Seeded as `complete` (context i: seed + i). Called
        for one rank's episodes only: under several processes the caller's loop runs inside `phase`, entered on
        every rank."""
        seed = int(torch.randint(2**31 - 1, ())) if temperature > 0 else 0
        params = [self.sampling_params(max_new_tokens, 1, temperature, top_p, seed + i) for i in range(len(batch))]
        with awake():
            results = self.llm.generate([{"prompt_token_ids": list(ids)} for ids in batch], params, use_tqdm=False)
        return [through_eos(r.outputs[0].token_ids, self.eos_token_id) for r in results]


def through_eos(ids: Sequence[int], eos_id: int) -> list[int]:
    """`ids` through their first end-of-sequence token (all of them where none)."""
    ids = list(ids)
    return ids[: ids.index(eos_id) + 1] if eos_id in ids else ids


class OpenAIBackend:
    """A served checkpoint's `/completions` (`vllm serve`, SGLang): one request per prompt with its `n`
    candidates, at most `budget.max_concurrency` in flight. Calls go through the LLM critic's client
    (`models.endpoint.request_json`: timeout, the key from `api_key_env` in a header only, no redirects) and its
    retry rule (timeouts, connection errors, 429 and 5xx retried `budget.max_retries` times with back-off).

    Anything short of `n` well-formed choices is a RunError naming the endpoint: a prompt silently given fewer
    candidates would change what is compared or scored."""

    def __init__(self, endpoint: OpenAIOptions, budget: CriticBudget, stop: str):
        self.endpoint, self.budget, self.stop = endpoint, budget, stop
        self.url = endpoint.base_url.rstrip("/")

    def __repr__(self) -> str:
        return f"OpenAIBackend({self.url}, model={self.endpoint.model!r})"

    def complete(
        self,
        prompts: Sequence[str],
        max_new_tokens: int,
        n: int,
        temperature: float,
        top_p: float,
        advance: Advance = _quiet,
    ) -> list[list[str]]:
        settings = {"n": n, "temperature": temperature, "top_p": top_p, "max_tokens": max_new_tokens}
        with ThreadPoolExecutor(max_workers=max(1, min(self.budget.max_concurrency, len(prompts)))) as pool:
            futures = [pool.submit(self._one, prompt, settings) for prompt in prompts]
            try:
                out = []
                for future in futures:
                    out.append(future.result())
                    advance(1)
                return out
            finally:  # after an error, prompts not yet sent are not sent
                for future in futures:
                    future.cancel()

    def _one(self, prompt: str, settings: dict) -> list[str]:
        payload = {"model": self.endpoint.model, "prompt": prompt, **settings, "stop": [self.stop]}
        body = self._call("/completions", payload)
        where = f"{self.url}/completions"
        try:
            choices = sorted(body["choices"], key=lambda c: c["index"])
            texts = [c["text"] for c in choices]
        except (KeyError, TypeError):
            raise RunError(f"{where}: malformed reply (no completion choices with index and text)") from None
        n = settings["n"]
        if [c["index"] for c in choices] != list(range(n)) or not all(isinstance(t, str) for t in texts):
            raise RunError(f"{where}: reply holds {len(texts)} choices, asked for n={n} (indexed 0..{n - 1}, texts)")
        return [t.strip() for t in texts]

    def _call(self, path: str, payload: dict | None) -> object:
        attempt = 0
        while True:
            try:
                return request_json(self.endpoint, path, payload)
            except CallError as exc:
                if exc.kind not in RETRYABLE or attempt == self.budget.max_retries:
                    raise RunError(f"{self.url}{path}: {exc.detail} after {attempt + 1} tries") from None
                time.sleep(retry_delay(self.budget, attempt, exc.retry_after_s))
                attempt += 1

    def check_served(self, checkpoint: str) -> None:
        """RunError unless the server lists the model (`GET /models`), and, when the folder it says it loaded
        (`root`, as vLLM reports) is one on this machine, unless that folder is `checkpoint`: text from another
        checkpoint would be scored as this one's."""
        where = f"{self.url}/models"
        body = self._call("/models", None)
        try:
            served = {m["id"]: m.get("root") for m in body["data"]}
        except (KeyError, TypeError, AttributeError):
            raise RunError(f"{where}: malformed reply (no model list)") from None
        model = self.endpoint.model
        if model not in served:
            raise RunError(f"{where}: the server serves {sorted(served)}, not {model!r}")
        root = served[model]
        if isinstance(root, str) and Path(root).is_dir() and Path(root).resolve() != Path(checkpoint).resolve():
            raise RunError(
                f"{where}: {model!r} is {root}, not the checkpoint to evaluate, {checkpoint}; "
                "serve that checkpoint, or evaluate the one served"
            )


def make_backend(
    settings: GenerationSettings | None,
    path: str,
    role: Role,
    tokenizer,
    trust_remote_code: bool = False,
    bf16: bool = False,
) -> Backend | None:
    """The `generation` block's backend for the checkpoint at `path` as the `role` agent; None for hf (the
    agent's own model, `HFBackend` at each call's batch size). `bf16`: vLLM's engine computes in bf16 (the
    run's inference precision), else in the checkpoint's own dtype."""
    if settings is None or settings.backend == "hf":
        return None
    if settings.backend == "vllm":
        return VLLMBackend(
            path, tokenizer, trust_remote_code, settings.gpu_memory_utilization, bf16, settings.max_model_len,
            settings.tensor_parallel_size,
        )  # fmt: skip
    served = getattr(settings, role)
    endpoint = OpenAIOptions(served.base_url, served.model, settings.api_key_env, settings.timeout_s)
    budget = CriticBudget(max_concurrency=settings.max_concurrency, max_retries=settings.max_retries)
    backend = OpenAIBackend(endpoint, budget, stop=tokenizer.eos_token)
    backend.check_served(path)
    return backend
