"""Pretraining coalign's base model: a general corpus, its tokenizer, and the causal-LM training run."""
