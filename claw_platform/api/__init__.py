"""The REST API (A1-A6, U5): DRF under /api/v1/, the OpenAI-compatible /v1/, API keys,
the tenant event stream, inbound webhooks and device pairing."""
