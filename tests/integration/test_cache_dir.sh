#!/usr/bin/env bash
# Token caches live in --cache-dir (default $XDG_CACHE_HOME/xtrain, else ~/.cache/xtrain), named by the
# text's hash and the tokenizer, never in the data directory unless --cache-dir next-to-data asks.
# A read-only data directory with 2 ranks tokenizes each file once (one rank per node writes, the
# other maps) and the next run reuses them; a copy of a text finds its cache. An implicit cache path
# that is a directory is a warning, not an error naming an option that was not given.
source "$(dirname "$0")/common.sh"
xt_data
ARGS=("${TOK[@]}" "${TINY[@]}" --steps 1)
run() {  # run NAME NP ARGS...: xtrain_mpi, log in $WORK/NAME.log
  local name=$1 np=$2
  shift 2
  xt_run_ok "$name" mpi "$np" "${ARGS[@]}" "$@"
}
keyed() { compgen -G "$1/[0-9a-f]*-[0-9a-f]*.tokcache" > /dev/null; }  # keyed DIR: a content-named cache in DIR
count() { local n; n=$(compgen -G "$1/*.tokcache" | wc -l); [[ $n == "$2" ]]; }
mkdir "$WORK/d"
cp "$WORK/corpus.txt" "$WORK/d/a.txt"

run explicit 1 --data "$WORK/d/a.txt" --cache-dir "$WORK/cc"
check "--cache-dir: the cache lands there, named by content" keyed "$WORK/cc"
check "--cache-dir: nothing written beside the data" count "$WORK/d" 0
run xdg 1 --data "$WORK/d/a.txt"
check "default: \$XDG_CACHE_HOME/xtrain" keyed "$XDG_CACHE_HOME/xtrain"
mkdir "$WORK/home"
HOME="$WORK/home" XDG_CACHE_HOME= run home 1 --data "$WORK/d/a.txt"
check "default without XDG_CACHE_HOME: \$HOME/.cache/xtrain" keyed "$WORK/home/.cache/xtrain"
cp "$WORK/d/a.txt" "$WORK/copy.txt"
run copy 1 --data "$WORK/copy.txt" --cache-dir "$WORK/cc"
check "a copy of the text reuses its cache" grep -q "tokenized now: none" "$WORK/copy.log"
run beside 1 --data "$WORK/d/a.txt" --cache-dir next-to-data
check "--cache-dir next-to-data: <file>.tokcache" test -s "$WORK/d/a.txt.tokcache"

# a read-only data directory, 3 files, 2 ranks: each file tokenized once, then reused
mkdir "$WORK/ro"
split -n l/3 -d --additional-suffix=.txt "$WORK/corpus.txt" "$WORK/ro/part-"
ro_run() {  # ro_run NAME: the data directory read-only (a read-only bind mount as root, else mode 555)
  if ((EUID == 0)); then
    unshare -m bash -c 'mount --bind -o ro "$1" "$1" && shift && exec "$@"' _ "$WORK/ro" \
      "${MPIRUN[@]}" -np 2 "$XT" "${ARGS[@]}" --data "$WORK/ro" --cache-dir "$WORK/rc" > "$WORK/$1.log" 2>&1
  else
    chmod 555 "$WORK/ro"
    "${MPIRUN[@]}" -np 2 "$XT" "${ARGS[@]}" --data "$WORK/ro" --cache-dir "$WORK/rc" > "$WORK/$1.log" 2>&1
  fi || { cat "$WORK/$1.log"; fatal "run $1"; }
}
ro_run ro1
grep '^cache' "$WORK/ro1.log"
check "read-only data, 2 ranks: 3 files tokenized once each" grep -q "tokenized now: 3 on 2 ranks" "$WORK/ro1.log"
check "read-only data: 3 caches in --cache-dir, none beside the data" count "$WORK/rc" 3
check "read-only data: no warning" bash -c "! grep -q warning '$WORK/ro1.log'"
ro_run ro2
check "read-only data: the next run reuses the 3 caches" grep -q "tokenized now: none | caches reused: 3" "$WORK/ro2.log"
chmod 755 "$WORK/ro"

# an implicit cache path that is a directory: a warning naming it, training goes on
rm "$WORK/d/a.txt.tokcache" && mkdir "$WORK/d/a.txt.tokcache"
run dircache 1 --data "$WORK/d/a.txt" --cache-dir next-to-data
check "a directory at the implicit cache path: a warning, not an error" grep -q "warning: token cache $WORK/d/a.txt.tokcache exists and is not a regular file" "$WORK/dircache.log"
check "... and no option the user did not give is named" bash -c "! grep -q -- '--tokens-cache' '$WORK/dircache.log'"

# JSON lines: one cache per (content, --jsonl-field), written by one rank of the node; a cache beside
# the file made for another field is not reused (its header's fingerprint holds the field)
mkdir "$WORK/j"
python3 - "$WORK/corpus.txt" "$WORK/j/a.jsonl" <<'PY'
import json, sys
docs = [d for d in open(sys.argv[1], encoding="utf-8").read().split("\n\n") if d.strip()]
with open(sys.argv[2], "w") as out:
    for d in docs:  # "body": another text, so the two fields give different ids
        out.write(json.dumps({"text": d, "body": d.upper()}) + "\n")
PY
run j1 2 --data "$WORK/j/a.jsonl" --cache-dir "$WORK/jc"
grep '^cache' "$WORK/j1.log"
check "JSON lines, 2 ranks: tokenized once, on one rank" grep -q "1 JSON lines file, .* | tokenized now: 1 on 1 rank" "$WORK/j1.log"
check "JSON lines: one cache in --cache-dir, named by content" bash -c "[[ \$(compgen -G '$WORK/jc/[0-9a-f]*-[0-9a-f]*.tokcache' | wc -l) == 1 ]]"
check "JSON lines: nothing written beside the data" test "$(ls -A "$WORK/j")" == a.jsonl
run j2 2 --data "$WORK/j/a.jsonl" --cache-dir "$WORK/jc"
check "JSON lines: the next start reuses the cache" grep -q "tokenized now: none | caches reused: 1 (1 node)" "$WORK/j2.log"
run jf 2 --data "$WORK/j/a.jsonl" --cache-dir "$WORK/jc" --jsonl-field body
check "--jsonl-field body: tokenized again" grep -q "tokenized now: 1 on 1 rank" "$WORK/jf.log"
check "--jsonl-field body: a second cache" count "$WORK/jc" 2
echo '{"text": "one more document", "body": "ONE MORE"}' >> "$WORK/j/a.jsonl"
run jc 2 --data "$WORK/j/a.jsonl" --cache-dir "$WORK/jc"
check "changed content: tokenized again" grep -q "tokenized now: 1 on 1 rank" "$WORK/jc.log"
# (beside the token caches: the tokenizer's tables, one entry, data/tokenizer_cache.h)
check "changed content: a third cache, and no temporary file" test "$(ls -A "$WORK/jc" | grep -vc '\.toktables$')" == 3
check "the tokenizer's tables: one entry beside the token caches" test "$(compgen -G "$WORK/jc/*.toktables" | wc -l)" == 1
run jb1 1 --data "$WORK/j/a.jsonl" --cache-dir next-to-data
check "next-to-data: <file>.tokcache" test -s "$WORK/j/a.jsonl.tokcache"
run jb2 1 --data "$WORK/j/a.jsonl" --cache-dir next-to-data --jsonl-field body
check "next-to-data, another --jsonl-field: the first field's cache is not reused" grep -q "tokenized now: 1 on 1 rank" "$WORK/jb2.log"
run jb3 1 --data "$WORK/j/a.jsonl" --cache-dir next-to-data --jsonl-field body
check "next-to-data: then reused" grep -q "tokenized now: none" "$WORK/jb3.log"
xt_finish
