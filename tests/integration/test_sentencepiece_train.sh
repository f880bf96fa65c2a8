#!/usr/bin/env bash
# --tokenizer-model: a tiny model trained on 2 ranks with the committed SentencePiece test model
# (tests/vectors/spm_bpe.model, vocabulary 512), its token cache read back by a second run, --resume
# with another SentencePiece model refused (the fingerprint covers the model file), and
# xtrain_generate sampling from the checkpoint with the same model (words keep their spaces).
source "$(dirname "$0")/common.sh"
xt_data
vec="$(cd "$(dirname "$0")/../vectors" && pwd)"
SPM=(--tokenizer-model "$vec/spm_bpe.model")

"${MPIRUN[@]}" -np 2 "$XT" --data "$WORK/corpus.txt" "${SPM[@]}" "${TINY[@]}" --steps 20 --ckpt "$WORK/a.ckpt" \
  --metrics "$WORK/a.jsonl" > "$WORK/a.log" 2>&1 || { cat "$WORK/a.log"; fatal "training with --tokenizer-model"; }
python3 - "$WORK/a.jsonl" <<'PY' || fail "losses"
import json, math, sys
tr = [json.loads(l) for l in open(sys.argv[1])]
tr = [r for r in tr if r["type"] == "train"]
first, last = tr[0]["loss"], tr[-1]["loss"]
# a vocabulary of 512: the untrained loss is about ln(512) = 6.2, far below GPT-2's ln(50257) = 10.8
assert abs(first - math.log(512)) < 0.5, first
assert last < first - 0.5, (first, last)
print(f"ok   2 ranks, vocabulary 512: loss {first:.3f} -> {last:.3f}")
PY
# a second run maps the cache: same first loss, no tokenizing
"${MPIRUN[@]}" -np 2 "$XT" --data "$WORK/corpus.txt" "${SPM[@]}" "${TINY[@]}" --steps 5 --metrics "$WORK/b.jsonl" \
  > "$WORK/b.log" 2>&1 || { cat "$WORK/b.log"; fail "second run"; }
l1=$(xt_losses "$WORK/a.jsonl" | sed -n 1p); l2=$(xt_losses "$WORK/b.jsonl" | sed -n 1p)
grep -q "tokenized now: none" "$WORK/b.log" || { cat "$WORK/b.log"; fail "the second run tokenized again"; }
[[ "$l1" == "$l2" ]] && echo "ok   second run from the cache: first loss $l2" || fail "first loss $l1 vs $l2"
# another SentencePiece model of the same vocabulary size: refused on --resume
rc=0
"${MPIRUN[@]}" -np 2 "$XT" --resume "$WORK/a.ckpt" --data "$WORK/corpus.txt" --tokenizer-model "$vec/spm_unigram.model" \
  --steps 25 > "$WORK/c.log" 2>&1 || rc=$?
[[ $rc -ne 0 ]] && grep -qi "tokenizer" "$WORK/c.log" && echo "ok   --resume with another model: exit $rc, $(grep -im1 tokenizer "$WORK/c.log")" \
  || { cat "$WORK/c.log"; fail "--resume with another SentencePiece model: exit $rc"; }
# sampling: the prompt's words and the continuation keep their spaces
out=$("$XTRAIN_BIN_DIR/xtrain_generate" --ckpt "$WORK/a.ckpt" "${SPM[@]}" --prompt "The king said" --max-new-tokens 20 \
  --seed 1 2> "$WORK/g.err") || { cat "$WORK/g.err"; fail "xtrain_generate"; }
words=$(wc -w <<< "$out")
((words >= 5)) && echo "ok   xtrain_generate: $words words: $(head -c 80 <<< "$out" | tr '\n' ' ')" || fail "generate wrote '$out'"
rc=0; "$XTRAIN_BIN_DIR/xtrain_generate" --ckpt "$WORK/a.ckpt" --tokenizer-model "$vec/spm_unigram.model" --prompt x \
  --max-new-tokens 2 > /dev/null 2> "$WORK/g2.err" || rc=$?
[[ $rc -eq 2 ]] && grep -q "the model was trained with the tokenizer of fingerprint .*not the one loaded" "$WORK/g2.err" && echo "ok   xtrain_generate with another model: refused" \
  || { cat "$WORK/g2.err"; fail "xtrain_generate with another model: exit $rc"; }
xt_finish
