#!/usr/bin/env bash
# Soak: loop the chaos tiers with fresh seeds until the duration has passed, keeping the log,
# data directories and porcupine output of every failing run (docs/chaos.md, "Seeds, reproduction").
#
#   scripts/soak.sh [DURATION] [OUTDIR] [TIER-REGEXP]
#   scripts/soak.sh 4h soak-out                      # every chaos tier, four hours
#   scripts/soak.sh 30m soak-out 'TestKill|TestPowerLoss'
#
# Each iteration prints its seed; a failing one is kept in OUTDIR/<n>-<seed>/ with its log and
# artifacts, and its one-line reproduction command is in the log. Add failing seeds to the
# regression list in docs/chaos.md.
set -uo pipefail
cd "$(dirname "$0")/.."
duration=${1:-4h}
out=${2:-soak-out}
tiers=${3:-.}
secs=$(python3 -c "import re,sys;m=re.fullmatch(r'(\d+)([smh]?)','$duration');sys.exit('bad duration') if not m else print(int(m[1])*{'':1,'s':1,'m':60,'h':3600}[m[2]])")
end=$(( $(date +%s) + secs ))
mkdir -p "$out"
go test -tags chaos -c -o "$out/chaos.test" ./chaos || exit 1
runs=0 failures=0
while [ "$(date +%s)" -lt "$end" ]; do
  runs=$((runs + 1))
  seed=$(( $(date +%s%N) % 9000000000000000000 ))
  dir="$out/$runs-$seed"
  mkdir -p "$dir/artifacts"
  echo "soak run $runs seed $seed"
  if (cd chaos && KVOFFLOAD_CHAOS_ARTIFACTS="$PWD/../$dir/artifacts" "../$out/chaos.test" -test.count=1 -test.run "$tiers" -test.v -seed "$seed") > "$dir/log" 2>&1; then
    rm -rf "$dir"
  else
    failures=$((failures + 1))
    echo "  FAILED: kept $dir"
  fi
  grep -h "chaos totals" "$dir/log" 2>/dev/null || true
done
echo "soak: $runs runs, $failures failed, output in $out"
[ "$failures" -eq 0 ]
