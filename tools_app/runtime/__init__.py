"""Django-side assembly of a run's tool extensions: configuration cache, the tenant's
SSRF guard, hooks, and the MCP, HTTP and skill tool sets."""
