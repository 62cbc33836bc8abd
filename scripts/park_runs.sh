#!/usr/bin/env bash
# The device copies the working tree (tracked and untracked-not-ignored files, at most 64 MiB); the newest
# claims report keeps its raw runs in the tree (~37 MB), which with the wheels passes that limit. Before a
# device call that does not read them:  bash scripts/park_runs.sh park   (moves analysis/reports/*/runs into
# .parked/, git-ignored; the tracked files read as deleted, so they do not travel); after it:
# bash scripts/park_runs.sh restore   (git status is clean again).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  park)
    for d in analysis/reports/*/runs; do
      [ -d "$d" ] || continue
      mkdir -p ".parked/$(dirname "$d")" && mv "$d" ".parked/$d"
      echo "parked $d"
    done ;;
  restore)
    for d in .parked/analysis/reports/*/runs; do
      [ -d "$d" ] || continue
      t=${d#.parked/}
      [ -e "$t" ] && { echo "park_runs: $t exists, not overwritten" >&2; exit 1; }
      mv "$d" "$t" && echo "restored $t"
    done ;;
  *) echo "usage: bash scripts/park_runs.sh park|restore" >&2; exit 2 ;;
esac
