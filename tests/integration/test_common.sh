#!/usr/bin/env bash
# The helpers of common.sh fail when they should, since every shell test passes through them: a failure
# counted anywhere (a subshell included) ends the test non-zero, also one that then exits 0 or 77;
# fatal stops at once; same_losses, one_line and expect_cmd refuse what differs. Each case is a small
# script sourcing common.sh, run as a test of its own; no program is run.
source "$(dirname "$0")/common.sh"
COMMON="$(cd "$(dirname "$0")" && pwd)/common.sh"

# case_ NAME RC PATTERN BODY: a script of `source common.sh` and BODY exits RC and prints a line matching
# PATTERN (grep -E)
case_() {
  local name=$1 want=$2 pattern=$3 rc=0
  printf 'source "%s"\n%s\n' "$COMMON" "$4" > "$WORK/case.sh"
  bash "$WORK/case.sh" > "$WORK/case.out" 2>&1 || rc=$?
  if [[ $rc -eq $want ]] && grep -qE -- "$pattern" "$WORK/case.out"; then
    echo "ok   $name: exit $rc"
  else
    sed 's/^/     | /' "$WORK/case.out"
    fail "$name: exit $rc (want $want and a line matching '$pattern')"
  fi
}
case_ "no failure" 0 '^PASS$' 'check "true" true; xt_finish'
case_ "a failed check" 1 '^1 failure\(s\)$' 'check "false" false; check "true" true; xt_finish'
case_ "a failure in a subshell" 1 '^FAIL: inner' '( fail "inner" ); xt_finish'
case_ "a failure, then exit 0" 1 '^1 failure\(s\)$' 'fail "x"; exit 0'
case_ "a failure, then exit 77 (skipped)" 1 '^1 failure\(s\)$' 'fail "x"; exit 77'
case_ "a skip without failures stays a skip" 77 'SKIP' 'echo SKIP; exit 77'
case_ "fatal ends the test" 1 '^FAIL: stop' 'fatal "stop"; echo reached; xt_finish'
! grep -q reached "$WORK/case.out" || fail "fatal: the test went on"
case_ "xt_at_exit runs, \$WORK is removed" 0 '^cleanup .*xtrain-test' 'xt_at_exit "echo cleanup \$WORK"; echo "$WORK" > '"$WORK"'/gone'
[[ ! -e "$(cat "$WORK/gone")" ]] || fail "\$WORK left behind"
# same_losses: the same text from step FIRST on, each step FIRST..LAST once, in order
LOSSES='m() { for s in "$@"; do echo "{\"type\": \"train\", \"step\": ${s%:*}, \"loss\": ${s#*:}}"; done; }
m 1:2.5 2:2.25 3:2.0 > "$WORK/a.jsonl"; m 2:2.25 3:2.0 > "$WORK/b.jsonl"; m 1:2.5 2:2.25 3:2.0000001 > "$WORK/c.jsonl"
m 1:2.5 2:2.25 2:2.25 > "$WORK/d.jsonl"; m 1:2.5 2:2.25 3:2.0 4:1.5 > "$WORK/e.jsonl"'
case_ "same_losses: equal" 0 '^PASS$' "$LOSSES"$'\n''same_losses a.jsonl a.jsonl 1 3 && same_losses a.jsonl b.jsonl 2 3 && xt_finish'
case_ "same_losses: a last bit differs" 1 '' "$LOSSES"$'\n''same_losses a.jsonl c.jsonl 1 3'
case_ "same_losses: a step missing" 1 '' "$LOSSES"$'\n''same_losses a.jsonl b.jsonl 1 3'
case_ "same_losses: a step twice" 1 '' "$LOSSES"$'\n''same_losses d.jsonl d.jsonl 1 3'
case_ "same_losses: a step past LAST" 1 '' "$LOSSES"$'\n''same_losses a.jsonl e.jsonl 1 3'
# one_line and expect_cmd
case_ "one_line: one matching line" 0 '^PASS$' 'echo "error: x" > "$WORK/l"; one_line "$WORK/l" "^error"; xt_finish'
case_ "one_line: two lines" 1 "^FAIL: expected one line" 'printf "error: x\nmore\n" > "$WORK/l"; one_line "$WORK/l" "^error"; xt_finish'
case_ "expect_cmd: the rank line" 0 '^ok +r ' 'expect_cmd r 1 "boom" bash -c "echo \"rank 1 (h): boom\" >&2; exit 1"; xt_finish'
case_ "expect_cmd: another exit code" 1 '^FAIL: r ' 'expect_cmd r 2 "boom" bash -c "echo \"rank 1 (h): boom\" >&2; exit 1"; xt_finish'
case_ "expect_cmd: no rank line" 1 '^FAIL: r ' 'expect_cmd r 1 "boom" bash -c "echo boom >&2; exit 1"; xt_finish'
case_ "expect_cmd: past MAX_S" 1 '^FAIL: r .*limit 1s' \
  'MAX_S=1 expect_cmd r 1 "boom" bash -c "sleep 2.2; echo \"rank 1 (h): boom\" >&2; exit 1"; xt_finish'
xt_finish
