"""The task sets a run trains and is evaluated on, and how the lumos and moat recipes evaluate."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from coalign.config.base import Settings

GENERATED_KINDS = ("suite", "qa_suite", "web_suite")
# Sets with no gold plans or actions (data.md: "evaluation only"): scored, never trained on.
EVALUATION_KINDS = ("strategyqa", "hotpotqa", "mind2web", "webshop")
DATA_FOLDER = Path(__file__).resolve().parent.parent / "data"  # coalign/data: the shipped benchmark files


class DataSource(Settings):
    """One set of tasks.

    kind `suite` / `qa_suite` / `web_suite`: the bundled maths / QA / web generator (split, n, seed; split
    `near`, the maths suite's held-in structures in new words, is a second held-out set);
    `gsm8k` / `svamp` / `strategyqa` / `hotpotqa`: the public files at `path`; `mind2web`: a Mind2Web
    JSON file or a folder of them at `path`; `webshop`: a WebShop data folder at `path` (the QA and
    web ones have no gold plans: evaluation only); `lumos`: Agent Lumos `messages` JSONL, onetime or
    iterative, planner rows at `path`, grounder rows at `grounder_path`. `n` keeps the first n tasks.
    `path: shipped:gsm8k/train.jsonl` reads a benchmark file shipped with coalign (coalign/data/README.md),
    so a run needs no download; its sha256 is checked when it is read.
    """

    new_keys = ("subgoals",)

    kind: Literal[
        "suite", "qa_suite", "web_suite", "gsm8k", "svamp", "strategyqa", "hotpotqa", "mind2web", "webshop", "lumos"
    ]
    path: Path | None = None
    grounder_path: Path | None = None
    split: Literal["train", "heldin", "heldout", "near"] | None = None
    n: int | None = Field(None, ge=1)
    seed: int = 0
    subgoals: Literal["written", "deferred"] = Field(
        "written",
        description="gsm8k: a plain solution step as its subgoal, 'written' with its results (`Natalia sold 48/2 = "
        "24 clips`) or 'deferred', each result left to the grounder (`Natalia sold 48/2 clips`), so the planner "
        "does no arithmetic; socratic files' sub-questions are kept either way",
    )

    @field_validator("path")
    @classmethod
    def _shipped(cls, path: Path | None, info: ValidationInfo) -> Path | None:
        """A `shipped:` name must be a data file of the package's data folder, of the source's kind."""
        if path is None or not path.as_posix().startswith("shipped:"):
            return path
        name, folder = path.as_posix().removeprefix("shipped:"), DATA_FOLDER
        known = sorted(p.relative_to(folder).as_posix() for p in folder.glob("*/*.json*"))
        if name not in known:
            raise ValueError(f"no shipped file {name!r}; coalign ships: {', '.join(f'shipped:{k}' for k in known)}")
        kind = info.data.get("kind")
        if kind and name.split("/")[0] != kind:
            raise ValueError(f"shipped:{name} is a {name.split('/')[0]} file, not one of kind {kind!r}")
        return path

    @field_validator("subgoals")
    @classmethod
    def _gsm8k_only(cls, subgoals: str, info: ValidationInfo) -> str:
        if subgoals != "written" and info.data.get("kind") != "gsm8k":
            raise ValueError(
                f"'{subgoals}' subgoals are for kind gsm8k only (its solution steps), not {info.data.get('kind')!r}"
            )
        return subgoals

    @model_validator(mode="after")
    def _needs(self) -> "DataSource":
        generated = self.kind in GENERATED_KINDS
        if generated and (self.split is None or self.n is None):
            raise ValueError(f"kind '{self.kind}' needs 'split' and 'n'")
        if self.split == "near" and self.kind != "suite":
            raise ValueError(f"split 'near' is the maths suite's only (kind 'suite'), not for kind '{self.kind}'")
        if not generated and self.path is None:
            raise ValueError(f"kind '{self.kind}' needs 'path'")
        if self.kind == "lumos" and self.grounder_path is None:
            raise ValueError("kind 'lumos' needs 'grounder_path' (the grounder rows) beside 'path' (planner rows)")
        return self


def _trainable(source: DataSource) -> DataSource:
    """A set of `data.train`: not one of `EVALUATION_KINDS`, which hold test questions and nothing to learn from."""
    if source.kind in EVALUATION_KINDS:
        raise ValueError(
            f"kind '{source.kind}' is evaluation only (no gold plans or actions to train on): list it under "
            "data.heldin or data.heldout"
        )
    return source


def same_set(source: DataSource) -> dict:
    """What identifies the tasks a source gives, for `_not_trained_on`, each with how it is shown: its files,
    resolved (a `shipped:` name to the package's copy), or a generator's kind, split and seed."""
    if source.kind in GENERATED_KINDS:
        return {(source.kind, source.split, source.seed): f"{source.kind} split '{source.split}', seed {source.seed}"}
    paths = [p for p in (source.path, source.grounder_path) if p is not None]
    return {
        DATA_FOLDER / p.as_posix().removeprefix("shipped:") if p.as_posix().startswith("shipped:") else
        p.expanduser().resolve(): p.as_posix() for p in paths
    }  # fmt: skip


def _not_trained_on(source: DataSource, info: ValidationInfo) -> DataSource:
    """An evaluation set that is not one of `data.train`'s: scores on tasks trained on say nothing of what was
    learned."""
    mine = same_set(source)
    for i, train in enumerate(info.data.get("train") or []):
        if shared := mine.keys() & same_set(train).keys():
            raise ValueError(f"data.train[{i}] trains on the same set ({mine[shared.pop()]}): evaluate on another one")
    return source


class DataSettings(Settings):
    train: list[Annotated[DataSource, AfterValidator(_trainable)]] = Field(min_length=1)
    heldin: list[Annotated[DataSource, AfterValidator(_not_trained_on)]] = []
    heldout: list[Annotated[DataSource, AfterValidator(_not_trained_on)]] = []
    plan_following: float = Field(
        0.0,
        ge=0,
        le=1,
        description="share of training tasks whose subgoals name every operand that are also given to the "
        "grounder with another task's text (tasks/plan_following.py); 0 = off, as in the paper",
    )
    plan_compositions: float = Field(
        0.0,
        ge=0,
        le=4,
        description="grounder rows, per training task, whose plans chain readable steps of different training "
        "tasks in new orders, each with another task's text (tasks/plan_following.py); 0 = off, as in the paper",
    )
    composed_stories: int = Field(
        0,
        ge=0,
        le=1_000_000,
        description="maths stories that recombine the held-in events in new ways, never into a held-out "
        "structure (the maths suite's split 'composed'), added to the planner's data; 0 = off, as in the paper",
    )
    skip_bad_rows: bool = Field(
        False,
        description="leave out data rows that fail validation (counted by reason, reported and recorded in the "
        "run) instead of stopping at the first; a source with no task left still stops the run",
    )

    @model_validator(mode="after")
    def _near_held_out(self) -> "DataSettings":
        """The near set measures transfer to new words: trained on, or scored as held in, it measures nothing."""
        for split in ("train", "heldin"):
            if any(source.split == "near" for source in getattr(self, split)):
                raise ValueError(f"split 'near' is a held-out set: list it under data.heldout, not data.{split}")
        return self


class EvalSettings(Settings):
    batch_size: int = Field(64, ge=1)
    max_new_tokens_plan: int = Field(160, ge=1)
    max_new_tokens_ground: int = Field(160, ge=1)
    diagnostics: bool = Field(True, description="also ground gold and blanked subgoals (the subgoals-matter check)")
    max_turns: int = Field(
        12, ge=1, description="iterative loop (web family): planner turns per task before it is stopped (gold <= 9)"
    )
