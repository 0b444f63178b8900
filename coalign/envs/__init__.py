"""Text environments behind one interface (`base.TextEnv`: reset, step), found by name.

PilotRL's six: four held-in (household, crafting, wordle, iqa) and two held-out (babyai, maze), as the
paper's ALFWorld, TextCraft, Wordle, IQA (interactive question answering), BabyAI and MAZE. A new environment is one
module here and one line in `REGISTRY`.

`alfworld` is optional (`TextEnv.optional`): the real ALFWorld, which needs `pip install -e '.[alfworld]'` and
`alfworld-download`; it is in no default list, and `TextEnv.missing` says what it lacks where it cannot run.

The web family's environments are built from a task rather than a seed: `web.SiteEpisode` (Mind2Web-like
sites) and `shop.ShopEpisode` (the WebShop-like shop), stepped one action at a time the same way, with
Lumos's multi-action grounder turn on top (`episode`); `tasks.episodes.episode_for` builds a task's.
"""

from __future__ import annotations

from importlib import import_module

from coalign.envs.base import Step, TextEnv
from coalign.formats.env_actions import clean_action

REGISTRY: dict[str, str] = {
    "household": "coalign.envs.household:HouseholdEnv",
    "crafting": "coalign.envs.crafting:CraftingEnv",
    "wordle": "coalign.envs.wordle:WordleEnv",
    "iqa": "coalign.envs.iqa:IQAEnv",
    "babyai": "coalign.envs.babyai:BabyAIEnv",
    "babyai_oracle": "coalign.envs.babyai:BabyAIOracleEnv",  # babyai's omniscient expert, for ablations only
    "maze": "coalign.envs.maze:MazeEnv",
    "household_oracle": "coalign.envs.household:OracleHouseholdEnv",  # household, its expert omniscient (ablations)
    "iqa_oracle": "coalign.envs.iqa:OracleIQAEnv",  # iqa, its expert stating the answer before looking (ablations)
    "maze_oracle": "coalign.envs.maze:OracleMazeEnv",  # maze, its expert reading the layout (ablations)
    "alfworld": "coalign.envs.alfworld:AlfworldEnv",  # optional: the real ALFWorld, its extra and game files
}
HELDIN = ("household", "crafting", "wordle", "iqa")  # bundled environments only, never an optional one
HELDOUT = ("babyai", "maze")


def env_class(name: str) -> type[TextEnv]:
    if name not in REGISTRY:
        raise ValueError(f"unknown environment {name!r}; known: {', '.join(REGISTRY)}")
    module, _, attr = REGISTRY[name].partition(":")
    return getattr(import_module(module), attr)


def make_env(name: str, **options) -> TextEnv:
    """A fresh environment of kind `name`; call `reset(seed)` to start a task."""
    return env_class(name)(**options)


__all__ = ["HELDIN", "HELDOUT", "REGISTRY", "Step", "TextEnv", "clean_action", "env_class", "make_env"]
