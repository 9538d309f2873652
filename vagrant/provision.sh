#!/usr/bin/env bash
# Provision the EchelonFlow kernel-datapath VM (Debian 11 bullseye), as root:
#   Open vSwitch with the kernel datapath (openvswitch module loaded and persisted), Mininet, iperf3,
#   ethtool, and a Python 3.9 venv with ryu 4.34 (ryu-manager) and this project (vagrant/venv.sh).
#
#   provision.sh [PROJECT_DIR] [VENV]        defaults: /vagrant /opt/echelon
#
# Vagrant uploads this file to /tmp before running it, so everything else is found via PROJECT_DIR.
# Idempotent: each step first checks whether its result is already there and then does nothing.
set -euo pipefail

PROJECT_DIR="${1:-/vagrant}"
VENV="${2:-/opt/echelon}"

APT_PACKAGES=(
    openvswitch-switch mininet iperf3 ethtool iputils-ping iproute2 kmod
    python3 python3-venv python3-dev build-essential
)

say() { echo "provision: $*" >&2; }
die() {
    echo "provision: error: $*" >&2
    exit 2
}

[[ $EUID -eq 0 ]] || die "run me as root (vagrant's shell provisioner does)"
[[ -f "$PROJECT_DIR/pyproject.toml" ]] || die "'$PROJECT_DIR' is not the EchelonFlow project (no pyproject.toml)"
[[ -f "$PROJECT_DIR/vagrant/venv.sh" ]] || die "'$PROJECT_DIR/vagrant/venv.sh' is missing"

# shellcheck source=/dev/null
. /etc/os-release
if [[ "${ID:-}" != "debian" || "${VERSION_CODENAME:-}" != "bullseye" ]]; then
    say "warning: written for Debian 11 bullseye, this is ${PRETTY_NAME:-unknown}; continuing"
fi

# 1. Debian packages (apt-get runs only when something is missing).
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    say "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# 2. The Open vSwitch kernel datapath: load the module now and at every boot.
MODULES_CONF=/etc/modules-load.d/echelon-openvswitch.conf
if [[ "$(cat "$MODULES_CONF" 2>/dev/null)" != "openvswitch" ]]; then
    say "loading openvswitch at boot ($MODULES_CONF)"
    echo "openvswitch" >"$MODULES_CONF"
fi
if [[ ! -d /sys/module/openvswitch ]]; then
    say "modprobe openvswitch"
    modprobe openvswitch || die "modprobe openvswitch failed: this kernel ($(uname -r)) has no OVS module"
fi
[[ -d /sys/module/openvswitch ]] || die "the openvswitch kernel module is not loaded"

# 3. ovs-vswitchd running, and it must offer the kernel ("system") datapath.
if ! systemctl is-active --quiet openvswitch-switch; then
    say "starting openvswitch-switch"
    systemctl enable --now openvswitch-switch
fi
if ! systemctl is-enabled --quiet openvswitch-switch; then
    systemctl enable openvswitch-switch
fi
DP_TYPES="$(ovs-vsctl --timeout=10 get Open_vSwitch . datapath_types)"
[[ "$DP_TYPES" == *system* ]] || die "Open vSwitch offers datapaths $DP_TYPES, not the kernel 'system' one"

# 4. The Ryu venv with the project (pinned; a stamp makes a re-run a no-op).
bash "$PROJECT_DIR/vagrant/venv.sh" --python /usr/bin/python3 --venv "$VENV" --system-site-packages \
    --project "$PROJECT_DIR" --with vm
"$VENV/bin/python" -c 'import mininet.net' || die "Debian's mininet module is not importable from $VENV"

# 5. `sudo echelon` / `sudo ryu-manager` without the venv path (sudo's secure_path has /usr/local/bin).
for tool in echelon ryu-manager; do
    if [[ "$(readlink "/usr/local/bin/$tool" 2>/dev/null)" != "$VENV/bin/$tool" ]]; then
        ln -sfn "$VENV/bin/$tool" "/usr/local/bin/$tool"
    fi
done

say "ready: kernel datapath ($DP_TYPES), $("$VENV/bin/ryu-manager" --version 2>&1), $("$VENV/bin/python" --version)"
say "try:   sudo ryu-manager $PROJECT_DIR/controller/app.py      sudo echelon emulate fig2"
