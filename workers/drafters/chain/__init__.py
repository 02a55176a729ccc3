"""What the drafter families that chain on their own hidden state share (EAGLE-3, MTP heads): the
chain's attention (model.py), drafting every chain of a text for measurement (drafting.py), the
engine's proposer (proposer.py), the training loss and loop (loss.py, training.py), the checkpoint
(checkpoint.py) and the family methods that only use these (family.py). A family package says
what its layer reads and computes, how it is trained and how it is served."""
