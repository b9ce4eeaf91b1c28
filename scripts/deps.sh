#!/usr/bin/env bash
# Install what the test suite needs on a fresh Debian machine (idempotent; skips what is present).
# Rust itself comes with the machine (rustup stable with rustfmt and clippy).
set -euo pipefail

need=()
have() { command -v "$1" >/dev/null 2>&1; }

# Fonts for benchmark plots (plotters renders text with a system TrueType font).
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
# An independent decoder for the golden pcap tests.
have tshark || need+=(tshark)
# Live tests in network namespaces (fp-testnet, the AF_PACKET/AF_XDP port tests, end-to-end tests):
# iproute2 builds the networks, ethtool sets offloads, servers and clients run inside them, tcpdump
# captures and scapy crafts packets (Debian's /usr/bin/python3, not a pyenv one).
have ip || need+=(iproute2)
have ping || need+=(iputils-ping)
have ethtool || need+=(ethtool)
have nginx || need+=(nginx-light)
have wrk || need+=(wrk)
have iperf3 || need+=(iperf3)
have curl || need+=(curl)
have tcpdump || need+=(tcpdump)
/usr/bin/python3 -c 'import scapy' >/dev/null 2>&1 || need+=(python3-scapy)
have bird || need+=(bird2)  # BGP speaker: the VIP announcer (fp-control announce) and the scale-out tests' router
# Operations tests: a real Prometheus scrapes a live balancer; systemd-analyze checks the unit;
# setpriv (util-linux) runs the balancer with the unit's capability set.
have prometheus || need+=(prometheus)
have systemd-analyze || need+=(systemd)
have setpriv || need+=(util-linux)
# The switch's VLAN and spanning-tree tests run Open vSwitch (userspace datapath, no kernel module)
# as an independent peer: this kernel has no 802.1Q devices and no VLAN filtering in its bridge.
have ovs-vswitchd || need+=(openvswitch-switch)
# Flow export is checked by real collectors: nfdump's nfcapd (IPFIX from the balancer) and
# pmacct's sfacctd (sFlow from the switch).
have nfcapd || need+=(nfdump)
[ -x /usr/sbin/sfacctd ] || have sfacctd || need+=(pmacct)
# The cluster node keeps its entries and members in etcd; its tests run a real one.
have etcd || need+=(etcd-server)
# The QUIC test peers run on aioquic (PyPI) in the project's own virtual environment.
/usr/bin/python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)

if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "deps.sh: missing packages ${need[*]} and not root; install them and rerun" >&2
    exit 1
  fi
  echo "deps.sh: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # tshark asks whether non-root users may capture; answer no without a prompt.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# aioquic for the QUIC connection-ID routing test (crates/flowplane/tests/quic.rs looks for this
# interpreter), pinned, in target/py (removed by `cargo clean`; this script makes it again).
venv="$(cd "$(dirname "$0")/.." && pwd)/target/py"
if ! "$venv/bin/python3" -c 'import aioquic' >/dev/null 2>&1; then
  echo "deps.sh: installing aioquic into $venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check aioquic==1.7.2
fi
