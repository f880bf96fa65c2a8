#!/usr/bin/env bash
# Token caches live in --cache-dir (default $XDG_CACHE_HOME/xtrain, else ~/.cache/xtrain), named by the
# text's hash and the tokenizer, never in the data directory unless --cache-dir next-to-data asks.
# A read-only data directory with 2 ranks tokenizes each file once (one rank per node writes, the
# other maps) and the next run reuses them; a copy of a text finds its cache. An implicit cache path
# that is a directory is a warning, not an error naming an option that was not given.
source "$(dirname "$0")/common.sh"
xt_data
fails=0
ARGS=("${TOK[@]}" "${TINY[@]}" --steps 1)
check() {  # check TEXT COMMAND...
  local what=$1
  shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fails=$((fails + 1)); fi
}
run() {  # run NAME NP ARGS...: xtrain_mpi, log in $WORK/NAME.log
  local name=$1 np=$2
  shift 2
  "${MPIRUN[@]}" -np "$np" "$XT" "${ARGS[@]}" "$@" > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; echo "FAIL: run $name"; exit 1; }
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
  fi || { cat "$WORK/$1.log"; echo "FAIL: run $1"; exit 1; }
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
((fails == 0)) || { echo "$fails failure(s)"; exit 1; }
echo PASS
