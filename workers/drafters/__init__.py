"""Drafter families, one package each (model, training, checkpoints, export, chain drafting, engine
proposer); `registry` names them.
"""
