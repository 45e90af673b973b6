"""Where shell commands run (T15, issue 21): the bubblewrap sandbox, which cannot
see the product's own state and has its own network namespace; on the host
(Landlock, limits, a clean environment) only where the operator allows it. See
:mod:`tools_app.sandbox.shell` and :mod:`tools_app.sandbox.operator`."""
