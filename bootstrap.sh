#!/usr/bin/env bash
# Idempotent set-up on Debian 12 as root: Debian packages, then a virtualenv with the project in it.
# Re-running is cheap: each step is skipped when a stamp says its inputs have not changed.
#   bash bootstrap.sh          # runtime (simulator, fabric, controller, emulation, plots)
#   bash bootstrap.sh --test   # plus what the test suite needs
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${ECHELON_VENV:-$ROOT/.venv}"
WANT_TEST=0
[[ "${1:-}" == "--test" ]] && WANT_TEST=1

APT_RUNTIME=(openvswitch-switch mininet iperf3 ethtool iputils-ping iproute2 python3-venv python3-networkx)
APT_TEST=(shellcheck ruby chromium chromium-driver)

say() { echo "bootstrap: $*" >&2; }

missing_debs() {
    local pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || echo "$pkg"
    done
}

install_debs() {
    local missing
    mapfile -t missing < <(missing_debs "$@")
    if ((${#missing[@]})); then
        say "installing Debian packages: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
}

if [[ $EUID -ne 0 ]]; then
    say "run me as root (Open vSwitch and Mininet need it)"
    exit 2
fi

install_debs "${APT_RUNTIME[@]}"
((WANT_TEST)) && install_debs "${APT_TEST[@]}"

# Debian's mininet module lives in /usr/lib/python3/dist-packages, so the venv is made from Debian's
# Python with system site packages visible.
EXTRAS="controller,experiments,fast,sweep"
((WANT_TEST)) && EXTRAS="$EXTRAS,test"
STAMP="$VENV/.echelon-stamp"
PYPROJECT_HASH="$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)"
WANT_STAMP="$EXTRAS $PYPROJECT_HASH"
if [[ ! -x "$VENV/bin/python" ]]; then
    say "creating virtualenv $VENV"
    /usr/bin/python3 -m venv --system-site-packages "$VENV"
fi
HAVE_STAMP="$(cat "$STAMP" 2>/dev/null || true)"
# a virtualenv set up for the tests holds the runtime too: `./echelon demo` after `tests/run` installs nothing
if [[ "$HAVE_STAMP" != "$WANT_STAMP"* && "$HAVE_STAMP" != "$EXTRAS,test $PYPROJECT_HASH"* ]]; then
    say "installing the project into $VENV ($EXTRAS)"
    "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1
    "$VENV/bin/python" -m pip install -q -e "${ROOT}[${EXTRAS}]" 2>"$VENV/pip.log" || { cat "$VENV/pip.log" >&2; exit 1; }
    # Chakra trace reader: only its protobuf schema is used (echelonflow/importers/chakra.py); its declared
    # dependencies (HolisticTraceAnalysis, pandas, graphviz, ...) serve its converters, so skip them.
    "$VENV/bin/python" -m pip install -q --no-deps "mlc-chakra==1.0.0" 2>"$VENV/pip.log" \
        || { cat "$VENV/pip.log" >&2; exit 1; }
    echo "$WANT_STAMP" >"$STAMP"
fi
# numba compiles the schedulers' kernels on first use; do it here, off every clock (simulator/precompile.py).
"$VENV/bin/python" -m simulator.precompile
