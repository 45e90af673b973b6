"""Guards every tool goes through: paths inside a workspace (T14) and the
environment a shell command may see (T15)."""
