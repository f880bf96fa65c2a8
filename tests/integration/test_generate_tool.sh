#!/usr/bin/env bash
# xtrain_generate end to end on the CPU: a 2-step model trained by xtrain_mpi and its export
# (xtrain_export) give the same tokens (seeded sampling and greedy, 5 prompts x 64 tokens); a seed
# repeats and another seed differs; --timing prints the cold start's phases (with --max-new-tokens 0 those that
# ran, up to the weights and --dump-logits's forward) and --repeat 3 the warm figures,
# with every repeat's tokens those of one run (--repeat 2 with --max-new-tokens 0, nothing to time, refused); --dump-logits writes (T, V) float32; --help (and -h) lists every option;
# --model DIR takes the tokenizer file not given from DIR;
# usage errors exit 2 and runtime errors 1, each with one line (--dump-logits over an input, a prompt
# longer than the context, FIFO and device inputs, a crafted config.json, >/dev/full). Needs data/
# (scripts/setup.sh).
source "$(dirname "$0")/common.sh"
# the programs' default tokenizer files are data/gpt2's, so data/ itself (not ../shared/data: xt_data)
xt_data_dir gpt2/encoder.json gpt2/vocab.bpe brown.txt
BIN="$XTRAIN_BIN_DIR"
GEN="$BIN/xtrain_generate"

head -c 20000 "$DD/brown.txt" > "$WORK/small.txt"
"$BIN/xtrain_mpi" --data "$WORK/small.txt" --no-cache --dim 32 --heads 4 --layers 1 --seq 96 --batch 2 --steps 2 \
  --val-every 0 --ckpt "$WORK/m.ckpt" > "$WORK/train.log" 2>&1 || { cat "$WORK/train.log"; fatal "training the model"; }
"$BIN/xtrain_export" "$WORK/m.ckpt" --out "$WORK/export" > "$WORK/export.log"

# every option is documented
help=$("$GEN" --help)
for o in ckpt model prompt prompt-file prompt-ids max-new-tokens temperature top-k top-p seed batch ignore-eos print-ids \
         dump-logits device dtype cuda-graph timing repeat; do
  grep -q -- "--$o" <<< "$help" || fail "--help does not document --$o"
done
[[ "$("$GEN" -h)" == "$help" ]] || fail "-h does not print what --help prints"

# checkpoint and export: token-identical, sampled (every logit matters) and greedy
prompts=("The jury said" "In the beginning" "Hello, world!" "He asked whether" "Numbers: 1, 2, 3,")
for p in "${prompts[@]}"; do
  for mode in "--temperature 1 --seed 7" "--temperature 0"; do
    a=$("$GEN" --ckpt "$WORK/m.ckpt" --prompt "$p" $mode --max-new-tokens 64 --ignore-eos --print-ids 2> /dev/null)
    b=$("$GEN" --model "$WORK/export" --prompt "$p" $mode --max-new-tokens 64 --ignore-eos --print-ids 2> /dev/null)
    [[ $(wc -w <<< "$a") -eq 64 ]] || fail "$p ($mode): $(wc -w <<< "$a") tokens, want 64"
    [[ "$a" == "$b" ]] && echo "ok   ckpt == export: $p ($mode)" || fail "ckpt != export for '$p' ($mode): '$a' vs '$b'"
  done
done

# seeds: the same seed repeats, another seed differs; --batch 2 draws sequence 0 from the same stream
s1=$("$GEN" --ckpt "$WORK/m.ckpt" --prompt "The" --seed 1 --max-new-tokens 32 --ignore-eos --print-ids 2> /dev/null)
s1b=$("$GEN" --ckpt "$WORK/m.ckpt" --prompt "The" --seed 1 --max-new-tokens 32 --ignore-eos --print-ids 2> /dev/null)
s2=$("$GEN" --ckpt "$WORK/m.ckpt" --prompt "The" --seed 2 --max-new-tokens 32 --ignore-eos --print-ids 2> /dev/null)
sb=$("$GEN" --ckpt "$WORK/m.ckpt" --prompt "The" --seed 1 --max-new-tokens 32 --ignore-eos --print-ids --batch 2 2> /dev/null)
[[ "$s1" == "$s1b" ]] && echo "ok   seed 1 repeats" || fail "seed 1 does not repeat"
[[ "$s1" != "$s2" ]] && echo "ok   seed 2 differs" || fail "seeds 1 and 2 give the same tokens"
[[ "$(head -n 1 <<< "$sb")" == "$s1" && "$(sed -n 2p <<< "$sb")" != "$s1" ]] && echo "ok   --batch 2" \
  || fail "--batch 2: sequence 0 should equal the batch-1 run and sequence 1 differ"

# streamed text starts with the prompt; --prompt-file gives the prompt's tokens; speed line on stderr
printf 'The jury said' > "$WORK/prompt.txt"
text=$("$GEN" --ckpt "$WORK/m.ckpt" --prompt-file "$WORK/prompt.txt" --max-new-tokens 8 2> "$WORK/err")
[[ "$text" == "The jury said"* ]] || fail "streamed text does not start with the prompt: '$text'"
ids=$("$GEN" --ckpt "$WORK/m.ckpt" --prompt-ids "464 9002 531" --max-new-tokens 8 --print-ids 2> /dev/null)
[[ "$ids" == $("$GEN" --ckpt "$WORK/m.ckpt" --prompt "The jury said" --max-new-tokens 8 --print-ids 2> /dev/null) ]] \
  && echo "ok   --prompt-ids" || fail "--prompt-ids 464 9002 531 and --prompt 'The jury said' differ"
grep -q "prompt: 3 tokens.*tok/s; generation: .* tok/s" "$WORK/err" && echo "ok   $(cat "$WORK/err")" || fail "speed line: $(cat "$WORK/err")"

# --timing: one 'timing | PHASE: MS ms' line per phase of the cold start, then steady decoding (24 new tokens:
# 1 from the prompt's logits, 23 one-token steps, of which the first decoding call is timed apart: one step when
# sampling, a run of 8 fed on the device when greedy) and the process start to the first token, which is no less
# than the phases before the first token together; the CPU records no graph.
# --repeat 3: two warm generations after the first, each with the tokens of a single run (seeded sampling and
# greedy; the tool fails on a difference), and their figures on one 'repeat |' line
for mode in "--temperature 1 --seed 3" "--temperature 0"; do
  if [[ $mode == "--temperature 0" ]]; then first="8 one-token steps" steady=15; else first="1 one-token step" steady=22; fi
  one=$("$GEN" --ckpt "$WORK/m.ckpt" --prompt "The jury said" $mode --max-new-tokens 24 --ignore-eos --print-ids 2> /dev/null)
  rep=$("$GEN" --ckpt "$WORK/m.ckpt" --prompt "The jury said" $mode --max-new-tokens 24 --ignore-eos --print-ids \
        --timing --repeat 3 2> "$WORK/err") || fail "--timing --repeat 3 ($mode): $(cat "$WORK/err")"
  [[ -n "$one" && "$rep" == "$one" ]] && echo "ok   --repeat 3 prints the tokens of one run ($mode)" \
    || fail "--repeat 3 ($mode): '$rep' vs '$one'"
  ms='[0-9]+\.[0-9]{3} ms'
  for phase in "backend set-up \(cpu\), in a thread beside the phases up to the wait" "reading the model file" \
               "loading the tokenizer" "encoding the prompt" "waiting for the backend set-up" "weights to the device" \
               "decoder allocation and weight preparation" "prompt to first token \(3 tokens x 1\)" \
               "first decoding call \\($first\\)" "process start to first token"; do
    [[ $(grep -cE "^timing \| $phase: $ms\$" "$WORK/err") -eq 1 ]] || fail "--timing ($mode): no line for '$phase': $(cat "$WORK/err")"
  done
  grep -qE "^timing \| steady decoding: $steady tokens in $ms, [0-9]+\.[0-9] tok/s\$" "$WORK/err" \
    || fail "--timing ($mode): steady decoding line: $(cat "$WORK/err")"
  ! grep -q "recording the decoding graphs" "$WORK/err" || fail "--timing ($mode): the CPU recorded a graph?"
  awk -F': ' '/^timing \| / && !/backend set-up|first decoding call|steady decoding|process start/ { sum += $2 }
              /^timing \| process start to first token/ { total = $2 }
              END { exit !(total + 0 >= sum) }' "$WORK/err" \
    || fail "--timing ($mode): the process start to the first token is less than its phases: $(cat "$WORK/err")"
  grep -qE "^repeat \| 3 generations, the same tokens each time; warm prompt to first token: median $ms over generations 2\.\.3; steady decoding: 46 tokens at [0-9]+\.[0-9] tok/s\$" \
    "$WORK/err" && echo "ok   $(grep '^repeat |' "$WORK/err")" || fail "--repeat 3 ($mode): $(cat "$WORK/err")"
done
grep '^timing |' "$WORK/err"

# --dump-logits: "Hello, world!" is 4 tokens: 4 x 50257 float32
"$GEN" --model "$WORK/export" --prompt "Hello, world!" --dump-logits "$WORK/l.bin" --max-new-tokens 0 --timing \
  > "$WORK/out" 2> "$WORK/err"
[[ $(stat -c %s "$WORK/l.bin") -eq $((4 * 50257 * 4)) ]] && echo "ok   --dump-logits size" || fail "--dump-logits size $(stat -c %s "$WORK/l.bin")"
[[ ! -s "$WORK/out" ]] || fail "--max-new-tokens 0 printed text"
# timing_phases: the names of the 'timing | NAME: X.XXX ms' lines of the last run's stderr, in order
timing_phases() { sed -nE 's/^timing \| (.*): [0-9]+\.[0-9]{3} ms$/\1/p' "$WORK/err"; }
# --timing with no token made: the phases that ran, in order, the prompt's forward for --dump-logits last; no
# decoder, decoding or first-token line (with or without --dump-logits)
want="backend set-up (cpu), in a thread beside the phases up to the wait
loading the tokenizer
encoding the prompt
waiting for the backend set-up
reading the model file
weights to the device
the prompt's forward and the file for --dump-logits (4 tokens)"
got=$(timing_phases)
[[ "$got" == "$want" ]] && echo "ok   --max-new-tokens 0 --timing --dump-logits: the phases that ran" \
  || fail "--max-new-tokens 0 --timing --dump-logits: phases '$got', want '$want': $(cat "$WORK/err")"
"$GEN" --ckpt "$WORK/m.ckpt" --prompt "Hello" --max-new-tokens 0 --timing > "$WORK/out" 2> "$WORK/err"
got=$(timing_phases)
# the phases every generation runs, up to the weights on the device
up_to_weights="backend set-up (cpu), in a thread beside the phases up to the wait
reading the model file
loading the tokenizer
encoding the prompt
waiting for the backend set-up
weights to the device"
want=$up_to_weights
[[ "$got" == "$want" && ! -s "$WORK/out" ]] && echo "ok   --max-new-tokens 0 --timing: the phases up to the weights" \
  || fail "--max-new-tokens 0 --timing: phases '$got', want '$want': $(cat "$WORK/err")"
# one new token: sampled from the prompt's logits, no one-token step ran: no first-step or steady decoding line,
# no steady part on the 'repeat |' line, and a speed line that claims no decoding speed
"$GEN" --ckpt "$WORK/m.ckpt" --prompt "Hello" --max-new-tokens 1 --ignore-eos --timing --repeat 2 > "$WORK/out" 2> "$WORK/err" \
  || fail "--max-new-tokens 1 --timing: $(cat "$WORK/err")"
got=$(timing_phases)
want="$up_to_weights
decoder allocation and weight preparation
prompt to first token (1 tokens x 1)
process start to first token"
[[ "$got" == "$want" ]] && ! grep -q "steady decoding" "$WORK/err" \
  && grep -qE "^repeat \| 2 generations, the same tokens each time; warm prompt to first token: median [0-9.]+ ms over generations 2\.\.2\$" "$WORK/err" \
  && grep -q "generation: 1 token from the prompt's logits, no one-token step (cpu" "$WORK/err" \
  && echo "ok   --max-new-tokens 1 --timing: the phases that ran, no decoding speed" \
  || fail "--max-new-tokens 1 --timing: phases '$got', want '$want': $(cat "$WORK/err")"

# errors: usage -> 2 ("usage error: .. (see --help)"), runtime -> 1 ("error: .."), one line each, never a
# hang (a FIFO as input must not block: timeout)
expect_rc() {  # expect_rc RC ARGS...
  local want=$1 rc=0 prefix='^xtrain_generate: error: '
  shift
  [[ $want -eq 2 ]] && prefix='^xtrain_generate: usage error: .* (see --help)$'
  timeout 60 "$GEN" "$@" > /dev/null 2> "$WORK/err" || rc=$?
  [[ $rc -eq $want && $(wc -l < "$WORK/err") -eq 1 ]] && grep -q "$prefix" "$WORK/err" && echo "ok   exit $rc: $(cat "$WORK/err")" \
    || fail "$* -> exit $rc (want $want): $(cat "$WORK/err")"
}
expect_rc 2 --prompt x
expect_rc 2 --ckpt "$WORK/m.ckpt" --model "$WORK/export" --prompt x
expect_rc 2 --ckpt "$WORK/m.ckpt" --prompt x --prompt-file "$WORK/prompt.txt"
expect_rc 2 --ckpt "$WORK/m.ckpt" --prompt x --temperature -1
expect_rc 2 --ckpt "$WORK/m.ckpt" --prompt x --top-p 0
expect_rc 2 --ckpt "$WORK/m.ckpt" --prompt x --bogus
expect_rc 2 --ckpt "$WORK/m.ckpt" --prompt-ids "1 x"
expect_rc 2 --ckpt "$WORK/m.ckpt" --prompt-ids 50257
expect_rc 2 --ckpt "$WORK/m.ckpt" --prompt-ids -1
expect_rc 2 --ckpt "$WORK/m.ckpt" --prompt-ids "1,,2"
grep -q -- '--prompt-ids: an empty id between commas in "1,,2"' "$WORK/err" || fail "--prompt-ids 1,,2: $(cat "$WORK/err")"
expect_rc 1 --ckpt "$WORK/missing.ckpt" --prompt x
expect_rc 1 --model "$WORK/missing_dir" --prompt x
# --model DIR with one tokenizer file given: the other is DIR's (vocab.json, merges.txt), as --help says,
# not the data/gpt2 default; so DIR's broken file is the one that fails, and a file given wins over DIR's
cp -r "$WORK/export" "$WORK/fewmerges" && head -n 2 "$WORK/export/merges.txt" > "$WORK/fewmerges/merges.txt"
cp -r "$WORK/export" "$WORK/badvocab" && echo '[]' > "$WORK/badvocab/vocab.json"
expect_rc 1 --model "$WORK/fewmerges" --encoder-json "$DD/gpt2/encoder.json" --prompt x
grep -q "fewmerges/merges.txt: 1 merges" "$WORK/err" || fail "--model DIR --encoder-json F does not use DIR/merges.txt"
expect_rc 1 --model "$WORK/badvocab" --vocab-bpe "$DD/gpt2/vocab.bpe" --prompt x
grep -q "badvocab/vocab.json" "$WORK/err" || fail "--model DIR --vocab-bpe F does not use DIR/vocab.json"
"$GEN" --model "$WORK/fewmerges" --vocab-bpe "$DD/gpt2/vocab.bpe" --prompt x --max-new-tokens 1 > /dev/null 2>&1 \
  && echo "ok   --model DIR --vocab-bpe F: F, not DIR/merges.txt" || fail "--model DIR --vocab-bpe F does not use F"
# --dump-logits never overwrites an input of the run (through a symlink neither)
cp -r "$WORK/export" "$WORK/dl" && cp "$WORK/m.ckpt" "$WORK/x.ckpt" && ln -s "$WORK/x.ckpt" "$WORK/x.link"
sum_before=$(cat "$WORK/dl/model.safetensors" "$WORK/x.ckpt" "$WORK/prompt.txt" | md5sum)
expect_rc 2 --model "$WORK/dl" --prompt x --dump-logits "$WORK/dl/model.safetensors"
grep -q "is an input of this run" "$WORK/err" || fail "--dump-logits over the model: $(cat "$WORK/err")"
expect_rc 2 --ckpt "$WORK/x.ckpt" --prompt x --dump-logits "$WORK/x.ckpt"
expect_rc 2 --ckpt "$WORK/x.ckpt" --prompt x --dump-logits "$WORK/x.link"
expect_rc 2 --ckpt "$WORK/x.ckpt" --prompt-file "$WORK/prompt.txt" --dump-logits "$WORK/prompt.txt"
expect_rc 2 --model "$WORK/dl" --prompt x --dump-logits "$WORK/dl/vocab.json"
# nor into the per-user cache directory (its tokenizer tables are named by content)
mkdir -p "$WORK/dlx/xtrain"
XDG_CACHE_HOME="$WORK/dlx" expect_rc 2 --ckpt "$WORK/x.ckpt" --prompt x --dump-logits "$WORK/dlx/xtrain/0123456789abcdef.toktables"
grep -q -- "--dump-logits .* is inside the token cache directory" "$WORK/err" || fail "--dump-logits into the cache: $(cat "$WORK/err")"
[[ $(cat "$WORK/dl/model.safetensors" "$WORK/x.ckpt" "$WORK/prompt.txt" | md5sum) == "$sum_before" ]] \
  && echo "ok   inputs untouched by --dump-logits" || fail "--dump-logits changed an input"
expect_rc 2 --ckpt "$WORK/m.ckpt" --prompt x --seed -1
grep -q -- "--seed must be an integer" "$WORK/err" || fail "--seed -1: $(cat "$WORK/err")"
expect_rc 2 --ckpt "$WORK/m.ckpt" --prompt x --batch 1000000000
expect_rc 2 --ckpt "$WORK/m.ckpt" --prompt x --cuda-graph yes
expect_rc 2 --ckpt "$WORK/m.ckpt" --prompt x --repeat 0
# --repeat times the warm generations' first token: with --max-new-tokens 0 there is none, so it is refused
expect_rc 2 --ckpt "$WORK/m.ckpt" --prompt x --max-new-tokens 0 --repeat 2
grep -q -- "--repeat 2 needs --max-new-tokens >= 1" "$WORK/err" || fail "--repeat 2 --max-new-tokens 0: $(cat "$WORK/err")"
expect_rc 2 --ckpt "$WORK/m.ckpt" --prompt x --dump-logits ""
grep -q -- "--dump-logits was given an empty value" "$WORK/err" || fail "--dump-logits \"\": $(cat "$WORK/err")"
# a prompt longer than the context (96) is refused up front, before any text is streamed
expect_rc 2 --ckpt "$WORK/m.ckpt" --prompt-ids "$(yes 464 | head -n 97 | tr '\n' ' ')"
grep -q "the prompt has 97 tokens; the model's context is 96" "$WORK/err" || fail "long prompt: $(cat "$WORK/err")"
expect_rc 1 --ckpt "$WORK/m.ckpt" --prompt x --dump-logits "$WORK/no/such/dir/l.bin" --max-new-tokens 0
# --dump-logits never writes through another user's symlink (nobody's link in a sticky directory to a
# root-only file); needs root, to make the link as nobody
if [[ $(id -u) -eq 0 ]] && command -v runuser > /dev/null; then
  chmod o+x "$WORK" && mkdir -m 1777 "$WORK/sticky" && mkdir -m 700 "$WORK/secret"
  echo precious > "$WORK/secret/victim" && chmod 600 "$WORK/secret/victim"
  runuser -u nobody -- ln -s "$WORK/secret/victim" "$WORK/sticky/l.bin"
  expect_rc 1 --ckpt "$WORK/m.ckpt" --prompt x --max-new-tokens 0 --dump-logits "$WORK/sticky/l.bin"
  grep -q "l.bin: is a symlink owned by uid [0-9]*, neither this user" "$WORK/err" || fail "--dump-logits nobody's link: $(cat "$WORK/err")"
  [[ $(cat "$WORK/secret/victim") == precious ]] && echo "ok   --dump-logits: nobody's symlink not followed" \
    || fail "--dump-logits wrote through nobody's symlink"
  # the default cache directory made first by nobody: the tokenizer's tables are derived, not read or
  # written there; one warning naming what chose it (no --cache-dir here)
  runuser -u nobody -- mkdir "$WORK/sticky/xtrain"
  XDG_CACHE_HOME="$WORK/sticky" timeout 60 "$GEN" --ckpt "$WORK/m.ckpt" --prompt x --max-new-tokens 1 > /dev/null 2> "$WORK/err" \
    || fail "nobody's cache directory: generate failed: $(cat "$WORK/err")"
  [[ $(grep -cF 'warning: $XDG_CACHE_HOME/xtrain '"$WORK/sticky/xtrain: owned by uid" "$WORK/err") == 1 ]] \
    && ! grep -q -- --cache-dir "$WORK/err" && [[ -z $(ls -A "$WORK/sticky/xtrain") ]] \
    && echo "ok   nobody's default cache directory: not used, one warning" || fail "nobody's cache directory: $(cat "$WORK/err")"
else
  echo "skip --dump-logits through another user's symlink: needs root (runuser -u nobody)"
fi
# inputs that are not regular files: refused at once with one line (a FIFO would block, /dev/zero never ends)
mkfifo "$WORK/fifo"
mkdir "$WORK/fifo_cfg" "$WORK/fifo_model"
cp "$WORK/export/"* "$WORK/fifo_cfg/" && cp "$WORK/export/"* "$WORK/fifo_model/"
rm "$WORK/fifo_cfg/config.json" "$WORK/fifo_model/model.safetensors"
mkfifo "$WORK/fifo_cfg/config.json" "$WORK/fifo_model/model.safetensors"
expect_rc 1 --ckpt "$WORK/m.ckpt" --prompt-file "$WORK/fifo"
grep -q "cannot read .*fifo: not a regular file" "$WORK/err" || fail "--prompt-file FIFO: $(cat "$WORK/err")"
expect_rc 1 --ckpt "$WORK/m.ckpt" --prompt-file /dev/zero
grep -q "cannot read /dev/zero: not a regular file" "$WORK/err" || fail "--prompt-file /dev/zero: $(cat "$WORK/err")"
expect_rc 1 --ckpt "$WORK/fifo" --prompt x
grep -q "not a regular file" "$WORK/err" || fail "--ckpt FIFO: $(cat "$WORK/err")"
expect_rc 1 --model "$WORK/fifo_cfg" --prompt x
grep -q "not a regular file" "$WORK/err" || fail "config.json FIFO: $(cat "$WORK/err")"
expect_rc 1 --model "$WORK/fifo_model" --prompt x
grep -q "not a regular file" "$WORK/err" || fail "model.safetensors FIFO: $(cat "$WORK/err")"
expect_rc 1 --ckpt "$WORK/m.ckpt" --prompt x --dump-logits "$WORK/fifo" --max-new-tokens 0
[[ -p "$WORK/fifo" ]] || fail "--dump-logits replaced the FIFO"
# a crafted config.json with a huge size is refused before any allocation, with the limit xtrain_mpi uses
cp -r "$WORK/export" "$WORK/huge"
sed -i 's/"n_layer": [0-9]*/"n_layer": 1048576/' "$WORK/huge/config.json"
expect_rc 1 --model "$WORK/huge" --prompt x
grep -q -- "--layers = 1048576 is too large (limit 4096)" "$WORK/err" || fail "huge config: $(cat "$WORK/err")"
# stdout write errors are exit 1 with one line
if [[ -w /dev/full ]]; then
  rc=0
  "$GEN" --ckpt "$WORK/m.ckpt" --prompt x --max-new-tokens 4 > /dev/full 2> "$WORK/err" || rc=$?
  [[ $rc -eq 1 && $(wc -l < "$WORK/err") -eq 1 ]] && grep -q "cannot write the standard output" "$WORK/err" \
    && echo "ok   >/dev/full: $(cat "$WORK/err")" || fail ">/dev/full -> exit $rc: $(cat "$WORK/err")"
fi
xt_finish
