"""Speculative decoding engines: the chain engine's acceptance rule and decode loop, draft trees,
and HF `generate` as a second engine.
"""
