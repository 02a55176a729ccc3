"""A serving engine in the loop: vLLM started in its own Python environment, as a separate process,
to check and serve what specfleet chose.
"""
