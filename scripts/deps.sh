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
