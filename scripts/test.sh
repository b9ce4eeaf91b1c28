#!/usr/bin/env bash
# flowplane's whole test suite, exactly as CI runs it (.ci/run calls this script).
#   formatting, clippy (warnings are errors), unit + property + stress tests of every crate,
#   the loom model checks of the concurrency protocols, the end-to-end tests, the fuzz targets,
#   the Debian package (built, installed, run, removed), the API docs (built, warnings are
#   errors), and two documentation checks: README and docs speak of the product only, and every
#   published benchmark figure is a stored result.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "dependencies"
scripts/deps.sh

step "format"
cargo fmt --all --check

step "product text"
# README, docs and comments describe the product, not how it was made (scripts/check-text.sh).
scripts/check-text.sh

step "stored results"
# Every figure in the README's benchmark section comes from a stored run in docs/results/.
python3 scripts/results.py --check

step "clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "api docs"
# Every crate's documentation builds without warnings (broken or ambiguous links).
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked

step "tests"
cargo test --workspace --locked

step "loom model checks"
# A separate target dir: --cfg loom changes every crate's build.
LOOM_MAX_PREEMPTIONS=3 RUSTFLAGS="--cfg loom" \
  cargo test --locked --release --target-dir target/loom -p fp-cuckoo --test loom_version
# One preemption: a 64-byte bucket is eight loads and a slot three fields, so deeper bounds
# take many minutes; one already fails a move outside the odd-version window.
LOOM_MAX_PREEMPTIONS=1 RUSTFLAGS="--cfg loom" \
  cargo test --locked --release --target-dir target/loom -p fp-cuckoo --test loom_quotient
LOOM_MAX_PREEMPTIONS=3 RUSTFLAGS="--cfg loom" \
  cargo test --locked --release --target-dir target/loom -p fp-setsep --test loom_update
LOOM_MAX_PREEMPTIONS=3 RUSTFLAGS="--cfg loom" \
  cargo test --locked --release --target-dir target/loom -p fp-export --test loom_ring

step "fuzzing"
# The six fp-wire fuzz targets, 20 s each from the stored seeds; any crash, leak, timeout or
# out-of-memory input fails the suite (fuzz/run.sh installs nightly and cargo-fuzz when missing).
fuzz/run.sh 20

step "debian package"
# Built with cargo-deb, installed with apt as on a fresh machine, the demo run from the installed
# binary, the unit verified, then purged.
packaging/test-package.sh

step "ok"
