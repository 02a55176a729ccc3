"""The EAGLE-3 family: a drafter head fed by the target's hidden states, trained with training-time test."""
