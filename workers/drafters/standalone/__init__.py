"""The standalone family: an independent small causal LM that shares the target's tokenizer."""
