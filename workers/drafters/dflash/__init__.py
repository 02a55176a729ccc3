"""The DFlash family: block drafters that predict a whole block in one non-causal pass (model.py)."""
