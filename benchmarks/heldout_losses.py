"""Bases side by side on one pretraining run's held-out sets (copy drills, mixed text), measured the way that
run's trainer logs them, so a base made elsewhere (another shape, another sitting) is compared on the same
documents: each run's held-out sets are generated from its own seed.

    .venv/bin/python benchmarks/heldout_losses.py runs/pb6 coalign-base-2 coalign-base-4 runs/pb6/base
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from datasets import load_from_disk
from trl import SFTTrainer

from coalign.models.load import load_model, load_tokenizer
from coalign.models.bases import starting_point
from coalign.pretraining.pretrain import HELD_OUT, trainer_args
from coalign.pretraining.settings import load_pretrain_config
from coalign.training.common import quiet_transformers


def heldout_losses(run: Path, model_path: str) -> dict[str, float]:
    """The model's loss per token on each of the run's held-out sets."""
    config = load_pretrain_config(run / "config.yaml")
    sets = {name: load_from_disk(str(run / "tokens" / name)) for name in HELD_OUT}
    tokenizer = load_tokenizer(model_path)
    tokenizer.padding_side = "right"
    with tempfile.TemporaryDirectory() as out, quiet_transformers():
        trainer = SFTTrainer(
            model=load_model(model_path, dtype="float32"),
            args=trainer_args(config, Path(out)),
            train_dataset=sets[HELD_OUT[0]],
            eval_dataset=sets,
            processing_class=tokenizer,
        )
        metrics = trainer.evaluate()
    return {name: metrics[f"eval_{name}_loss"] for name in HELD_OUT}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a pretraining run folder (its config.yaml and tokens/)")
    parser.add_argument("models", nargs="+", help="shipped base names or model folders")
    args = parser.parse_args()
    print("| model | held-out copy drills, loss/token | held-out mixed text, loss/token |")
    print("|---|---|---|")
    for model in args.models:
        losses = heldout_losses(args.run, str(starting_point(model)))
        print(f"| {model} | {losses['eval_copy']:.3f} | {losses['eval_mixed']:.3f} |")


if __name__ == "__main__":
    main()
