#!/usr/bin/env bash
# --data with a directory of shards: it trains bitwise what one file holding the
# joined text trains (files joined with <|endoftext|>); a node's ranks share the tokenizing (world 2,
# 3 shards, under mpirun and xtrain_threads); caches are then reused without re-tokenizing, a
# truncated one is rebuilt; xtrain_tokenize writes the cache training maps; bad shard inputs end
# every rank quickly with one line; no output may be a shard, a cache or another input.
source "$(dirname "$0")/common.sh"
xt_data
BOUND=30  # seconds for an error case; a hang in a collective would hit it
MAX_S=$((BOUND - 1))  # expect_cmd: ended in under BOUND s
mkdir "$WORK/shards" "$WORK/joined"
split -n l/3 -d --additional-suffix=.txt "$WORK/corpus.txt" "$WORK/shards/part-"
s=("$WORK"/shards/part-0{0,1,2}.txt)
{ cat "${s[0]}"; printf '<|endoftext|>'; cat "${s[1]}"; printf '<|endoftext|>'; cat "${s[2]}"; } > "$WORK/joined/all.txt"
ARGS=("${TOK[@]}" "${TINY[@]}" --steps 10 --cache-dir next-to-data)  # this test is about caches beside the data

run() {  # run LAUNCHER NP NAME DATA: metrics in NAME.jsonl
  xt_run_ok "$3" "$1" "$2" "${ARGS[@]}" --data "$4" --metrics "$WORK/$3.jsonl"
}
tokenized() {  # tokenized LOG FILES RANKS: rank 0's cache line (FILES 0: "none")
  if [[ $2 == 0 ]]; then grep -q "tokenized now: none |" "$WORK/$1.log"; else grep -q "tokenized now: $2 on $3 rank" "$WORK/$1.log"; fi
}

"$XTRAIN_BIN_DIR/xtrain_tokenize" "${TOK[@]}" --cache-dir next-to-data --input "$WORK/joined/all.txt" > /dev/null 2>&1
run mpi 2 j2 "$WORK/joined/all.txt"
check "a cache written by xtrain_tokenize is mapped, not re-tokenized" tokenized j2 0 0
run mpi 2 s2 "$WORK/shards"
grep "^cache" "$WORK/s2.log"
check "world 2: 3 shards tokenized once, shared by 2 ranks" tokenized s2 3 2
check "world 2: shards train bitwise what the joined file trains" same_losses j2.jsonl s2.jsonl 1 10
check "every shard has its cache" test -s "${s[0]}.tokcache" -a -s "${s[1]}.tokcache" -a -s "${s[2]}.tokcache"
mtimes=$(stat -c %Y.%y "$WORK"/shards/*.tokcache)

run mpi 1 j1 "$WORK/joined/all.txt"
run mpi 1 s1 "$WORK/shards"
check "world 1: caches reused, nothing tokenized" tokenized s1 0 0
check "world 1: caches not rewritten" test "$mtimes" == "$(stat -c %Y.%y "$WORK"/shards/*.tokcache)"
check "world 1: shards train bitwise what the joined file trains" same_losses j1.jsonl s1.jsonl 1 10

rm "$WORK"/shards/*.tokcache
run threads 2 t2 "$WORK/shards"
check "xtrain_threads world 2: 3 shards tokenized by 2 ranks" tokenized t2 3 2
check "xtrain_threads world 2 equals mpirun world 2 bitwise" same_losses s2.jsonl t2.jsonl 1 10

head -c 100 "${s[1]}.tokcache" > "$WORK/cut" && mv "$WORK/cut" "${s[1]}.tokcache"
run mpi 2 r2 "$WORK/shards"
check "a truncated cache is named in a warning and rebuilt" grep -q "warning: token cache ${s[1]}.tokcache is truncated" "$WORK/r2.log"
check "only that shard is tokenized again" tokenized r2 1 1
check "the rebuilt cache trains the same" same_losses s2.jsonl r2.jsonl 1 10

# expect NAME CODE PATTERN DATA [args]: world 2 ends with CODE in under BOUND s and its first rank line
# matches PATTERN (common.sh's expect_cmd)
expect() {
  expect_cmd "$1" "$2" "$3" "${MPIRUN[@]}" -np 2 "$XT" "${ARGS[@]}" --data "$4" "${@:5}"
}
mkdir "$WORK/empty"
expect "empty directory" 1 "--data .*empty: no data files in the directory" "$WORK/empty"
mkfifo "$WORK/shards/part-03.txt"
expect "FIFO among the shards" 1 "--data .*part-03.txt: cannot read: not a regular file" "$WORK/shards"
rm "$WORK/shards/part-03.txt"
ln -s "$WORK/gone.txt" "$WORK/shards/part-03.txt"
expect "unreadable shard (dangling link)" 1 "cannot read .*part-03.txt: No such file" "$WORK/shards"
rm "$WORK/shards/part-03.txt"
# /proc/self/mem passes the listing (a readable regular file) and fails on read (EIO): as file 1 of 3
# it fails on local rank 1 while it tokenizes its share; rank 0 must learn it and end too.
expect "a shard failing on rank 1 only" 1 "^rank 1 .*cannot read /proc/self/mem" "${s[0]},/proc/self/mem,${s[2]}"
cp "${s[1]}" "$WORK/part-01.copy"
expect "--metrics names a shard" 2 "usage error: --data and --metrics name the same file .*part-01.txt" "$WORK/shards" \
  --metrics "${s[1]}"
check "the shard named by --metrics is untouched" cmp -s "${s[1]}" "$WORK/part-01.copy"
expect "--tokens-cache with shards" 2 "usage error: --tokens-cache names the cache of one file" "$WORK/shards" \
  --tokens-cache "$WORK/x.tokcache"
# every output against every input, the expanded files and their caches included (check_distinct_paths)
cp "${s[2]}" "$WORK/part-02.copy"
expect "--timeline names a shard" 2 "usage error: --data and --timeline name the same file .*part-02.txt" "$WORK/shards" \
  --timeline "${s[2]}"
check "the shard named by --timeline is untouched" cmp -s "${s[2]}" "$WORK/part-02.copy"
cp "${s[0]}.tokcache" "$WORK/cache.copy"
expect "--metrics names a listed file's cache" 2 "usage error: --metrics .*part-00.txt.tokcache ends in .tokcache" \
  "${s[0]},${s[1]}" --metrics "${s[0]}.tokcache"
check "the cache named by --metrics is untouched" cmp -s "${s[0]}.tokcache" "$WORK/cache.copy"
cd "$WORK"  # one file not yet created, spelled relative two ways
expect "--ckpt x.ckpt, --timeline ./x.ckpt" 2 "usage error: --ckpt and --timeline name the same file" "${s[0]}" \
  --ckpt x.ckpt --timeline ./x.ckpt
mkdir "$WORK/init"  # --init-from: its files are inputs (only config.json is read before the check)
printf '{"model_type": "gpt2", "n_embd": 32, "n_head": 4, "n_layer": 2, "n_positions": 32, "vocab_size": 50257}' \
  > "$WORK/init/config.json"
expect "--metrics names an --init-from file" 2 "usage error: --init-from and --metrics name the same file" "${s[0]}" \
  --init-from "$WORK/init" --metrics "$WORK/init/config.json"
expect "an output inside a --data directory" 2 "usage error: --ckpt .*run.ckpt is inside the --data directory" \
  "$WORK/shards/" --ckpt "$WORK/shards/run.ckpt"
check "no checkpoint written into the data directory" test ! -e "$WORK/shards/run.ckpt"
expect "a token cache listed as data" 2 "usage error: --data .*part-00.txt.tokcache: a token cache, not a text" "${s[0]},${s[0]}.tokcache"
# (without ARGS' --cache-dir, which --no-cache refuses)
expect_cmd "--no-cache: --metrics names a file's cache" 2 "usage error: --metrics .*part-00.txt.tokcache ends in .tokcache" \
  "${MPIRUN[@]}" -np 2 "$XT" "${TOK[@]}" "${TINY[@]}" --steps 10 --data "${s[0]}" --no-cache --metrics "${s[0]}.tokcache"
check "the cache named by --metrics under --no-cache is untouched" cmp -s "${s[0]}.tokcache" "$WORK/cache.copy"
# several files need <|endoftext|> between them: a vocabulary without it is refused
python3 -c 'import json, sys; e = json.load(open(sys.argv[1])); del e["<|endoftext|>"]; json.dump(e, open(sys.argv[2], "w"))' \
  "${TOK[1]}" "$WORK/no-eot.json"
expect "3 shards, no <|endoftext|>" 2 "usage error: --data names 3 files, but the tokenizer has no <.endoftext.>" \
  "$WORK/shards" --encoder-json "$WORK/no-eot.json"
xt_finish "all data shard checks passed"
