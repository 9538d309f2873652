#!/usr/bin/env bash
# Make (or refresh) a Python 3.8/3.9 virtualenv in which `ryu-manager` (Ryu 4.34) runs the controller.
#
# One script for two places, so the CI check exercises exactly what the VM runs:
#   - the Vagrant VM (vagrant/provision.sh):  --python /usr/bin/python3 --venv /opt/echelon
#                                             --system-site-packages --project /vagrant --with vm
#   - the CI check venv (tests/test_py39.py): --python .../python3.9 --venv .venv39 --with test
#
# Every package comes from vagrant/requirements-vm.txt (all pinned with ==).  Ryu 4.34 is built without
# build isolation against the pinned setuptools (< 68), because its pbr-based setup.py fails with newer ones.
# Idempotent: a stamp records the inputs; when they are unchanged nothing is touched.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CONSTRAINTS="$HERE/requirements-vm.txt"

usage() {
    cat >&2 <<'EOF'
usage: venv.sh --python PYTHON --venv DIR [--system-site-packages] [--project DIR] [--with vm|test]...
  --python PYTHON          interpreter to build the venv from (must be Python 3.8 or 3.9)
  --venv DIR               where the virtualenv lives (created if missing)
  --system-site-packages   let the venv see the system's packages (Debian's mininet module)
  --project DIR            also install this project (editable, no dependencies: they are pinned here)
  --with vm                add the experiment packages (matplotlib, scapy)
  --with test              add the test packages (pytest, hypothesis)
EOF
    exit 2
}

die() {
    echo "venv.sh: error: $*" >&2
    exit 2
}

PYTHON=""
VENV=""
PROJECT=""
SYSTEM_SITE=0
GROUPS_WANTED=()
while (($#)); do
    case "$1" in
        --python) PYTHON="${2:-}"; shift 2 || usage ;;
        --venv) VENV="${2:-}"; shift 2 || usage ;;
        --project) PROJECT="${2:-}"; shift 2 || usage ;;
        --system-site-packages) SYSTEM_SITE=1; shift ;;
        --with)
            case "${2:-}" in
                vm | test) GROUPS_WANTED+=("$2") ;;
                *) die "--with takes 'vm' or 'test', not '${2:-}'" ;;
            esac
            shift 2
            ;;
        -h | --help) usage ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
[[ -n "$PYTHON" && -n "$VENV" ]] || usage
[[ -x "$PYTHON" ]] || die "python interpreter '$PYTHON' does not exist or is not executable"
[[ -f "$CONSTRAINTS" ]] || die "constraints file '$CONSTRAINTS' is missing"
if [[ -n "$PROJECT" ]]; then
    [[ -f "$PROJECT/pyproject.toml" ]] || die "project directory '$PROJECT' has no pyproject.toml"
fi

# Ryu 4.34 + eventlet 0.30.2 only run on Python 3.8/3.9 (docs/platform.md, "Ryu and os-ken").
PY_VERSION="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
case "$PY_VERSION" in
    3.8 | 3.9) ;;
    *) die "ryu 4.34 needs Python 3.8 or 3.9; '$PYTHON' is Python $PY_VERSION" ;;
esac

say() { echo "venv.sh: $*" >&2; }

# Two runs on one venv (e.g. parallel test sessions) must not interleave pip.
mkdir -p "$(dirname "$VENV")"
VENV="$(cd "$(dirname "$VENV")" && pwd)/$(basename "$VENV")"
LOCK="${TMPDIR:-/tmp}/echelon-venv.$(printf '%s' "$VENV" | sha256sum | cut -c1-16).lock"
exec 9>"$LOCK"
flock 9

PACKAGES=(ryu eventlet dnspython networkx numpy prometheus_client)
for group in "${GROUPS_WANTED[@]+"${GROUPS_WANTED[@]}"}"; do
    case "$group" in
        vm) PACKAGES+=(matplotlib scapy) ;;
        test) PACKAGES+=(pytest hypothesis) ;;
    esac
done

INPUTS_SHA="$(cat "$CONSTRAINTS" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)"
WANT_STAMP="$INPUTS_SHA python=$PY_VERSION system-site=$SYSTEM_SITE packages=${PACKAGES[*]} project=$PROJECT"
STAMP="$VENV/.echelon-stamp"
if [[ -x "$VENV/bin/python" && "$(cat "$STAMP" 2>/dev/null)" == "$WANT_STAMP" ]]; then
    say "$VENV is up to date"
    exit 0
fi

if [[ ! -x "$VENV/bin/python" ]]; then
    say "creating virtualenv $VENV from $PYTHON (Python $PY_VERSION)"
    VENV_ARGS=()
    ((SYSTEM_SITE)) && VENV_ARGS+=(--system-site-packages)
    "$PYTHON" -m venv "${VENV_ARGS[@]+"${VENV_ARGS[@]}"}" "$VENV"
    # Keep git, ruff and pytest out of a venv that lives inside the source tree.
    echo '*' >"$VENV/.gitignore"
fi

LOG="$VENV/echelon-pip.log"
: >"$LOG"
pip_install() {
    if ! "$VENV/bin/python" -m pip install --disable-pip-version-check -c "$CONSTRAINTS" "$@" >>"$LOG" 2>&1; then
        tail -n 40 "$LOG" >&2
        die "pip install $* failed (full log: $LOG)"
    fi
}

say "installing pinned build tools"
pip_install --upgrade pip setuptools wheel pbr
say "installing ${PACKAGES[*]} (pinned, ryu built against setuptools<68)"
pip_install --no-build-isolation "${PACKAGES[@]}"
if [[ -n "$PROJECT" ]]; then
    say "installing the project from $PROJECT (editable)"
    pip_install --no-deps -e "$PROJECT"
fi
if ! "$VENV/bin/python" -m pip check >>"$LOG" 2>&1; then
    tail -n 20 "$LOG" >&2
    die "pip check found broken requirements (full log: $LOG)"
fi
# The point of this venv: ryu-manager must start under this interpreter.
"$VENV/bin/ryu-manager" --version >>"$LOG" 2>&1 || die "ryu-manager --version failed (full log: $LOG)"
echo "$WANT_STAMP" >"$STAMP"
say "$VENV ready ($("$VENV/bin/ryu-manager" --version 2>&1))"
