"""On-policy distillation of a trained drafter (Draft-OPD): rollouts of real speculative decoding with
the drafter (`rollout`), batched with the target's states and distributions (`batch`), and replayed
from the verification anchors with the accepted and rejected streams' losses (`replay`)."""
