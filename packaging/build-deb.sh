#!/usr/bin/env bash
# Build the Debian package of flowplane: target/debian/flowplane_<version>-1_<arch>.deb
#   the binary (release profile), the systemd unit, /etc/default/flowplane, an example
#   configuration, the Grafana dashboard and the operator's docs (crates/flowplane/Cargo.toml,
#   [package.metadata.deb], lists them).
# Installs cargo-deb (the Rust ecosystem's Debian packager) first if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_DEB_VERSION=3.8.0
if ! cargo deb --version >/dev/null 2>&1; then
  echo "build-deb.sh: installing cargo-deb $CARGO_DEB_VERSION"
  cargo install cargo-deb --version "$CARGO_DEB_VERSION" --locked --quiet
fi
# Stripped, as Debian installs binaries (no debug line tables or symbol table; a panic still prints
# its message and location).
cargo deb -p flowplane --locked --strip --no-separate-debug-symbols "$@"
