"""The OpenAI-compatible endpoint (A3): ``/v1/chat/completions`` and ``/v1/models``."""
