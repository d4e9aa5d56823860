"""Bridges to other libraries. :mod:`attnkit.integrations.hf` registers attnkit as a Hugging Face
``transformers`` attention implementation; importing this package imports nothing heavy."""
