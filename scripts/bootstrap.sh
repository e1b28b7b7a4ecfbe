# Sourced by run.sh and test.sh: install what Meshgate needs on a fresh Debian
# machine (as root) into ./.venv, pinned by requirements/constraints.txt.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"

apt_install() {
    # Only touch apt when something is missing: apt-get update costs seconds.
    local missing=()
    for pkg in "$@"; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "bootstrap: apt-get install ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

ensure_python() {
    if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
        apt_install python3 python3-venv python3-pip
    fi
}

install_kubernetes_client() {  # extras
    # The test extra's Kubernetes client (tests/unit/test_kubernetes_manifests.py), without its
    # dependencies: it requires python-dateutil>=3, celery pins ==2.9.0.post0, and the models the
    # test uses need neither; what they do need is in pyproject.toml's test extra.
    [ "$1" = test ] || return 0
    "$VENV/bin/python" -m pip install -q --no-deps -c "$ROOT/requirements/constraints.txt" kubernetes
}

ensure_venv() {  # extras, e.g. "test"
    local extras="$1"
    ensure_python
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    local stamp="$VENV/.installed-$extras"
    local digest
    digest="$(cat "$ROOT/pyproject.toml" "$ROOT/requirements/constraints.txt" | sha256sum | cut -c1-16)"
    if [ "$(cat "$stamp" 2>/dev/null)" != "$digest" ]; then
        # pip's own chatter goes to a log; its tail is shown only if it fails.
        local log="$VENV/pip-install.log"
        echo "bootstrap: installing Python packages ($extras) into .venv; pip's output: $log"
        if ! { "$VENV/bin/python" -m pip install -q --upgrade pip &&
               "$VENV/bin/python" -m pip install -q -c "$ROOT/requirements/constraints.txt" -e "$ROOT[$extras]" &&
               install_kubernetes_client "$extras"; } \
                >"$log" 2>&1; then
            tail -n 30 "$log" >&2
            echo "bootstrap: pip install failed; the whole output is in $log" >&2
            exit 1
        fi
        echo "$digest" > "$stamp"
    fi
}
