"""Text and tokens: built-in corpora, chat formats, tokenizers, evaluation prompts, and the
target's regenerated training text and states.
"""
