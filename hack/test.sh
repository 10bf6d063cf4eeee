#!/usr/bin/env bash
# make test's go test steps; the Makefile passes the package lists (PARALLEL_TEST_PKGS,
# SOLO_TEST_PKGS) and the two own modules (RULETEST_DIR, CHART_TEST_DIR).
#
# On 2 cores the labs spend most of their time waiting on timers, and the packages without a
# lab need CPU, not quiet: so they run side by side, the packages without a lab at idle CPU
# priority (chrt --idle: the kernel runs them only on cycles nothing else wants, and a lab's
# process that wakes preempts them at once), beside the light labs. The tests that boot real
# control planes (SOLO_TESTS of SOLO_TEST_PKGS: load 15 on 2 cores while a member boots) start
# only after both, alone, so that neither they nor the idle packages' timeouts are measured
# against the other.
#
#   step 1 (background, idle priority): PARALLEL_TEST_PKGS, two at a time
#   step 2: every other package, one at a time (-p 1); of SOLO_TEST_PKGS, all but SOLO_TESTS
#   step 3: SOLO_TESTS of SOLO_TEST_PKGS, one package at a time, once step 1 has ended
#   steps 4, 5: RULETEST_DIR and CHART_TEST_DIR, their own modules
#
# Environment: GO (default go), GOTEST_FLAGS (split into words, as make does).
set -euo pipefail

GO=${GO:-go}
: "${PARALLEL_TEST_PKGS:?}" "${SOLO_TEST_PKGS:?}" "${SOLO_TESTS:?}" "${RULETEST_DIR:?}" "${CHART_TEST_DIR:?}"
read -r -a flags <<<"${GOTEST_FLAGS:-}"

work=$(mktemp -d "${TMPDIR:-/tmp}/caplb-test-XXXXXX")
bg=""
cleanup() {
	if [ -n "$bg" ] && kill -0 "$bg" 2>/dev/null; then
		kill -- "-$bg" 2>/dev/null || kill "$bg" 2>/dev/null || true
		wait "$bg" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM # runs cleanup: the background step stops with this script
# The labs build each binary they run once per run and share it (e2e/lab/build.go).
export CAPLB_LAB_BINDIR="$work/bin"
mkdir -p "$CAPLB_LAB_BINDIR"

parallel=$($GO list $PARALLEL_TEST_PKGS)
solo=$($GO list $SOLO_TEST_PKGS)
labs=$($GO list ./... | grep -vxF "$parallel" | grep -vxF "$solo")
count() { echo "$1" | wc -l; }

idle=(chrt --idle 0)
if ! command -v chrt >/dev/null; then
	idle=(nice -n 19)
fi
echo "go test, step 1 of 5: $(count "$parallel") packages without network labs, two at a time, in the" \
	"background at idle CPU priority (${idle[*]}); their output follows step 2"
# set -m: the background step gets its own process group, so that cleanup stops its test
# binaries and API servers too.
set -m
"${idle[@]}" "$GO" test -count=1 -p 2 -timeout 30m "${flags[@]}" $parallel >"$work/step1.log" 2>&1 &
bg=$!
set +m

echo "go test, step 2 of 5: $(count "$labs") packages with light network labs, one at a time (lab" \
	"binaries built once into $CAPLB_LAB_BINDIR)"
rc2=0
"$GO" test -count=1 -p 1 -timeout 40m "${flags[@]}" $labs || rc2=$?
echo "go test, step 2 of 5, continued: the tests of $(count "$solo") packages with real control-plane" \
	"labs that boot none (all but $SOLO_TESTS)"
"$GO" test -count=1 -p 1 -timeout 40m -skip "$SOLO_TESTS" "${flags[@]}" $solo || rc2=$?

if kill -0 "$bg" 2>/dev/null; then
	echo "go test: waiting for step 1 to end"
fi
rc1=0
wait "$bg" || rc1=$?
bg=""
echo "go test, step 1 of 5 (output):"
cat "$work/step1.log"
if [ "$rc1" -ne 0 ] || [ "$rc2" -ne 0 ]; then
	echo "go test: step 1 exited $rc1, step 2 exited $rc2" >&2
	exit 1
fi

echo "go test, step 3 of 5: the tests that boot real control planes ($SOLO_TESTS), one package at" \
	"a time, alone"
"$GO" test -count=1 -p 1 -timeout 40m -run "$SOLO_TESTS" "${flags[@]}" $solo

echo "go test, step 4 of 5: $RULETEST_DIR/... (its own module)"
(cd "$RULETEST_DIR" && "$GO" test -count=1 -timeout 10m "${flags[@]}" ./...)
echo "go test, step 5 of 5: $CHART_TEST_DIR/... (its own module)"
(cd "$CHART_TEST_DIR" && "$GO" test -count=1 -timeout 10m "${flags[@]}" ./...)
