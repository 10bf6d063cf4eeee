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
#   step 1 (background, idle priority): PARALLEL_TEST_PKGS, two at a time, and beside them
#           RULETEST_DIR's and CHART_TEST_DIR's packages (their own modules, no lab either)
#   step 2: every other package, one at a time; of SOLO_TEST_PKGS, all but SOLO_TESTS
#           (and never BENCH_ONLY_TESTS: real control-plane labs a benchmark runs instead)
#   step 3: SOLO_TESTS of SOLO_TEST_PKGS, one package at a time, once step 1 has ended
#
# The test binaries of steps 2 and 3 are linked ahead, in the background at idle priority, in the
# order they run (`go test -c`), and run from there: linked by `go test -p 1`, each of the 28
# packages spent 10-20 s linking in the foreground, between two labs, with the cores otherwise
# idle; the SOLO packages were linked twice. A lab's run waits only for its own binary.
#
# Environment: GO (default go), GOTEST_FLAGS (split into words, as make does; test flags such as
# -run, -skip, -v go to the test binaries as -test.<flag>, build flags such as -race, -tags to
# `go test -c`).
set -euo pipefail

GO=${GO:-go}
: "${PARALLEL_TEST_PKGS:?}" "${SOLO_TEST_PKGS:?}" "${SOLO_TESTS:?}" "${BENCH_ONLY_TESTS:?}" "${RULETEST_DIR:?}" "${CHART_TEST_DIR:?}"
read -r -a flags <<<"${GOTEST_FLAGS:-}"
# flags split for the prelinked binaries: build flags to `go test -c`, the rest to the binary.
buildflags=()
testflags=()
for f in "${flags[@]}"; do
	case "$f" in
	-race | -msan | -asan | -cover | -tags=* | -covermode=* | -coverpkg=* | -gcflags=* | -ldflags=* | -trimpath | -mod=*)
		buildflags+=("$f") ;;
	-test.*) testflags+=("$f") ;;
	-*) testflags+=("-test.${f#-}") ;;
	*) testflags+=("$f") ;; # the value of the flag before it (-run Foo)
	esac
done

began=$(date +%s)
elapsed() { echo "$(($(date +%s) - began)) s"; }

work=$(mktemp -d "${TMPDIR:-/tmp}/caplb-test-XXXXXX")
bg=""
linker=""
stopgroup() {
	if [ -n "$1" ] && kill -0 "$1" 2>/dev/null; then
		kill -- "-$1" 2>/dev/null || kill "$1" 2>/dev/null || true
		wait "$1" 2>/dev/null || true
	fi
}
cleanup() {
	stopgroup "$bg"
	stopgroup "$linker"
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
echo "go test, step 1 of 3: $(count "$parallel") packages without network labs, two at a time, and beside them" \
	"$RULETEST_DIR/... and $CHART_TEST_DIR/... (their own modules), in the background at idle CPU" \
	"priority (${idle[*]}); their output follows step 2"
# set -m: the background step gets its own process group, so that cleanup stops its test
# binaries and API servers too.
set -m
(
	set +m # its background jobs stay in its process group, which cleanup stops
	rc=0
	# The two own modules beside the packages, not after them: run last, their build and tests
	# were the tail that step 3 waited for.
	modules=()
	for dir in "$RULETEST_DIR" "$CHART_TEST_DIR"; do
		(cd "$dir" && "${idle[@]}" "$GO" test -count=1 -timeout 10m "${flags[@]}" ./...) >"$work/module.${#modules[@]}.log" 2>&1 &
		modules+=("$!:$dir")
	done
	"${idle[@]}" "$GO" test -count=1 -p 2 -timeout 30m "${flags[@]}" $parallel || rc=1
	echo "go test, step 1: the packages ended after $(elapsed)"
	for i in "${!modules[@]}"; do
		echo "go test, step 1: ${modules[$i]#*:}/... (its own module)"
		wait "${modules[$i]%%:*}" || rc=1
		cat "$work/module.$i.log"
	done
	echo "go test, step 1 ended after $(elapsed)"
	exit "$rc"
) >"$work/step1.log" 2>&1 &
bg=$!
set +m

# The prelinker: steps 2 and 3's test binaries, in the order they run, into $work/tests/<n>.test;
# <n>.done says the link ended (with <n>.log holding what it printed when it failed).
tests="$work/tests"
mkdir -p "$tests"
mapfile -t ordered < <(printf '%s\n' $labs $solo)
set -m
(
	for i in "${!ordered[@]}"; do
		# The first at normal priority: no lab runs before it, and step 1 waits.
		prio=("${idle[@]}")
		[ "$i" -eq 0 ] && prio=()
		if ! "${prio[@]}" "$GO" test -c -o "$tests/$i.test" "${buildflags[@]}" "${ordered[$i]}" >"$tests/$i.log" 2>&1; then
			echo failed >"$tests/$i.failed"
		fi
		touch "$tests/$i.done"
	done
) &
linker=$!
set +m

# runpkg index pkg [test flags...] runs a prelinked test binary in its package's directory, as
# go test does, and prints go test's summary line.
runpkg() {
	local i=$1 pkg=$2
	shift 2
	while [ ! -e "$tests/$i.done" ]; do
		if ! kill -0 "$linker" 2>/dev/null && [ ! -e "$tests/$i.done" ]; then
			echo "FAIL	$pkg [the prelinker stopped before linking it]"
			return 1
		fi
		sleep 0.2
	done
	if [ -e "$tests/$i.failed" ]; then
		cat "$tests/$i.log"
		echo "FAIL	$pkg [build failed]"
		return 1
	fi
	if [ ! -x "$tests/$i.test" ]; then
		echo "?   	$pkg	[no test files]"
		return 0
	fi
	local dir start rc=0
	dir=$("$GO" list -f '{{.Dir}}' "$pkg")
	start=$(date +%s%N)
	# As go test with a package list: the output of a passing package is shown only with -v.
	local out="$tests/$i.out"
	if [[ " ${testflags[*]} " == *" -test.v"* ]]; then
		out=/dev/stdout
	fi
	(cd "$dir" && "$tests/$i.test" -test.count=1 -test.timeout=40m -test.paniconexit0 "$@" "${testflags[@]}") >"$out" 2>&1 || rc=$?
	if [ "$rc" -ne 0 ] && [ "$out" != /dev/stdout ]; then
		cat "$out"
	fi
	local ms=$((($(date +%s%N) - start) / 1000000))
	local secs
	secs=$(printf '%d.%03ds' $((ms / 1000)) $((ms % 1000)))
	if [ "$rc" -eq 0 ]; then
		printf 'ok  \t%s\t%s\n' "$pkg" "$secs"
	else
		printf 'FAIL\t%s\t%s\n' "$pkg" "$secs"
	fi
	return "$rc"
}
# index of a package in ordered
indexof() {
	local i
	for i in "${!ordered[@]}"; do
		if [ "${ordered[$i]}" = "$1" ]; then
			echo "$i"
			return
		fi
	done
}

echo "go test, step 2 of 3: $(count "$labs") packages with light network labs, one at a time (lab" \
	"binaries built once into $CAPLB_LAB_BINDIR; test binaries linked ahead into $tests)"
rc2=0
for pkg in $labs; do
	runpkg "$(indexof "$pkg")" "$pkg" || rc2=1
done
echo "go test, step 2 of 3, continued: the tests of $(count "$solo") packages with real control-plane" \
	"labs that boot none (all but $SOLO_TESTS and $BENCH_ONLY_TESTS, which make bench-takeover runs)"
for pkg in $solo; do
	runpkg "$(indexof "$pkg")" "$pkg" -test.skip "$SOLO_TESTS|$BENCH_ONLY_TESTS" || rc2=1
done

if kill -0 "$bg" 2>/dev/null; then
	echo "go test: step 2 ended after $(elapsed); waiting for step 1 to end"
else
	echo "go test: step 2 ended after $(elapsed)"
fi
rc1=0
wait "$bg" || rc1=$?
bg=""
echo "go test, step 1 of 3 (output):"
cat "$work/step1.log"
if [ "$rc1" -ne 0 ] || [ "$rc2" -ne 0 ]; then
	echo "go test: step 1 exited $rc1, step 2 exited $rc2" >&2
	exit 1
fi

echo "go test, step 3 of 3: the tests that boot real control planes ($SOLO_TESTS), one package at" \
	"a time, alone"
rc3=0
for pkg in $solo; do
	runpkg "$(indexof "$pkg")" "$pkg" -test.run "$SOLO_TESTS" || rc3=1
done
if [ "$rc3" -ne 0 ]; then
	echo "go test: step 3 failed after $(elapsed)" >&2
	exit 1
fi
echo "go test: step 3 ended after $(elapsed)"
