"""benchmarks/gpu_check.py's own logic (a run of it takes a GPU, or minutes on a CPU with --tiny): sampled tokens
counted up to each row's first EOS, and --tiny changing only the sizes not given."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gpu_check  # noqa: E402


class FixedModel:
    """A model whose `generate` returns the same three rows: a 2-token prompt, then 4 sampled tokens (EOS is 2)."""

    device = torch.device("cpu")

    def generate(self, **kwargs) -> torch.Tensor:
        return torch.tensor([[5, 6, 7, 2, 2, 0], [5, 6, 8, 9, 2, 0], [5, 6, 8, 8, 8, 8]])


def test_sampled_tokens_are_counted_through_each_rows_first_eos_and_no_further():
    counter = gpu_check.CountingModel(FixedModel())
    counter.generate(input_ids=torch.zeros(3, 2, dtype=torch.long), eos_token_id=2)
    assert counter.tokens == 2 + 3 + 4


def test_tiny_sets_only_the_sizes_not_given_and_one_step_is_refused():
    full, tiny = gpu_check._arguments([]), gpu_check._arguments(["--tiny", "--layers", "3"])
    assert (full.hidden, full.layers, full.vocab, full.train_batch, full.k) == (2048, 22, 32000, None, 15)
    assert (tiny.hidden, tiny.layers, tiny.vocab, tiny.train_batch, tiny.k) == (64, 3, 512, 2, 15)
    with pytest.raises(SystemExit):
        gpu_check._arguments(["--tiny", "--steps", "1"])
