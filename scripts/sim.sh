#!/usr/bin/env bash
# The crash simulator (chaos/sim): the write path on a simulated disk, power losses at every
# kind of persistence point, recovery and every invariant, one seed per chain of crashes.
#
#   scripts/sim.sh [--seconds N | --crashes N] [--seed S]   run fresh seeds (default 60 s)
#   scripts/sim.sh --seed S [--focus F]                     replay exactly seed S (a failure
#                                                           prints this line, with its focus)
#   scripts/sim.sh ... --members 1,3,5                      cluster sizes the seeds cycle through
#                                                           (default 1; a cluster seed's failure
#                                                           prints --members N)
#   scripts/sim.sh --mutants [--seconds N]                  each planted bug, time to catch
#   scripts/sim.sh --soak [--seconds N]                     fresh seeds for N s (default 4 h),
#                                                           printing only failing seeds
#
# The last line is one JSON object: seeds, crash_recoveries, invariant_checks, violations,
# seconds, crashes_by_point, crash_recoveries_by_members (and restarts, exits, bit_flips, faults,
# signatures, leader_kills, partitions, network_drops); --mutants prints per mutant its time
# to catch. A violation prints the one command that replays its seed, and the exit status
# is 1. docs/chaos.md, "The crash simulator", explains the model.
set -uo pipefail
cd "$(dirname "$0")/.."
seconds="" crashes="" seed="" focus="" members="" mode=run
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --crashes) crashes=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --focus) focus=$2; shift 2 ;;
    --members) members=$2; shift 2 ;;
    --mutants) mode=mutants; shift ;;
    --soak) mode=soak; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "sim.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
# One P and no asynchronous preemption: with the simulator's worlds in a synctest bubble
# (virtual time), a seed then makes the same choices in the same order on every run.
# randseednop=0 lets a cluster seed seed Raft's election timeouts (math/rand's global source).
export GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1,randseednop=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Built with -tags chaos so that a planted bug can be switched on (internal/mutant).
go test -tags chaos -c -o "$tmp/sim.test" ./chaos/sim || exit 2

# simulate ARGS...: one run of TestSimulate; prints its failure lines and leaves its JSON in
# $tmp/stats.json. Returns the test's status.
simulate() {
  rm -f "$tmp/stats.json"
  "$tmp/sim.test" -test.run '^TestSimulate$' -test.count=1 -test.timeout 0 -sim.json "$tmp/stats.json" "$@" \
    > "$tmp/out" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then
    # The failure and its replay through this script (not the base seed's go test line).
    grep -E 'seed [0-9]+.*, world|replay: .*scripts/sim.sh|panic|FAIL' "$tmp/out" | grep -v '^{' | head -20
    [ -s "$tmp/stats.json" ] || tail -40 "$tmp/out"
  fi
  return $rc
}

case $mode in
run)
  args=()
  [ -n "$focus" ] && args+=(-sim.focus "$focus")
  [ -n "$members" ] && args+=(-sim.members "$members")
  if [ -n "$seed" ] && [ -z "$seconds$crashes" ]; then
    args+=(-seed "$seed" -sim.seeds 1)
  else
    [ -n "$seed" ] && args+=(-seed "$seed")
    [ -n "$crashes" ] && args+=(-sim.crashes "$crashes")
    [ -n "$seconds" ] && args+=(-sim.time "${seconds}s")
    [ -z "$seconds$crashes" ] && args+=(-sim.time 60s)
  fi
  simulate "${args[@]}"
  rc=$?
  cat "$tmp/stats.json" 2>/dev/null
  exit $rc
  ;;
mutants)
  budget=${seconds:-60}
  mutants=$(sed -n 's/^\t[A-Za-z]* *= "\([a-z0-9-]*\)".*/\1/p' internal/mutant/doc.go)
  caught=0 total=0 json=""
  printf '%-34s %-10s %s\n' mutant caught seconds
  for m in $mutants; do
    total=$((total + 1))
    start=$(date +%s.%N)
    KVOFFLOAD_MUTANT=$m simulate -sim.time "${budget}s" >/dev/null
    rc=$?
    secs=$(python3 -c "import time;print(round(time.time()-$start,1))")
    if [ $rc -ne 0 ]; then caught=$((caught + 1)); c=true; else c=false; fi
    printf '%-34s %-10s %s\n' "$m" "$c" "$secs"
    json+="${json:+,}{\"mutant\":\"$m\",\"caught\":$c,\"seconds\":$secs}"
  done
  echo "{\"mutants\":[$json],\"caught\":$caught,\"total\":$total}"
  [ "$caught" -eq "$total" ]
  ;;
soak)
  end=$(( $(date +%s) + ${seconds:-14400} ))
  failed=0
  while [ "$(date +%s)" -lt "$end" ]; do
    if ! simulate -sim.time 300s >/dev/null; then
      failed=$((failed + 1))
      grep -E 'replay: ' "$tmp/out"
    fi
  done
  echo "{\"soak_failures\":$failed}"
  [ "$failed" -eq 0 ]
  ;;
esac
