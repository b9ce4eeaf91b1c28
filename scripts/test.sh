#!/usr/bin/env bash
# flowplane's whole test suite, exactly as CI runs it (.ci/run calls this script).
#   formatting, clippy (warnings are errors), unit + property + stress tests of every crate,
#   the loom model checks of the concurrency protocols, the end-to-end tests, and the Debian
#   package (built, installed, run, removed).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "dependencies"
scripts/deps.sh

step "format"
cargo fmt --all --check

step "clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "tests"
cargo test --workspace --locked

step "loom model checks"
# A separate target dir: --cfg loom changes every crate's build.
LOOM_MAX_PREEMPTIONS=3 RUSTFLAGS="--cfg loom" \
  cargo test --locked --release --target-dir target/loom -p fp-cuckoo --test loom_version
LOOM_MAX_PREEMPTIONS=3 RUSTFLAGS="--cfg loom" \
  cargo test --locked --release --target-dir target/loom -p fp-setsep --test loom_update

step "debian package"
# Built with cargo-deb, installed with apt as on a fresh machine, the demo run from the installed
# binary, the unit verified, then purged.
packaging/test-package.sh

step "ok"
