"""`coalign pretrain`: causal-LM pretraining of a small Llama on the corpus, resumable in sittings.

The run folder holds, in order: the corpus, its record and its contamination check (`corpus/`), the
tokenizer and initial model, the packed token blocks, the trainer's checkpoints, and, once `max_steps` are
done, `base/`: the pretrained model with a `recipe.json` (config, corpus record, leaked-item counts,
parameters, tokens seen, wall time, file hashes) that is what the package ships. A sitting (`--steps N`)
trains N more steps and stops at a checkpoint; the next resumes from it with the same data order and
learning-rate schedule, so the steps add up to one run.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import torch
import yaml
from datasets import Dataset, load_from_disk
from rich.console import Console
from transformers import TrainerCallback
from transformers.trainer_utils import get_last_checkpoint
from trl import SFTConfig, SFTTrainer

from coalign.core.errors import RunError
from coalign.core.runs import Run, atomic_dir, atomic_write_text, file_sha256, read_json, write_json
from coalign.models.bases import finished_base
from coalign.models.load import load_model, load_tokenizer, make_tiny_model, parameter_count
from coalign.pretraining.corpus import CorpusSettings, build_corpus
from coalign.pretraining.leakage import leakage_report
from coalign.pretraining.settings import PretrainConfig
from coalign.training.common import quiet_transformers, trl_config

BASE_FILES = ("model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json")
HELD_OUT = ("eval_copy", "eval_mixed")  # the held-out sets, as the trainer names their losses: eval_<name>_loss
LOSSES = {"loss": "train", "eval_eval_copy_loss": "held-out copy drills", "eval_eval_mixed_loss": "held-out mixed text"}


class StopAt(TrainerCallback):
    """End this sitting at step `limit` with a checkpoint to resume from."""

    def __init__(self, limit: int):
        self.limit = limit

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.limit:
            control.should_training_stop = True
            control.should_save = True
        return control


def pretrain(config: PretrainConfig, run_dir: str | Path, console: Console, steps: int | None = None) -> dict:
    """Train up to `steps` more optimizer steps (all that are left when None); returns the progress record."""
    run = Run(run_dir)
    record_pretrain_config(run, config)
    if config.threads:
        torch.set_num_threads(config.threads)
    corpus_file = run.path("corpus", "documents.jsonl")
    init = run.path("models", "init")
    blocks = run.path("tokens")

    def corpus() -> dict:
        console.print(f"building the corpus: {config.corpus.documents} generated documents, seed {config.seed}")
        docs, record = build_corpus(config.corpus, config.seed)
        atomic_write_text(corpus_file, "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs))
        write_json(run.path("corpus", "record.json"), record)
        return record

    def make_init() -> dict:
        with atomic_dir(init) as tmp:
            if config.init_from:
                parent = finished_base(config.init_from)
                console.print(f"continuing the pretraining of {parent}")
                load_model(parent, dtype="float32").save_pretrained(str(tmp))
                load_tokenizer(parent).save_pretrained(str(tmp))
                shutil.copy(parent / "recipe.json", tmp / "parent_recipe.json")
            else:
                split = "digits and words" if config.split_words else "digits"
                console.print(f"training a {config.model.vocab_size}-token BPE ({split} split), initialising the model")
                make_tiny_model(
                    read_documents(corpus_file), tmp, config.model, config.seed, digits=True, words=config.split_words
                )
        return {"parameters": parameter_count(load_model(init))}

    def tokenize() -> dict:
        tokenizer = load_tokenizer(init)
        with atomic_dir(blocks) as tmp:
            token_dataset(tokenizer, read_documents(corpus_file)).save_to_disk(str(tmp / "train"))
            for name, held_out in held_out_sets(config).items():
                token_dataset(tokenizer, held_out).save_to_disk(str(tmp / name))
        return {"tokens": sum(map(len, load_from_disk(str(blocks / "train"))["input_ids"]))}

    def leakage() -> dict:
        console.print("contamination check: the corpus's n-grams against every evaluation set it could leak")
        check = config.leakage
        report = leakage_report(config.corpus, config.seed, check.data, check.tasks, check.env_tasks)
        write_json(run.path("corpus", "leakage.json"), report)
        return leaked_counts(report)

    run.stage("corpus", corpus, [corpus_file, run.path("corpus", "record.json")])
    run.stage("leakage", leakage, [run.path("corpus", "leakage.json")], inputs=[corpus_file])
    run.stage("init", make_init, [init], inputs=[corpus_file])
    run.stage("tokens", tokenize, [blocks], inputs=[init])
    progress = train(run, config, init, blocks, steps, console)
    if progress["steps"] >= config.train.max_steps:
        run.stage("base", lambda: export_base(run, config, progress), [run.path("base")])
    return progress


def leaked_counts(report: dict) -> dict:
    """Per view, the items checked and leaked over all probe sets, and the sets with any leak."""
    out = {}
    for view in ("verbatim", "skeleton"):
        sets = report[view]["sets"]
        out[view] = {
            "n": report[view]["n"],
            "checked": sum(s["checked"] for s in sets.values()),
            "leaked": sum(s["leaked"] for s in sets.values()),
            "sets_with_leaks": {name: s["leaked"] for name, s in sets.items() if s["leaked"]},
        }
    return out


def record_pretrain_config(run: Run, config: PretrainConfig) -> None:
    """Save the config; a run folder holding a different one is refused (its sittings must add up to one run)."""
    text = yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
    saved = run.path("config.yaml")
    if saved.exists() and saved.read_text() != text:
        raise SystemExit(f"{saved} holds a different pretraining config; use a new --run-dir")
    atomic_write_text(saved, text)


def read_documents(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def token_dataset(tokenizer, docs: list[str]) -> Dataset:
    """Each document's ids with the end-of-text token after it, so packed blocks mark where documents end."""
    ids = tokenizer(docs, add_special_tokens=False)["input_ids"]
    return Dataset.from_dict({"input_ids": [row + [tokenizer.eos_token_id] for row in ids]})


def held_out_sets(config: PretrainConfig) -> dict[str, list[str]]:
    """Documents the model never trains on, from another seed: copy drills alone (the copying skill the
    bundled agents lack; its loss falls towards zero only once copying is learned), and the corpus's mix."""
    n, seed = config.train.eval_documents, config.seed + 1_000_003
    mixes = ({"copy": 1.0}, config.corpus.mix)
    return {name: build_corpus(CorpusSettings(documents=n, mix=mix), seed)[0] for name, mix in zip(HELD_OUT, mixes)}


def train(run: Run, config: PretrainConfig, init: Path, blocks: Path, steps: int | None, console: Console) -> dict:
    """One sitting of the trainer, from the last checkpoint; appends its wall time to `progress.json`."""
    t = config.train
    out = run.path("trainer")
    resume = get_last_checkpoint(str(out)) if out.is_dir() else None
    done = int(Path(resume).name.split("-")[-1]) if resume else 0
    limit = min(t.max_steps, done + steps) if steps else t.max_steps
    progress_file = run.path("progress.json")
    progress = read_json(progress_file) if progress_file.exists() else {"sittings": []}
    if done < limit:
        tokenizer = load_tokenizer(init)
        tokenizer.padding_side = "right"
        args = trainer_args(config, out)
        console.print(
            f"[bold]pretrain[/bold]: steps {done} -> {limit} of {t.max_steps}" + (f" (from {resume})" if resume else "")
        )
        started = time.time()
        with quiet_transformers():
            trainer = SFTTrainer(
                model=load_model(init, dtype="float32"),
                args=args,
                train_dataset=load_from_disk(str(blocks / "train")),
                eval_dataset={name: load_from_disk(str(blocks / name)) for name in HELD_OUT},
                processing_class=tokenizer,
                callbacks=[StopAt(limit)],
            )
            trainer.train(resume_from_checkpoint=resume)
        progress["sittings"].append(
            {"from": done, "to": trainer.state.global_step, "wall_s": round(time.time() - started, 1)}
        )
        done = trainer.state.global_step
    last = get_last_checkpoint(str(out))
    if last is None:
        raise RunError(f"{out} holds no checkpoint to read the pretraining state from")
    history = read_json(Path(last) / "trainer_state.json")["log_history"]
    progress.update(
        steps=done,
        tokens_seen=done * t.batch_size * t.grad_accum * t.seq_len,
        wall_s=round(sum(s["wall_s"] for s in progress["sittings"]), 1),
        losses=summarise(history),
    )
    write_json(progress_file, progress)
    plot_losses(history, run.path("loss.png"))
    return progress


def trainer_args(config: PretrainConfig, out: Path) -> SFTConfig:
    """The trainer's settings: packed causal-LM blocks, held-out losses every `eval_steps`, checkpoints to
    resume from."""
    t = config.train
    return trl_config(
        SFTConfig,
        output_dir=str(out),
        max_steps=t.max_steps,
        per_device_train_batch_size=t.batch_size,
        per_device_eval_batch_size=t.batch_size,
        gradient_accumulation_steps=t.grad_accum,
        learning_rate=t.learning_rate,
        warmup_steps=t.warmup_steps,
        lr_scheduler_type=t.lr_scheduler,
        weight_decay=t.weight_decay,
        bf16=t.bf16,
        max_length=t.seq_len,
        packing=True,
        packing_strategy="wrapped",
        completion_only_loss=False,
        logging_steps=t.logging_steps,
        eval_strategy="steps",
        eval_steps=t.eval_steps,
        save_strategy="steps",
        save_steps=t.save_steps,
        save_total_limit=2,
        report_to=[],
        seed=config.seed,
        data_seed=config.seed,
        dataloader_num_workers=0,
        dataloader_pin_memory=torch.cuda.is_available(),
    )


def summarise(history: list[dict]) -> dict:
    """The latest train loss and held-out losses (the copy loss is the one to watch)."""
    latest = {}
    for row in history:
        for key in LOSSES:
            if key in row:
                latest[key.replace("eval_eval_", "eval_")] = {"step": row["step"], "value": round(row[key], 4)}
    return latest


def plot_losses(history: list[dict], path: Path) -> None:
    """Train loss and the two held-out losses against steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label in LOSSES.items():
        points = [(row["step"], row[key]) for row in history if key in row]
        if points:
            ax.plot(*zip(*points), label=label, marker="o" if key != "loss" else None, markersize=3)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss per token")
    ax.set_yscale("log")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def export_base(run: Run, config: PretrainConfig, progress: dict) -> dict:
    """`base/`: the final weights and tokenizer, the pretraining config, and `recipe.json`."""
    model = load_model(get_last_checkpoint(str(run.path("trainer"))), dtype="float32")
    tokenizer = load_tokenizer(run.path("models", "init"))
    with atomic_dir(run.path("base")) as tmp:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        shutil.copy(run.path("config.yaml"), tmp / "pretrain.yaml")
        recipe = {
            "name": config.name,
            "seed": config.seed,
            "parameters": parameter_count(model),
            "steps": progress["steps"],
            "tokens_seen": progress["tokens_seen"],
            "wall_s": progress["wall_s"],
            "sittings": len(progress["sittings"]),
            "losses": progress["losses"],
            "corpus": read_json(run.path("corpus", "record.json")),
            "leakage": leaked_counts(read_json(run.path("corpus", "leakage.json"))),
            "files_sha256": {name: file_sha256(tmp / name) for name in BASE_FILES if (tmp / name).exists()},
        }
        parent_file = run.path("models", "init", "parent_recipe.json")
        before = 0
        if parent_file.exists():
            parent = read_json(parent_file)
            before = parent.get("tokens_seen_in_all", parent["tokens_seen"])
            keys = ("name", "steps", "tokens_seen", "files_sha256")
            recipe["init_from"] = {**{key: parent[key] for key in keys}, "tokens_seen_in_all": before}
        recipe["tokens_seen_in_all"] = recipe["tokens_seen"] + before
        write_json(tmp / "recipe.json", recipe)
    return {"parameters": recipe["parameters"]}
