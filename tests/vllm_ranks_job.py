"""The multi-process half of tests/models/test_vllm.py's launch test, run by `torch.distributed.run` over gloo on
CPUs: `MODEL OUT`. Each rank starts its vLLM engine (vLLM's external launcher) for one prompt, fewer than the ranks,
so rank 1 has none of its own; then rank 0 alone writes turns inside a phase every rank entered. Each rank writes
what it got back to OUT/rank<rank>.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from coalign.core import ranks
from coalign.models.backends import VLLMBackend
from coalign.models.load import load_tokenizer


def main(model: str, out: Path) -> None:
    ranks.set_timeout(300)  # a rank left waiting fails the run, before the test's clock
    ranks.barrier()
    tokenizer = load_tokenizer(model)
    backend = VLLMBackend(model, tokenizer, False, 0.4, max_model_len=256)
    texts = backend.complete(["step forward"], 4, 1, 0.0, 1.0)
    with backend.phase():
        ids = [tokenizer("open door")["input_ids"]]
        turns = backend.turns(ids, 4, 0.0, 1.0) if ranks.is_main() else []
    ranks.barrier()
    (out / f"rank{ranks.rank()}.json").write_text(json.dumps({"texts": texts, "turns": turns}))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
