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
# the tokenizer's tables under 2 ranks: a symbolic link at the entry's name is refused on read and never
# written through; each warning is one whole line starting with its rank and host
tables=$(compgen -G "$WORK/cc/*.toktables")
mv "$tables" "$WORK/tables.saved" && echo "outside the cache directory" > "$WORK/target" && ln -s "$WORK/target" "$tables"
run tlink 2 --data "$WORK/d/a.txt" --cache-dir "$WORK/cc"
check "a symlinked tables entry: its target is not written through" test "$(cat "$WORK/target")" == "outside the cache directory"
check "... the link is left" test -L "$tables"
check "... refused as a symbolic link, by each rank, each line prefixed" \
  test "$(grep -c "^rank [01] (.*): warning: tokenizer cache $tables: is a symbolic link; rebuilding it\$" "$WORK/tlink.log")" == 2
check "... and not written through, said once by each rank" \
  test "$(grep -c "^rank [01] (.*): warning: tokenizer cache $tables is a symbolic link; not writing through it\$" "$WORK/tlink.log")" == 2
check "... no unprefixed or run-together warning" bash -c "! grep -E '^warning|warning: .*warning:' '$WORK/tlink.log'"
rm "$tables" && mv "$WORK/tables.saved" "$tables"
# a --cache-dir that is a file: one warning line for the one cause (the corpus'), no tokenizer cache lines
touch "$WORK/afile"
run afile 1 --data "$WORK/d/a.txt" --cache-dir "$WORK/afile"
check "a --cache-dir that is a file: one warning line" test "$(grep -c "warning: " "$WORK/afile.log")" == 1
check "... the corpus' one, naming the file" grep -q "warning: --cache-dir $WORK/afile: $WORK/afile is not a directory; tokenizing in memory" "$WORK/afile.log"

# caches other users can reach (needs root, to act as nobody): the cache directory is checked whatever
# chose it (--cache-dir, $XDG_CACHE_HOME, $HOME), and a token cache that is not this user's own file is
# never read nor replaced
if ((EUID == 0)) && command -v runuser > /dev/null; then
  chmod 755 "$WORK"  # nobody reaches the sticky directory below
  P="$WORK/pub"
  mkdir "$P" && chmod 1777 "$P" && runuser -u nobody -- mkdir "$P/xtrain"
  runuser -u nobody -- mkdir -p "$P/home/.cache/xtrain"
  for how in xdg home; do
    rc=0
    if [[ $how == xdg ]]; then
      XDG_CACHE_HOME="$P" "$XT" "${ARGS[@]}" --data "$WORK/d/a.txt" > "$WORK/pub_$how.log" 2>&1 || rc=$?
      dir="$P/xtrain" want='$XDG_CACHE_HOME/xtrain '"$P/xtrain: owned by uid "
    else
      HOME="$P/home" XDG_CACHE_HOME= "$XT" "${ARGS[@]}" --data "$WORK/d/a.txt" > "$WORK/pub_$how.log" 2>&1 || rc=$?
      dir="$P/home/.cache/xtrain" want='$HOME/.cache/xtrain '"$P/home/.cache/xtrain: owned by uid "
    fi
    check "default cache directory ($how) owned by nobody: refused, exit 1" test "$rc" == 1
    check "... in one line naming what chose it" grep -qF "$want" "$WORK/pub_$how.log"
    check "... nothing written into it" test -z "$(ls -A "$dir")"
  done
  rc=0
  XDG_CACHE_HOME="$P" "$XTRAIN_BIN_DIR/xtrain_tokenize" "${TOK[@]}" --input "$WORK/d/a.txt" > "$WORK/pub_tok.log" 2>&1 || rc=$?
  check "xtrain_tokenize into nobody's default directory: refused, exit 1" test "$rc" == 1
  check "... naming what chose it" grep -qF '$XDG_CACHE_HOME/xtrain '"$P/xtrain: owned by uid " "$WORK/pub_tok.log"
  # a root-owned sticky --cache-dir: nobody's .tokcache (a valid cache of this text) is not reused
  planted="$P/$(basename "$(compgen -G "$WORK/cc/[0-9a-f]*-[0-9a-f]*.tokcache" | head -1)")"
  cp "$(compgen -G "$WORK/cc/[0-9a-f]*-[0-9a-f]*.tokcache" | head -1)" "$planted" && chown nobody "$planted"
  cp "$planted" "$WORK/planted.copy"
  run pubfile 1 --data "$WORK/d/a.txt" --cache-dir "$P"
  check "nobody's .tokcache in a sticky --cache-dir: not reused" grep -q "tokenized now: 1 on 1 rank" "$WORK/pubfile.log"
  check "... one warning line naming it" grep -q "warning: token cache $planted is owned by uid [0-9]*, not this user (uid 0); not reading or replacing it" "$WORK/pubfile.log"
  check "... and left as it was" cmp -s "$planted" "$WORK/planted.copy"
  check "... still nobody's" test "$(stat -c %U "$planted")" == nobody
fi
xt_finish
