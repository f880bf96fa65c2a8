#!/usr/bin/env bash
# --metrics on a full disk (a 16 KiB tmpfs, filled; root only, else skipped): the 2-rank run ends within
# seconds with exit 1 and one line naming the file and the cause, and leaves no empty metrics file.
source "$(dirname "$0")/common.sh"
xt_data
mkdir "$WORK/full"
mount -t tmpfs -o size=16k tmpfs "$WORK/full" 2> /dev/null || { echo "SKIP: cannot mount a tmpfs (needs root)"; exit 77; }
xt_at_exit 'umount "$WORK/full"'
dd if=/dev/zero of="$WORK/full/fill" bs=4k count=8 2> /dev/null || true  # fills it: ENOSPC
rc=0
timeout 60 "${MPIRUN[@]}" -q -np 2 "$XT" "${DATA[@]}" "${TINY[@]}" --steps 3 --metrics "$WORK/full/m.jsonl" > "$WORK/run.log" 2>&1 || rc=$?
[[ $rc -eq 1 ]] || { cat "$WORK/run.log"; fail "exit $rc, want 1"; }
grep -q "^rank 0 (.*): error: step 1: cannot write metrics file $WORK/full/m.jsonl: No space left on device; removed it, it held no record$" \
  "$WORK/run.log" || { cat "$WORK/run.log"; fail "no line naming the metrics file and the cause"; }
[[ $(grep -c "error" "$WORK/run.log") -eq 1 ]] || { cat "$WORK/run.log"; fail "more than one error line"; }
[[ ! -e "$WORK/full/m.jsonl" ]] || fail "an empty metrics file was left ($(stat -c %s "$WORK/full/m.jsonl") bytes)"
xt_finish "ok   --metrics on a full disk: exit 1, $(grep "error" "$WORK/run.log"), no file left"
