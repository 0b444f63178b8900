"""The LLM critic's options as a config gives them (`moat.critic_options`): which exist, which values fit, and
which must never be written into a config.

Config validation and the critic `moat.critic.make_critic` builds read these same definitions, so a config
whose options would fail hours into a run is refused when it is loaded, without config importing the stage.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from urllib.parse import urlsplit

SECRET_OPTIONS = frozenset({"api_key", "apikey", "key", "token", "access_token", "secret", "password", "authorization"})


@dataclass(frozen=True)
class OpenAIOptions:
    """Where and how to call an OpenAI-compatible `/chat/completions` endpoint (vLLM, hosted APIs). The key is
    no option: `api_key_env` names the environment variable that holds it."""

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 60.0
    temperature: float = 0.1
    max_tokens: int = 512


@dataclass(frozen=True)
class CriticBudget:
    """How the LLM critic spends its calls: concurrency, retries with back-off, and caps on calls and on
    seconds from its first judgement (None: no cap)."""

    max_concurrency: int = 4
    max_retries: int = 3
    backoff_s: float = 1.0
    max_delay_s: float = 30.0
    max_calls: int | None = None
    max_seconds: float | None = None

    def __post_init__(self) -> None:
        if self.max_concurrency < 1 or self.max_retries < 0 or (self.max_calls is not None and self.max_calls < 0):
            raise ValueError("need max_concurrency >= 1, max_retries >= 0 and max_calls >= 0")
        if self.max_seconds is not None and self.max_seconds <= 0:
            raise ValueError(f"max_seconds must be > 0, got {self.max_seconds}")


# The options of each backend; `transformers` runs a local model (`agent`, an object given in code, not YAML).
BACKEND_OPTIONS: dict[str, tuple[str, ...]] = {
    "openai": tuple(f.name for f in fields(OpenAIOptions)),
    "transformers": ("agent", "max_new_tokens"),
}


def split_llm_options(options: dict) -> tuple[str, dict, dict]:
    """(backend, the backend's options, the budget's options); TypeError naming any unknown option."""
    options = dict(options)
    backend = options.pop("backend", "openai")
    if backend not in BACKEND_OPTIONS:
        raise ValueError(f"unknown critic backend {backend!r}; known: {sorted(BACKEND_OPTIONS)}")
    own = set(BACKEND_OPTIONS[backend])
    known = own | {f.name for f in fields(CriticBudget)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"unknown llm critic option(s) {unknown}; known: {sorted(known | {'backend'})}")
    return backend, {k: v for k, v in options.items() if k in own}, {k: v for k, v in options.items() if k not in own}


def check_critic_options(critic: str, options: dict) -> None:
    """ValueError unless `options` build the critic; a secret in them would be saved with the run's config."""
    secret = sorted(name for name in options if str(name).lower() in SECRET_OPTIONS)
    if secret:
        raise ValueError(
            f"critic_options.{secret[0]}: a secret in the config is saved with the run; put the key in an "
            "environment variable and give its name as critic_options.api_key_env"
        )
    url = urlsplit(str(options.get("base_url", "")))
    if url.username or url.password or url.query:
        raise ValueError("critic_options.base_url must not hold credentials or a query; use api_key_env for the key")
    if critic != "llm" and options:
        raise ValueError(f"critic_options apply to critic 'llm' only; critic is '{critic}'")
    if critic == "llm" and options.get("backend", "openai") == "openai":
        try:
            _, backend_options, budget = split_llm_options(options)
            OpenAIOptions(**backend_options)
            CriticBudget(**budget)
        except TypeError as exc:
            raise ValueError(f"critic_options do not fit the llm critic: {exc}") from None


JUDGE_BUDGET = ("max_calls", "max_retries", "backoff_s", "max_delay_s")  # `rewards.LLMJudge`'s
PLANNER_OPTIONS = ("candidates", "max_calls")  # `expert.LLMPlans`': plans asked per task, calls in all


def split_endpoint_options(options: dict, field: str, own: tuple[str, ...]) -> tuple[OpenAIOptions, dict]:
    """An LLM helper's options as a config gives them (`field`): the OpenAI-compatible endpoint, and the
    helper's `own` options; ValueError naming an unknown, missing or secret option."""
    secret = sorted(name for name in options if str(name).lower() in SECRET_OPTIONS)
    if secret:
        raise ValueError(
            f"{field}.{secret[0]}: a secret in the config is saved with the run; put the key in an "
            f"environment variable and give its name as {field}.api_key_env"
        )
    endpoint = set(BACKEND_OPTIONS["openai"])
    unknown = sorted(set(options) - endpoint - set(own))
    if unknown:
        raise ValueError(f"unknown {field} option(s) {unknown}; known: {sorted(endpoint | set(own))}")
    url = urlsplit(str(options.get("base_url", "")))
    if url.username or url.password or url.query:
        raise ValueError(f"{field}.base_url must not hold credentials or a query; use api_key_env for the key")
    try:
        openai = OpenAIOptions(**{k: v for k, v in options.items() if k in endpoint})
    except TypeError as exc:
        raise ValueError(f"{field} need base_url and model: {exc}") from None
    return openai, {k: v for k, v in options.items() if k in own}


def split_judge_options(options: dict) -> tuple[OpenAIOptions, dict]:
    """PilotRL's LLM adherence judge (`pilotrl.rl.judge_options`): its endpoint and its budget."""
    return split_endpoint_options(options, "judge_options", JUDGE_BUDGET)


def check_judge_options(judge: str, options: dict) -> None:
    """ValueError unless `options` build the LLM judge (and are empty for the rule judge)."""
    if judge != "llm":
        if options:
            raise ValueError(f"judge_options apply to judge 'llm' only; judge is '{judge}'")
        return
    split_judge_options(options)
