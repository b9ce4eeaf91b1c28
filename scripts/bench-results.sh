#!/usr/bin/env bash
# Run published benchmarks on the current code and store each run's records, with its provenance
# (commit, command, date, machine), as docs/results/NAME.json; then regenerate the README's tables
# from them (scripts/results.py). Builds the release binaries first. Holds the benchmark lock so no
# other benchmark or build shares the cores.
#   scripts/bench-results.sh lb live fib      # some
#   scripts/bench-results.sh all              # every published benchmark (hours; the billion-entry
#                                             # runs need about 20 GiB of memory, and root to
#                                             # reserve huge pages)
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A CMD=(
  [lb]="lb"
  [live]="live"
  [handover]="handover"
  [switch-memory]="switch --parts memory --billion"
  [switch-live-fib]="switch --parts live_fib --billion"
  [switch-latency]="switch --parts latency"
  [fib]="fib --plots docs/plots"
  [flowstate]="flowstate --plots docs/plots"
  [maglev]="maglev --plots docs/plots"
  [setsep]="setsep --plots docs/plots"
  [flowcache]="flowcache --plots docs/plots"
  [switch-live]="switch --parts live"
  [cluster]="cluster"
  [fib-dpdk]="fib --cases dpdk --sizes 64M,256M --threads 1"
  [fib-quotient]="fib --cases quotient --sizes 1M,16M,64M,256M --billion"
)
ORDER=(lb live handover switch-memory switch-live-fib switch-latency fib flowstate maglev setsep flowcache switch-live cluster fib-dpdk fib-quotient)
# Runs whose tables should sit on explicit 2 MiB pages: how many to reserve for the run (released
# after it; without them the tables fall back to transparent huge pages, which the records say).
declare -A RESERVE=(
  [switch-live-fib]=4500   # a 1G-entry FIB: 8.4 GiB
  [fib-dpdk]=8800          # DPDK's EAL takes its memory from them (a 256M-entry rte_hash with
                           # extendable buckets: about 12 GiB), and flowplane's tables get them
                           # too (2.1 GiB compact, 1.4 GiB quotiented): equal pages
)
# Runs that need the benchmark binary's optional peers (cargo features of fp-bench).
declare -A FEATURES=(
  [fib-dpdk]=dpdk          # DPDK's rte_hash (Debian's libdpdk-dev)
)

names=("$@")
[ ${#names[@]} -gt 0 ] || { echo "usage: $0 NAME... | all  (names: ${ORDER[*]})" >&2; exit 2; }
[ "${names[0]}" = all ] && names=("${ORDER[@]}")
for n in "${names[@]}"; do
  [ -n "${CMD[$n]:-}" ] || { echo "$0: unknown benchmark $n (names: ${ORDER[*]})" >&2; exit 2; }
done
if [ -n "$(git status --porcelain --untracked-files=no -- crates Cargo.toml Cargo.lock)" ]; then
  echo "$0: warning: sources differ from the commit; the results will say 'modified'" >&2
fi

features=()
for n in "${names[@]}"; do
  [ -z "${FEATURES[$n]:-}" ] || features+=("${FEATURES[$n]}")
done
# DPDK's development package for the rte_hash peer, on a machine that lacks it (Debian).
if [[ " ${features[*]} " == *" dpdk "* ]] && ! pkg-config --exists libdpdk 2>/dev/null; then
  [ "$(id -u)" -eq 0 ] || { echo "$0: the dpdk peer needs libdpdk-dev (run as root to install it)" >&2; exit 1; }
  echo "$0: installing libdpdk-dev for the rte_hash peer"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libdpdk-dev >/dev/null
fi
if [ ${#features[@]} -gt 0 ]; then
  cargo build --release --locked -p flowplane -p fp-bench --features "fp-bench/$(IFS=,; echo "${features[*]}")"
else
  cargo build --release --locked -p flowplane -p fp-bench
fi
mkdir -p docs/results docs/plots
for n in "${names[@]}"; do
  out="docs/results/$n.json"
  echo "== $n: flowplane-bench ${CMD[$n]} --json $out"
  rm -f "$out.tmp"
  pages="${RESERVE[$n]:-0}"
  [ "$pages" = 0 ] || echo "$pages" > /proc/sys/vm/nr_hugepages
  # shellcheck disable=SC2086
  flock /tmp/flowplane-bench.lock target/release/flowplane-bench ${CMD[$n]} --json "$out.tmp" \
    || { [ "$pages" = 0 ] || echo 0 > /proc/sys/vm/nr_hugepages; exit 1; }
  [ "$pages" = 0 ] || echo 0 > /proc/sys/vm/nr_hugepages
  mv "$out.tmp" "$out"
done
python3 scripts/results.py
