#!/usr/bin/env bash
# The project's test command: the README names it and .ci/run calls it.
#   unit and case tests (race detector on, built with -tags invariants: the core's assertions
#   compiled in, internal/invariants), then the crash suite built with -tags chaos
#   (failpoints compiled in; SIGKILLed child processes at every write-path step), then the
#   mutation check, then the crash simulator (scripts/sim.sh: 20,000 crash recoveries, 20 s of
#   clusters of 3 and 5 members, and
#   every planted bug caught), then the Python client and engine backends' tests (python/tests, pytest
#   with Debian's /usr/bin/python3; their fixture builds storenode and starts it). gotestsum (a go.mod tool) runs go test and, when a test fails, repeats
#   the failed tests' output at the end, where a truncated CI log still shows it.
set -euo pipefail
cd "$(dirname "$0")/.."
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then echo "gofmt needed: $unformatted"; exit 1; fi
go vet ./...
go vet -tags chaos ./...
go vet -tags invariants ./...
gotest() { go tool gotestsum --format "$1" -- "${@:2}"; }
gotest standard-quiet -race -tags invariants -count=1 -timeout 20m ./...
gotest standard-verbose -tags chaos -count=1 -timeout 30m ./chaos/...
gotest standard-verbose -count=1 -run TestMutants ./chaos
# The crash simulator (chaos/sim): a seed replays exactly; at least 20,000 power losses with
# recovery and every invariant checked; 20 s of clusters of 3 and 5 members; then each
# planted bug, caught within 60 s.
GODEBUG=asyncpreemptoff=1 go test -count=5 -run TestSeedReplays ./chaos/sim
./scripts/sim.sh --crashes 20000
./scripts/sim.sh --members 3,5 --seconds 20
./scripts/sim.sh --mutants
/usr/bin/python3 -m pytest -q python/tests
