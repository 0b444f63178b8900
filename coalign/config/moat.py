"""MOAT's rounds (Algorithm 1): candidate sampling, grounder scoring, preference pairs, the critic."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from coalign.config.base import Settings
from coalign.core.endpoint_options import check_critic_options

RETIRED_KEY = "use_corrected_subgoals"  # `critic_subgoals: original` in configs saved before it


class MoatSettings(Settings):
    """MOAT rounds (Algorithm 1). Defaults are the paper's; `tasks` subsamples the training set."""

    new_keys = ("critic_subgoals", "pairs_per_task", "dpo_held_aside")

    rounds: int = Field(2, ge=1)
    tasks: int | None = Field(None, ge=1, description="training tasks used per round (the first n); None = all")
    k: int = Field(15, ge=1, description="subgoal candidates sampled per task")
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(0.95, gt=0, le=1)
    max_new_tokens_plan: int = Field(512, ge=1)
    score_reduction: Literal["mean", "content", "sum"] = Field(
        "mean", description="grounder NLL of gold actions: mean over all action tokens (paper), content tokens, or sum"
    )
    pair_threshold: float = Field(0.1, ge=0, description="drop a pair whose chosen/rejected gap is below this")
    pair_gap_on: Literal["nll", "ppl"] = Field("nll", description="gap measured on mean NLL (release) or on PPL")
    pairs_per_task: int = Field(
        1,
        ge=1,
        description="DPO pairs per task (web task: per turn) from its K candidates: the best against the worst "
        "(the paper's one), then the best of the rest against the worst of the rest, ...; each candidate in one "
        "pair at most, each gap at least pair_threshold (so at most k // 2)",
    )
    dpo_held_aside: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="share of the round's tasks whose pairs stage 1 keeps out of DPO, to measure what DPO learnt "
        "on them: loss, reward margin and accuracy at the end of the stage (the same tasks every round, drawn from "
        "the seed; at least one task when above 0); 0 = train on every pair",
    )
    ground_temperature: float = Field(0.1, ge=0, description="stage-2 grounder sampling (release: 0.1)")
    ground_top_p: float = Field(0.95, gt=0, le=1)
    max_new_tokens_ground: int = Field(512, ge=1)
    critic: Literal["execution", "llm", "none"] = "execution"
    critic_options: dict = Field(
        default_factory=dict, description="keyword options of the critic (llm: base_url, model, ...)"
    )
    critic_subgoals: Literal["original", "corrected"] = Field(
        "original",
        description="the subgoals stage 2 pairs a critic-corrected grounding with: the candidate's own ('original', "
        "Algorithm 1, line 6) or the critic's corrected ones ('corrected', as the paper's A.3 critic writes them; the "
        "execution critic takes the gold plan)",
    )
    mix_ratio: float = Field(1.0, ge=0, description="initial grounder examples per critic-built example (paper 1:1)")
    stage1: bool = Field(True, description="planner DPO; false = the 'w/o stage 1' ablation")
    stage2: bool = Field(True, description="grounder SFT on critic-judged data; false = 'w/o stage 2'")
    batch_size: int = Field(64, ge=1)
    share_prefix: bool = Field(
        False, description="stage-1 scoring runs the prompt prefix a task's K candidates share once (same scores)"
    )
    web_turns_per_task: int | None = Field(
        None,
        ge=1,
        description="planner turns sampled per web task each round (drawn once per seed and task); None = all",
    )

    @model_validator(mode="before")
    @classmethod
    def _retired(cls, data: object) -> object:
        """Read configs saved before `critic_subgoals` replaced `use_corrected_subgoals`: false there is today's
        default; true is refused, as it meant `corrected` for the LLM critic only (`loader.RETIRED` lets their
        run folders resume)."""
        if isinstance(data, dict) and RETIRED_KEY in data:
            data = dict(data)
            if data.pop(RETIRED_KEY) is not False:
                raise ValueError(f"{RETIRED_KEY} is now critic_subgoals: original (Algorithm 1) or corrected")
        return data

    @model_validator(mode="after")
    def _runnable(self) -> "MoatSettings":
        """Refuse what would fail hours into a run (K=1, critic options that do not fit) or leak a secret."""
        if self.stage1 and self.k < 2:
            raise ValueError(
                "k must be >= 2 when stage1 is on: a preference pair needs two candidates "
                "(set moat.k >= 2, or moat.stage1: false)"
            )
        if self.stage1 and self.pairs_per_task > self.k // 2:
            raise ValueError(
                f"pairs_per_task {self.pairs_per_task} needs k >= {2 * self.pairs_per_task}: each pair takes two "
                f"of a task's k={self.k} candidates"
            )
        if self.pair_gap_on == "ppl" and self.score_reduction == "sum":
            raise ValueError(
                "pair_gap_on 'ppl' needs a per-token score: exp of a summed NLL is no perplexity (and overflows "
                "past 709 nats); set moat.score_reduction to 'mean' or 'content', or moat.pair_gap_on to 'nll'"
            )
        check_critic_options(self.critic, self.critic_options)
        return self
