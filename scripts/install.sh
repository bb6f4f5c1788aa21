#!/usr/bin/env bash
# Install the project into .venv: `scripts/install.sh` for running it, `--dev` for its tests.
# Checks for Python >= 3.11 and Java 17+ (Spark needs it) first, and says how to get them.
set -euo pipefail
cd "$(dirname "$0")/.."

extras="embedded"
if [[ "${1:-}" == "--dev" ]]; then extras="embedded,dev"; fi

python="${PYTHON:-python3}"
if ! "$python" -c 'import sys; raise SystemExit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "error: Python 3.11 or newer is needed (tried '$python'; set PYTHON=... to choose)." >&2
    exit 1
fi

java_major() {
    local java="java"
    if [[ -n "${JAVA_HOME:-}" ]]; then java="$JAVA_HOME/bin/java"; fi
    "$java" -version 2>&1 | sed -n 's/.*version "\([0-9]*\)[."].*/\1/p' | head -n 1
}
major="$(java_major || true)"
if [[ -z "$major" || "$major" -lt 17 ]]; then
    found="none was found"
    if [[ -n "$major" ]]; then found="found Java $major"; fi
    echo "error: Java 17 or newer is needed by Spark; $found (java on PATH or \$JAVA_HOME)." >&2
    cat >&2 <<'MSG'
  Debian/Ubuntu:  sudo apt-get install -y openjdk-17-jre-headless
  Fedora/RHEL:    sudo dnf install -y java-17-openjdk-headless
  macOS:          brew install openjdk@17
Then run this command again (or set JAVA_HOME to the JDK's directory).
MSG
    exit 1
fi

# The tests run a real Prometheus and `promtool` (Debian's `prometheus` package).
if [[ "$extras" == *dev* ]] && ! command -v promtool >/dev/null; then
    as_root=()
    if [[ "$(id -u)" != 0 ]] && command -v sudo >/dev/null; then as_root=(sudo -n); fi
    if command -v apt-get >/dev/null; then
        echo "installing Debian's prometheus package (the tests run Prometheus and promtool) ..."
        export DEBIAN_FRONTEND=noninteractive
        apt_install=("${as_root[@]}" apt-get install -y -qq --no-install-recommends prometheus)
        "${apt_install[@]}" >/dev/null 2>&1 \
            || { "${as_root[@]}" apt-get update -qq >/dev/null 2>&1 \
                 && "${apt_install[@]}" >/dev/null 2>&1; } || true
    fi
    if ! command -v promtool >/dev/null; then
        # The rest of the suite runs; the monitoring tests fail, naming what is missing.
        echo "warning: Prometheus and promtool could not be installed; the monitoring" >&2
        echo "  tests will fail. Debian/Ubuntu: sudo apt-get install -y prometheus;" >&2
        echo "  elsewhere: https://prometheus.io/download/ (prometheus and promtool on PATH)" >&2
    fi
fi

if [[ ! -x .venv/bin/python ]]; then
    "$python" -m venv .venv
fi
# Reinstall only when the project's requirements changed since the last install.
stamp=".venv/.installed-${extras/,/-}"
wanted="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$wanted" ]]; then
    exit 0
fi
echo "installing podd-replica[$extras] into .venv (Java $major found) ..."
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[$extras]"
echo "$wanted" > "$stamp"
