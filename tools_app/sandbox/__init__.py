"""Where shell commands run (T15): a bubblewrap sandbox where the host allows it,
else the host with confinement (Landlock where the kernel has it, limits, a clean
environment). See :mod:`tools_app.sandbox.shell`."""
