"""Are copied words the same tokens where they are copied? An AdaPlan executor copies its plan step into its
`Action:` line; a token-for-token copy is easy for a small model, a copy whose tokens differ is not. This
counts, over the expert's training episodes of a PilotRL config, the turns whose action also stands in the
thought above it, and how many of those tokenize the action's words identically in both places.

    .venv/bin/python benchmarks/token_identity.py coalign-base-2 [/path/to/a/model ...] [--config tiny-pilotrl]
"""

from __future__ import annotations

import argparse

from coalign.config import load_config
from coalign.models.load import load_tokenizer
from coalign.models.bases import starting_point
from coalign.pilotrl.recipe import training_episodes


def copied_actions(episodes: list[dict]) -> list[tuple[str, int, int, int]]:
    """(turn text, where the action stands in the thought, where in the Action line, its length) per model turn."""
    out = []
    for episode in episodes:
        for message in episode["messages"]:
            text = message["content"]
            if message["role"] != "assistant" or "\nAction: " not in text:
                continue
            action = text.rsplit("\nAction: ", 1)[1].strip()
            source, target = text.find(action, max(text.find("\nThought: "), 0)), text.rfind(action)
            if action and 0 <= source < target:
                out.append((text, source, target, len(action)))
    return out


def token_span(encoded, start: int, end: int) -> list[int]:
    """The ids of the tokens that overlap characters [start, end)."""
    return [i for i, (a, b) in zip(encoded.input_ids, encoded.offset_mapping) if a < end and b > start]


def identical_share(tokenizer, copies: list[tuple[str, int, int, int]]) -> float:
    """The share of copies whose characters are covered by the same token ids at source and target."""
    same = 0
    for text, source, target, length in copies:
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        same += token_span(encoded, source, source + length) == token_span(encoded, target, target + length)
    return same / max(len(copies), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", help="shipped base names or model folders (their tokenizers)")
    parser.add_argument("--config", default="tiny-pilotrl", help="a PilotRL config: its held-in environments")
    args = parser.parse_args()
    settings = load_config(args.config).pilotrl
    copies = copied_actions(training_episodes(settings, seed=0))
    print(f"{len(copies)} expert turns whose action repeats words of their thought ({args.config})")
    for model in args.models:
        share = identical_share(load_tokenizer(starting_point(model) or model), copies)
        print(f"{model:<40} the same tokens in both places: {share:.1%}")


if __name__ == "__main__":
    main()
