#!/usr/bin/env bash
# The README, docs/, code comments, scripts and packaging speak of the product: what flowplane
# does, how to use it, what was measured (with command and machine). They do not tell how it was
# made (issue numbers, work sessions, who did what, commit hashes in prose, paths of past runs) and
# do not point to design notes outside the repository. This check keeps it that way; it is part of
# scripts/test.sh. Stored benchmark results (docs/results/) record commits as provenance, by design.
set -euo pipefail
cd "$(dirname "$0")/.."

files=$(git ls-files README.md docs crates scripts packaging configs fuzz .ci \
  | grep -vE '^docs/results/|\.(png|pcap|json)$|^fuzz/seeds/frames/' \
  | grep -v '^scripts/check-text.sh$')

fail=0
check() {  # check DESCRIPTION REGEX [FILES...]: no line may match (case-insensitive ERE)
  local what=$1 re=$2
  shift 2
  local hits
  hits=$(grep -nHiE "$re" "$@" 2>/dev/null || true)
  if [ -n "$hits" ]; then
    echo "check-text.sh: $what:" >&2
    echo "$hits" | head -n 20 >&2
    fail=1
  fi
}

# shellcheck disable=SC2086
check "issue numbers" '\bissues? ?#?[0-9]+\b|\bgh-[0-9]+' $files
# shellcheck disable=SC2086
check "work sessions" '\b(this|that|the previous|an earlier|a later|the next|last|current) session\b|\bsession.s (final|own)\b|\bsessions? (started|ended)\b' $files
# shellcheck disable=SC2086
check "who did what" "\\bother engineers\\b|\\bengineers'|\\b(rebuilt|changed|edited|run) by others\\b" $files
# shellcheck disable=SC2086
check "design notes outside the repository" '\.\./shared\b|\bshared/(DESIGN|PLATFORM|CONVENTIONS|seeds)\b' $files
# Prose of the user-facing docs: no commit hashes, no temporary paths of past runs (the benchmark
# lock, a documented convention, is the one /tmp path allowed).
docs=$(echo "$files" | grep -E '^(README\.md|docs/)')
# shellcheck disable=SC2086
check "commit hashes in prose" '\bcommits? [0-9a-f]{7,40}\b|\b(at|of|since|before|after) [0-9a-f]{7,40}\b|\b[0-9a-f]{7}\.\.[0-9a-f]{7}\b' $docs
tmp_hits=$(grep -nHoE '/tmp/[A-Za-z0-9_.-]+' $docs 2>/dev/null | grep -v '/tmp/flowplane-bench\.lock$' || true)
if [ -n "$tmp_hits" ]; then
  echo "check-text.sh: temporary paths of past runs:" >&2
  echo "$tmp_hits" | head -n 20 >&2
  fail=1
fi
# Links in the docs point into the repository.
# shellcheck disable=SC2086
check "links outside the repository" '\]\((https?|ftp)://' $docs

if [ "$fail" -ne 0 ]; then
  echo "check-text.sh: product text check failed (see above)" >&2
  exit 1
fi
echo "check-text.sh: ok"
