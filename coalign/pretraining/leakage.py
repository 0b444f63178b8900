"""Contamination check: n-grams the pretraining corpus shares with evaluation material.

A base model that read a task in pretraining is no longer tested on it, so the text of every task a run
trains or evaluates on is looked for in the corpus, two ways:

- verbatim (`normalize`, 13-grams, GPT-3's contamination check) against the whole corpus: an item copied
  into it, from a generator or from the real text (GSM8K train);
- skeleton (`skeleton`, 8-grams) against the generated documents: numbers become `#` and names `NAME`, so
  a document written from a suite template with other names and numbers in its slots is found too. Real
  text is left out of this view: GSM8K was written before the suites, and the maths suite is meant to read
  like it (measured: 9-15% of its questions share an 8-word skeleton with GSM8K train, "has # times as
  many stamps as NAME"), which is the language pretraining is for, not a template leaking.

A task is probed as pieces: its question, each gold subgoal, each gold action. No n-gram spans two pieces:
one across a subgoal boundary pairs the end of one template with the start of the next (measured, joined
with "; ": 9% of maths-suite plans shared a skeleton 8-gram with the corpus only across such a seam,
"R1 by 3; Subtract 9 from R2", two generic operation phrases), and a maths action (`R2 = Calculator(R1 -
9)`) is format plus small numbers, which the corpus's random Calculator programs repeat by chance (joined,
10-24% of maths plans shared a verbatim 13-gram). So maths actions are too short to check (`checked` says
how many items were), and their numbers are checked where they identify the task: in its question.
Fixed prompt text (Lumos's instructions and tool lists, an environment's action syntax) is the format
every task shares and is never probed.

The corpus's n-grams are kept as one sorted array of 64-bit hashes (8 bytes each, not a set of tuples),
built a chunk of documents at a time: 42 MB of 13-grams for 200k documents (5.3M distinct).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from coalign.config import PilotRLSettings
from coalign.envs import HELDIN, HELDOUT, make_env
from coalign.pretraining.corpus import CorpusSettings, build_corpus, gsm8k_documents
from coalign.tasks import Task
from coalign.tasks.gsm8k import load_gsm8k
from coalign.tasks.maths_suite import NEAR, SPLITS, generate_suite
from coalign.tasks.sources import GENERATORS
from coalign.tasks.svamp import load_svamp

VERBATIM_N = 13  # GPT-3's contamination check (Brown et al. 2020, appendix C)
SKELETON_N = 8  # QA and web questions are mostly 8-12 skeleton words: 85-97% reach 8, a third of QA held-out 10
EXAMPLES = 3  # shared n-grams shown per probe set

Probe = str | tuple[str, ...]  # one text, or pieces no n-gram spans

_WORDS = re.compile(r"\d+|[^\W\d_]+")  # digits and letters are separate tokens: `R1` -> r, 1; `5kg` -> 5, kg
_GAP_AND_WORD = re.compile(r"([\W_]*?)(\d+|[^\W\d_]+)")
_SENTENCE_ENDS = frozenset(".!?:;\n")  # `Task: Find ...` and `...; Add 9 to R2` start sentences too
_PRIME = np.uint64(0x9E3779B97F4A7C15)  # odd: multiplying by it mod 2**64 loses nothing
_CHUNK = 10_000  # corpus documents tokenised and hashed at a time


def normalize(text: str) -> list[str]:
    """Lowercase word tokens, punctuation dropped: what a verbatim copy keeps whatever its layout."""
    return _WORDS.findall(text.lower())


def skeleton(text: str) -> list[str]:
    """`normalize`'s tokens with every number as `#` and every capitalised word that does not start a
    sentence as `NAME`: two instances of one template get the same skeleton whatever fills their slots.

    A sentence starts the text and follows `.`, `!`, `?`, `:`, `;` or a line break; its first word keeps
    its (lowercased) identity, since a template's own words start sentences."""
    tokens: list[str] = []
    for gap, word in _GAP_AND_WORD.findall(text):
        if word[0].isdigit():
            tokens.append("#")
        elif word[0].isupper() and tokens and not _SENTENCE_ENDS.intersection(gap):
            tokens.append("NAME")
        else:
            tokens.append(word.lower())
    return tokens


def tokenizer(skeletons: bool) -> Callable[[str], list[str]]:
    """The tokenisation of a view: `skeleton` or `normalize` (verbatim)."""
    return skeleton if skeletons else normalize


# --------------------------------------------------------------------------- hashing


def _codes(tokens: Iterable[str], table: dict[str, int]) -> list[int]:
    """A random-looking 64-bit code per token (blake2b, so the same in every run); `table` caches them."""
    out = []
    for token in tokens:
        code = table.get(token)
        if code is None:
            code = table[token] = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")
        out.append(code)
    return out


@dataclass(frozen=True)
class Windows:
    """The n-grams of a list of token lists: `hashes[i]` is the n-gram at `starts[i]` of list `owners[i]`.
    No n-gram spans two lists; a list shorter than n has none."""

    hashes: np.ndarray
    owners: np.ndarray
    starts: np.ndarray


def windows(token_lists: Sequence[list[str]], n: int, table: dict[str, int]) -> Windows:
    """All n-grams of `token_lists`, each a polynomial hash of its tokens' codes mod 2**64, computed over the
    lists laid end to end (one numpy pass, not one per list) and kept where a window lies inside one list."""
    lengths = np.array([len(tokens) for tokens in token_lists], dtype=np.int64)
    codes = np.array([c for tokens in token_lists for c in _codes(tokens, table)], dtype=np.uint64)
    count = len(codes) - n + 1
    if count <= 0:
        empty = np.empty(0, dtype=np.int64)
        return Windows(np.empty(0, dtype=np.uint64), empty, empty)
    hashes = codes[:count].copy()
    for k in range(1, n):
        hashes *= _PRIME
        hashes += codes[k : k + count]
    owner = np.repeat(np.arange(len(lengths)), lengths)
    inside = np.flatnonzero(owner[:count] == owner[n - 1 : n - 1 + count])
    first = np.cumsum(lengths) - lengths
    return Windows(hashes[inside], owner[inside], inside - first[owner[inside]])


@dataclass(frozen=True)
class NgramIndex:
    """The distinct n-gram hashes of a corpus, sorted, in one tokenisation (`skeletons` or verbatim)."""

    n: int
    skeletons: bool
    hashes: np.ndarray

    def contains(self, hashes: np.ndarray) -> np.ndarray:
        """Whether each hash is one of the corpus's (binary search: no second copy of the index)."""
        if not len(self.hashes):
            return np.zeros(len(hashes), dtype=bool)
        at = np.minimum(np.searchsorted(self.hashes, hashes), len(self.hashes) - 1)
        return self.hashes[at] == hashes


def _distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values (a sort and a mask: numpy 2.4's hash-based `np.unique` is ~50x slower on
    a million 64-bit hashes)."""
    values = np.sort(values)
    return values[np.concatenate(([True], values[1:] != values[:-1]))] if len(values) else values


def corpus_index(docs: Iterable[str], n: int, skeletons: bool) -> NgramIndex:
    """The index of `docs`, tokenised and hashed `_CHUNK` documents at a time, each chunk's hashes made
    distinct before they are kept: memory holds the distinct n-grams, not every one."""
    tokenize, table = tokenizer(skeletons), {}
    parts: list[np.ndarray] = []
    chunk: list[list[str]] = []
    for doc in docs:
        chunk.append(tokenize(doc))
        if len(chunk) == _CHUNK:
            parts.append(_distinct(windows(chunk, n, table).hashes))
            chunk = []
    parts.append(_distinct(windows(chunk, n, table).hashes))
    return NgramIndex(n, skeletons, _distinct(np.concatenate(parts)))


# --------------------------------------------------------------------------- report


def probe_overlap(index: NgramIndex, items: Sequence[Probe], examples: int = EXAMPLES) -> dict:
    """How many `items` share an n-gram with the indexed corpus, and the first few shared n-grams.

    `checked` counts the items with a piece of at least n tokens: a shorter one has no n-gram to share."""
    tokenize = tokenizer(index.skeletons)
    pieces: list[list[str]] = []
    item_of: list[int] = []
    for number, item in enumerate(items):
        for text in (item,) if isinstance(item, str) else item:
            pieces.append(tokenize(text))
            item_of.append(number)
    found = windows(pieces, index.n, {})
    hit = index.contains(found.hashes)
    owner_items = np.array(item_of, dtype=np.int64)[found.owners]
    leaked = len(np.unique(owner_items[hit]))
    shown: list[str] = []
    for piece, start in zip(found.owners[hit], found.starts[hit]):
        gram = " ".join(pieces[piece][start : start + index.n])
        if gram not in shown:
            shown.append(gram)
        if len(shown) == examples:
            break
    return {
        "items": len(items),
        "checked": len(np.unique(owner_items)),
        "leaked": leaked,
        "share": leaked / len(items) if items else 0.0,
        "examples": shown,
    }


def overlap_report(corpus_docs: Iterable[str], probes: dict[str, Sequence[Probe]], n: int, skeletons: bool) -> dict:
    """Per probe set: items, items checked, items sharing any n-gram with the corpus, their share, examples."""
    index = corpus_index(corpus_docs, n, skeletons)
    return {
        "n": n,
        "tokens": "skeleton" if skeletons else "verbatim",
        "corpus_ngrams": len(index.hashes),
        "sets": {name: probe_overlap(index, items) for name, items in probes.items()},
    }


# --------------------------------------------------------------------------- what is probed


def task_probes(label: str, tasks: Sequence[Task]) -> dict[str, list[Probe]]:
    """`{label}:question`, `{label}:subgoals`, `{label}:actions`: each task's question, and its gold subgoals
    and gold actions as pieces."""
    return {
        f"{label}:question": [task.question for task in tasks],
        f"{label}:subgoals": [tuple(task.subgoals) for task in tasks],
        f"{label}:actions": [tuple(task.actions) for task in tasks],
    }


def environment_probes(label: str, name: str, seeds: Iterable[int]) -> dict[str, list[Probe]]:
    """The same three for PilotRL environment tasks: the first observation (the goal and what the agent
    sees), the expert's plan from the start and the expert's actions to success."""
    observations: list[Probe] = []
    plans: list[Probe] = []
    actions: list[Probe] = []
    for seed in seeds:
        env = make_env(name)
        observations.append(env.reset(seed))
        plans.append(tuple(env.expert_plan()))
        taken = []
        while not env.done:
            taken.append(env.expert_action())
            env.step(taken[-1])
        actions.append(tuple(taken))
    return {f"{label}:question": observations, f"{label}:subgoals": plans, f"{label}:actions": actions}


def generated_probes(tasks: int = 3000, env_tasks: int = 50, suite_seed: int = 0) -> dict[str, list[Probe]]:
    """The bundled suites (`sources.GENERATORS`: maths, QA, web): `tasks` of each split at `suite_seed` (3000
    and seed 0 cover every bundled config), and the maths suite's near held-out set. PilotRL's environments:
    `env_tasks` training seeds (from 0) of the held-in ones and `env_tasks` evaluation seeds (from
    `pilotrl.eval_seed`) of all six."""
    probes: dict[str, list[Probe]] = {}
    for kind, generate in GENERATORS.items():
        for split in SPLITS:
            probes |= task_probes(f"{kind.replace('_', '-')}-{split}", generate(split, tasks, suite_seed))
    probes |= task_probes(f"suite-{NEAR}", generate_suite(NEAR, tasks, suite_seed))
    eval_seed = PilotRLSettings().eval_seed
    for name in (*HELDIN, *HELDOUT):
        if name in HELDIN:
            probes |= environment_probes(f"{name}-train", name, range(env_tasks))
        probes |= environment_probes(f"{name}-eval", name, range(eval_seed, eval_seed + env_tasks))
    return probes


def benchmark_probes(gsm8k_test: str | Path | None = None, svamp: str | Path | None = None) -> dict[str, list[Probe]]:
    """The questions of GSM8K test and SVAMP, for each file given that exists (their loaders check the rows)."""
    probes: dict[str, list[Probe]] = {}
    for label, path, load in (("gsm8k-test", gsm8k_test, load_gsm8k), ("svamp", svamp, load_svamp)):
        if path is not None and Path(path).is_file():
            probes[f"{label}:question"] = [task.question for task in load(path)]
    return probes


def evaluation_probes(
    tasks: int = 3000,
    env_tasks: int = 50,
    suite_seed: int = 0,
    gsm8k_test: str | Path | None = None,
    svamp: str | Path | None = None,
) -> dict[str, list[Probe]]:
    """Every task text a run trains or evaluates on after pretraining, by probe set (`generated_probes`,
    `benchmark_probes`)."""
    return generated_probes(tasks, env_tasks, suite_seed) | benchmark_probes(gsm8k_test, svamp)


def leakage_report(
    settings: CorpusSettings, seed: int, shared_data_dir: str | Path | None, tasks: int = 3000, env_tasks: int = 50
) -> dict:
    """The corpus's record, its verbatim overlap (every document, every probe set, `VERBATIM_N`) and its
    skeleton overlap (generated documents, the bundled suites and environments, `SKELETON_N`).

    GSM8K test and SVAMP are probed when `shared_data_dir` holds `gsm8k/test.jsonl` and `svamp/SVAMP.json`;
    they are real text, written from no template, so only verbatim."""
    docs, record = build_corpus(settings, seed)
    real = set(gsm8k_documents(settings.gsm8k_train)) if settings.gsm8k_train and settings.gsm8k_repeats else set()
    generated = [doc for doc in docs if doc not in real]
    suites = generated_probes(tasks, env_tasks)
    shared = Path(shared_data_dir) if shared_data_dir is not None else None
    benchmarks = benchmark_probes(shared / "gsm8k" / "test.jsonl", shared / "svamp" / "SVAMP.json") if shared else {}
    return {
        "corpus": record,
        "verbatim": overlap_report(docs, suites | benchmarks, VERBATIM_N, skeletons=False),
        "skeleton": overlap_report(generated, suites, SKELETON_N, skeletons=True),
    }
