#!/usr/bin/env bash
# `make test`: the builds and the test suite side by side, then the tests on the real node alone.
#
#   1. hack/build-all.sh in the background (seconds when everything is cached), its output in a
#      log printed when it ends.
#   2. Meanwhile every test but the node's, on $BELAY_TEST_WORKERS pytest workers (pytest-xdist,
#      one file per worker at a time; default: one worker per core, at least two). A test that
#      needs a built component waits until the builds have ended (tests/testenv/availability.py).
#   3. Then, with nothing else running, the tests on the real node (-m node): they compare the
#      whole machine's state before and after (links, rules, cgroups, sysctls, ...), which a test
#      running beside them could change.
#
# Why: one pytest keeps about one of two cores busy (its tests mostly wait on the processes they
# start), and on a fresh machine the builds take about 20 minutes before the first component test
# can start. Side by side, the same builds and tests take far less wall time.
#
# The script fails if a build fails, if a pytest run fails, or if one collected no test (pytest's
# exit 5 is never a pass here). For a part of the suite, run .venv/bin/pytest directly.
set -uo pipefail
cd "$(dirname "$0")/.."

pytest=.venv/bin/pytest
cores=$(nproc)
workers=${BELAY_TEST_WORKERS:-$((cores > 2 ? cores : 2))}
work=$(mktemp -d "${TMPDIR:-/tmp}/belay-test-run.XXXXXX")
say() { printf '\n=== %s\n' "$*"; }

build_pid=
interrupted=0
clean_up() {
  # Builds still running (the tests were interrupted) run in a session of their own (setsid):
  # their whole process group goes.
  [[ -n $build_pid ]] && kill -TERM -- "-$build_pid" 2>/dev/null
  rm -rf "$work"
}
trap clean_up EXIT
trap 'interrupted=1' INT TERM

outcome() {
  local name=$1 status=$2
  case $status in
    0) echo "$name: passed" ;;
    5) echo "$name: FAILED (pytest collected no tests)" ;;
    *) echo "$name: FAILED (pytest exit $status)" ;;
  esac
}

builds_ended=$work/builds.status
say "building the components in the background (hack/build-all.sh; its output follows when it ends)"
setsid bash -c 'bash hack/build-all.sh >"$1" 2>&1; echo $? >"$2.partial"; mv "$2.partial" "$2"' \
  build-all "$work/build.log" "$builds_ended" &
build_pid=$!

say "every test but the node's, on $workers workers, beside the builds"
# xdist hands out the files with the most tests first (its default; ties in the order of the
# collection). Those are component files here (the conformance suite's etcd cases, the manifests
# the apiserver checks), so on a cold machine the workers wait for the builds, which then have the
# machine: measured faster (43 min) than the tests first in collection order, which starved the
# builds (they had not built the control plane after 28 min).
# A worker that dies (a crash in a test's process) ends the run with its test named: a replacement
# worker has been seen to leave pytest-xdist waiting for good.
BELAY_BUILDS_UNDER_WAY=$builds_ended "$pytest" -n "$workers" --dist loadfile --max-worker-restart=0 -m "not node"
suite_status=$?
((interrupted)) && exit 130

wait "$build_pid"
build_pid=
build_status=$(cat "$builds_ended" 2>/dev/null || echo 1)
say "hack/build-all.sh (exit $build_status)"
cat "$work/build.log"

node_status=
if ((build_status == 0)); then
  say "the tests on the real node, alone"
  "$pytest" -m node
  node_status=$?
  ((interrupted)) && exit 130
fi

say "summary"
failed=0
if ((build_status == 0)); then echo "builds: done"; else echo "builds: FAILED (exit $build_status)"; failed=1; fi
outcome "every test but the node's" "$suite_status"
((suite_status == 0)) || failed=1
if [[ -n $node_status ]]; then
  outcome "the tests on the real node" "$node_status"
  ((node_status == 0)) || failed=1
else
  echo "the tests on the real node: not run (the builds failed)"
fi
exit $failed
