#!/usr/bin/env bash
# Set-up in two layers: the `programs` target builds the six programs and no test, scripts/setup.sh
# installs the test extras (Slurm, munge, clang, doctest, matplotlib) only with --tests, and the
# README's test command is .ci/run's, after `scripts/setup.sh --tests`.
source "$(dirname "$0")/common.sh"
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$XTRAIN_BIN_DIR"  # the build directory

# `ninja -t query`: "programs:", "  input: phony", the inputs one per line, "  outputs:"
deps="$(ninja -C "$build" -t query programs | sed -n '/input:/,/outputs:/{/:/d;p}' | tr -d ' ' | sort)"
want="$(printf '%s\n' xtrain_eval xtrain_export xtrain_generate xtrain_mpi xtrain_threads xtrain_tokenize | sort)"
[[ "$deps" == "$want" ]] || fail "programs builds: $(echo $deps), want: $(echo $want)"
echo "programs target: $(echo $deps)"

# the package lists as the script builds them, without installing anything
lists="$(sed -n '/^packages=(/,/^((do_tests))/p' "$root/scripts/setup.sh")"
plain="$(bash -c "do_tests=0; $lists"$'\necho "${packages[*]}"')"
tests="$(bash -c "do_tests=1; $lists"$'\necho "${packages[*]}"')"
for p in slurmd slurmctld munge clang doctest-dev python3-matplotlib; do
  [[ " $plain " != *" $p "* ]] || fail "scripts/setup.sh installs $p without --tests"
  [[ " $tests " == *" $p "* ]] || fail "scripts/setup.sh --tests does not install $p"
done
for p in openmpi-bin libopenblas-dev nodejs; do
  [[ " $plain " == *" $p "* ]] || fail "scripts/setup.sh does not install $p"
done
echo "setup.sh: $(wc -w <<<"$plain") packages, $(wc -w <<<"$tests") with --tests"

ci_cmd="$(sed -n "s/^test_cmd='\(.*\)'$/\1/p" "$root/.ci/run")"
grep -qxF "scripts/setup.sh --tests && $ci_cmd" "$root/README.md" ||
  fail "README.md has no line 'scripts/setup.sh --tests && $ci_cmd' (.ci/run's test_cmd)"
grep -q '^phase setup scripts/setup.sh --tests$' "$root/.ci/run" || fail ".ci/run does not set up with --tests"
echo "README's test command is .ci/run's"

# the README walkthrough's outputs (--ckpt, --metrics, --out, -o) are ignored by git, so following it
# leaves no untracked files (skipped outside a git checkout)
if git -C "$root" rev-parse --git-dir > /dev/null 2>&1; then
  walk="$(sed -n '/^## Walkthrough/,/^## The options/p' "$root/README.md")"
  outs="$(grep -oE -- '(--ckpt|--metrics|--out|-o) [^ ]+' <<< "$walk" | awk '{print $2}' | sort -u)"
  [[ -n "$outs" ]] || fail "no outputs found in the README walkthrough"
  for o in $outs; do
    git -C "$root" check-ignore -q --no-index "$o" || fail "the README walkthrough's output $o is not ignored by git (.gitignore)"
  done
  echo "the walkthrough's outputs are ignored by git: $(echo $outs)"
fi
xt_finish
