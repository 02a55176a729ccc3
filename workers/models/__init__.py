"""Targets and the target's side of drafting: built-in targets, loading from checkpoints, hub ids,
folders and GGUF, RoPE, captured hidden states.
"""
