// xtrain_mpi options (see src/app/options.h). Defaults train a small GPT on the Brown corpus
// with the GPT-2 tokenizer, both fetched into data/ by scripts/setup.sh.
#include "app/options.h"

#include <boost/program_options.hpp>
#include <charconv>
#include <utility>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <cctype>
#include <cstdlib>
#include <sstream>

#include "app/options_resume.h"
#include <xtrain/backend/backend.h>
#include <xtrain/backend/registry.h>
#include "core/cli.h"
#include <xtrain/core/data_dir.h>
#include <xtrain/core/error.h>
#include "core/echo.h"
#include "core/io.h"
#include <xtrain/data/corpus.h>
#include "data/token_cache.h"
#include "data/tokenizer_options.h"
#include <xtrain/serve/export.h>

namespace po = boost::program_options;

namespace xtrain {

namespace {
// kOptionScopes: the options a run reads only with one value of another option: the family's, the
// schedule's, the optimizer's. Given with another value, such an option is a usage error naming both
// ("--decay-frac needs --lr-schedule wsd (this run's --lr-schedule is cosine, which does not read it)"),
// never silently unused, as most HPC tools do; --help says it after the option's text (scoped_help).
// The one home of these scopes: parse_options checks every row (with a --resume, once its header is read).
struct OptionScope {
  const char* option;  // without "--"
  const char* needs;   // the option that decides (without "--")
  const char* value;   // its value that reads `option`
};
constexpr OptionScope kOptionScopes[] = {
    {"norm-eps", "arch", "llama"},         {"rope-theta", "arch", "llama"},         {"tie-embeddings", "arch", "llama"},
    {"decay-frac", "lr-schedule", "wsd"},  {"muon-lr", "optimizer", "muon"},        {"muon-momentum", "optimizer", "muon"},
    {"muon-weight-decay", "optimizer", "muon"}, {"muon-ns-steps", "optimizer", "muon"}, {"muon-adjust", "optimizer", "muon"}};

// scoped_help: an option's --help text, with the scope kOptionScopes gives it ("; only with --optimizer muon").
std::string scoped_help(const char* option, const std::string& text) {
  for (const OptionScope& s : kOptionScopes)
    if (std::string(option) == s.option) return text + " (only with --" + s.needs + " " + s.value + ")";
  return text;
}

// canonical_options: every option's parsed value as ("--name", text), in --help order (defaults
// included; not --help and --version, which parse_cli adds): the configuration that
// check_options_agree compares across ranks.
// Floats are printed in the shortest form that round-trips, so texts are equal exactly when values are.
std::vector<std::pair<std::string, std::string>> canonical_options(const po::options_description& all,
                                                                   const po::variables_map& vm) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& d : all.options()) {
    const std::string name = d->long_name();
    if (!vm.count(name)) continue;
    const boost::any& v = vm[name].value();
    std::ostringstream os;
    char buf[64];  // floats: the shortest text that reads back as the same value (std::to_chars)
    if (auto* i = boost::any_cast<int>(&v)) os << *i;
    else if (auto* f = boost::any_cast<float>(&v)) os << std::string(buf, std::to_chars(buf, buf + sizeof buf, *f).ptr);
    else if (auto* x = boost::any_cast<double>(&v)) os << std::string(buf, std::to_chars(buf, buf + sizeof buf, *x).ptr);
    else if (auto* u = boost::any_cast<uint64_t>(&v)) os << *u;
    else if (auto* b = boost::any_cast<bool>(&v)) os << (*b ? "true" : "false");
    else if (auto* str = boost::any_cast<std::string>(&v)) os << *str;
    else if (auto* list = boost::any_cast<std::vector<std::string>>(&v))  // a repeatable option: every value, in order
      for (size_t k = 0; k < list->size(); ++k) os << (k ? "\n" : "") << (*list)[k];
    else XT_FAIL("option --" << name << " has a type canonical_options does not know");  // a new option type
    out.emplace_back("--" + name, os.str());
  }
  return out;
}

// parse_eval_specs: --eval values NAME=FILES, --eval-mc values NAME=FILE (form: what the option takes, as
// its --help says) -> (name, files). A name is letters, digits, '_', '-' and '.' (it is a field of the
// validation line and of the metrics file); names are unique.
std::vector<std::pair<std::string, std::string>> parse_eval_specs(const std::vector<std::string>& specs, const char* opt,
                                                                  const char* form) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& s : specs) {
    const size_t eq = s.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
      throw UsageError(std::string(opt) + " takes " + form + ", got '" + echo_value(s) + "'");
    const std::string name = s.substr(0, eq);
    for (char c : name)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.')
        throw UsageError(std::string(opt) + " name '" + echo_value(name) + "': use letters, digits, '_', '-' and '.'");
    for (const auto& p : out)
      if (p.first == name) throw UsageError(std::string(opt) + " names the set '" + name + "' twice");
    out.emplace_back(name, s.substr(eq + 1));
  }
  return out;
}

}  // namespace

RunOptions parse_options(int argc, char** argv, Launcher launcher) {
  RunOptions o;
  TrainConfig& t = o.train;
  GPTConfig& m = t.model;
  OptimConfig& oc = t.optim;
  int kv_heads = 0, head_dim = 0, ffn = 0;
  std::string seed = std::to_string(t.seed);  // text: Boost parses "-1" into uint64_t as 2^64-1
  std::string device = "auto", dtype = "auto", attention = "auto", cuda_graph = "auto", data_format = "auto", recompute = "auto", fp8 = "none";
  std::string weight_copy = "persistent";
  std::string optimizer = "adamw", lr_schedule = "cosine", muon_adjust = "original";
  std::vector<std::string> eval_specs, eval_mc_specs;
  po::options_description data = cli_group("Data and tokenizer");
  data.add_options()
    ("data", po::value(&o.data)->default_value(default_data_file("brown.txt")), "training data (UTF-8 text unless --data-format says otherwise): a file, a directory of shards or a comma-separated list, joined with <|endoftext|> in that order (a directory's files by name); the tail is held out for validation unless --val-data names held-out files; formats: --data-format (docs/data.md)")
    ("data-format", po::value(&data_format)->default_value("auto"), "format of the --data and --val-data files: auto, text, llmc (llm.c token shards), nanogpt (nanoGPT's headerless uint16 train.bin), jsonl (JSON lines, plain or .zst); auto: llm.c shards by their magic, .jsonl/.jsonl.zst by name, else text; nanogpt only when named (docs/data.md)")
    ("jsonl-field", po::value(&o.jsonl_field)->default_value("text"), "JSON lines: the string field holding each document (given, some --data, --val-data or --eval file must be JSON lines)")
    ("val-data", po::value(&o.val_data)->default_value(""), "held-out files for validation, as --data (e.g. llm.c's val shards); then --val-fraction is not used (default: the tail of --data)")
    ("tokens-cache", po::value(&o.tokens_cache)->default_value(""), "the path of the token cache of a single --data file, in place of --cache-dir's keyed one (default: none)")
    ("no-cache", po::bool_switch(&o.no_cache), "neither read nor write the token cache (not with --tokens-cache or --cache-dir)")
    ("cache-dir", po::value(&o.cache_dir)->default_value(""), "directory of the token caches, named by each text's hash and the tokenizer (default: $XDG_CACHE_HOME/xtrain or ~/.cache/xtrain); next-to-data: <file>.tokcache beside each file");
  add_tokenizer_options(data, o.tokenizer);
  data.add_options()
    ("val-fraction", po::value(&t.val_fraction)->default_value(0.1, "0.1"), "fraction of the token stream held out for validation")
    ("val-every", po::value(&t.val_every)->default_value(25), "validation loss every N steps and at the end (0 = never; then nothing is held out)")
    ("val-seqs", po::value(&t.val_seqs)->default_value(64), "validation sequences per evaluation (and per --eval set); needs --val-every > 0")
    ("eval", po::value(&eval_specs)->composing(), "NAME=FILES, repeatable: a held-out set scored at every --val-every step: its loss over up to --val-seqs consecutive windows of --seq tokens from its start, as figure NAME of the validation line and an `eval` record of --metrics; FILES as --data (any --data-format) (docs/usage.md, \"Evaluating\"; default: none)")
    ("eval-mc", po::value(&eval_mc_specs)->composing(), "NAME=FILE, repeatable: one multiple-choice JSON lines file (HellaSwag's format, or context/choices/answer; zstd-compressed when FILE ends in .zst) scored at every --val-every step: acc, acc_norm and acc_token_mean of all its items (docs/usage.md, \"Evaluating\"; default: none)")
    ("eval-batch", po::value(&t.eval_batch)->default_value(8), "sequences per forward of --eval and --eval-mc (whole items' choices); the figures do not depend on the world size, and xtrain_eval --eval-batch with the same value gives them bit for bit; above the micro-batch per rank the evaluation takes more activation memory than a step");
  std::string arch = "gpt2", tie = "true";
  po::options_description model = cli_group("Model (GPT-2 or Llama layout, pre-norm)");
  model.add_options()
    ("arch", po::value(&arch)->default_value("gpt2"), "gpt2 | llama: the model family (Hugging Face model_type). gpt2: LayerNorm, learned positions, GELU MLP, biases, tied head; llama: RMSNorm, rotary positions, SwiGLU MLP (--ffn is its intermediate size), no biases (docs/design.md, \"Model\")")
    ("norm-eps", po::value(&m.norm_eps)->default_value(1e-5f, "1e-5"), scoped_help("norm-eps", "RMSNorm epsilon").c_str())
    ("rope-theta", po::value(&m.rope_theta)->default_value(10000.0f, "10000"), scoped_help("rope-theta", "rotary embedding base theta").c_str())
    ("tie-embeddings", po::value(&tie)->default_value("true"), scoped_help("tie-embeddings", "true | false: the output head is the token embedding wte (true) or its own matrix lm_head (false; gpt2's head is always wte)").c_str())
    ("dim", po::value(&m.C)->default_value(128), "C: model width")
    ("heads", po::value(&m.NH)->default_value(4), "NH: query heads")
    ("kv-heads", po::value(&kv_heads)->default_value(0), "KVH: key/value heads for grouped-query attention (0 = --heads)")
    ("head-dim", po::value(&head_dim)->default_value(0), "HS: head size (0 = dim / heads)")
    ("layers", po::value(&m.L)->default_value(4), "L: transformer blocks")
    ("ffn", po::value(&ffn)->default_value(0), "MLP hidden width (0 = 4 x dim)")
    ("seq", po::value(&t.seq)->default_value(128), "T: tokens per sequence (context length)")
    ("dropout", po::value(&t.dropout)->default_value(0.0f, "0"), "dropout probability on embeddings and residual branches")
    ("init-from", po::value(&o.init_from)->default_value(""), "start from the weights in this model directory (xtrain_export output, or a Hugging Face GPT2LMHeadModel or LlamaForCausalLM directory with model.safetensors + config.json); the model options above that are not given (--arch and the Llama options included) come from its config.json, and with no tokenizer option the tokenizer is the directory's (tokenizer.model, tokenizer.json, or vocab.json + merges.txt); with --resume, the checkpoint's weights win");
  po::options_description train = cli_group("Training");
  train.add_options()
    ("batch", po::value(&t.batch)->default_value(16), "GLOBAL sequences per optimizer step (all ranks, all micro-steps)")
    ("grad-accum", po::value(&t.grad_accum)->default_value(1), "micro-steps per optimizer step")
    ("bucket-mb", po::value(&t.bucket_mb)->default_value(25.0, "25"), "gradient all-reduce bucket size in MiB: buckets start during the backward pass, last layers first (0 = one all-reduce after it; bitwise the same result with xtrain_threads on CPUs, at world 2, and at world 3 under Open MPI; at world >= 4 under MPI or NCCL possibly not in the last bits, docs/scaling.md)")
    ("steps", po::value(&t.steps)->default_value(100), "optimizer steps (with --resume: the checkpoint's; a larger value extends the run, its steps past the checkpoint's LR schedule at the schedule's final learning rate)")
    ("stop-after", po::value(&t.stop_after)->default_value(0), "end this run after N steps, writing --ckpt; the LR schedule still spans --steps (time-limited jobs; 0 = off)")
    ("optimizer", po::value(&optimizer)->default_value("adamw"), "adamw | muon. adamw: AdamW on every tensor; muon: Muon (as torch.optim.Muon: Nesterov momentum, quintic Newton-Schulz orthogonalization) on the blocks' matrices (attention q/k/v and output, MLP fc/gate/up and down; a fused q/k/v or gate/up matrix per part) and AdamW at --lr on the rest (embeddings, head, norms, biases); docs/usage.md, \"Optimizers and schedules\"")
    ("lr", po::value(&oc.lr)->default_value(1e-3f, "1e-3"), "peak learning rate (AdamW's; with --optimizer muon, of the tensors Muon does not take)")
    ("lr-schedule", po::value(&lr_schedule)->default_value("cosine"), "cosine | wsd | linear: after the linear warmup, cosine decay to lr x --min-lr-frac at --steps; wsd (warmup-stable-decay): the peak until the last --decay-frac of the run, then a linear decay (a resume with a larger --steps in the stable phase keeps it and decays at the new end); linear: a linear decay")
    ("decay-frac", po::value(&oc.decay_frac)->default_value(0.2f, "0.2"), scoped_help("decay-frac", "the share of the run wsd's decay takes, in (0, 1]: at least one step (round(decay-frac x steps) >= 1)").c_str())
    ("warmup", po::value(&oc.warmup_steps)->default_value(20), "linear warmup steps (wsd: fewer than the schedule's steps, so its decay has a step)")
    ("min-lr-frac", po::value(&oc.min_lr_frac)->default_value(0.1f, "0.1"), "the schedule decays to lr x this")
    ("weight-decay", po::value(&oc.weight_decay)->default_value(0.1f, "0.1"), "AdamW decoupled weight decay (2-D weights only): param *= 1 - lr x this each step; >= 0, and lr x this below 1 (at 1 every step sets the weights to 0)")
    ("beta1", po::value(&oc.beta1)->default_value(0.9f, "0.9"), "AdamW beta1 (first-moment decay, in [0, 1))")
    ("beta2", po::value(&oc.beta2)->default_value(0.95f, "0.95"), "AdamW beta2 (second-moment decay, in [0, 1))")
    ("adam-eps", po::value(&oc.eps)->default_value(1e-8f, "1e-8"), "AdamW epsilon (added to the root of the second moment)")
    ("muon-lr", po::value(&oc.muon.lr)->default_value(0.02f, "0.02"), scoped_help("muon-lr", "Muon's peak learning rate, positive and finite as --lr (the schedule scales it as --lr)").c_str())
    ("muon-momentum", po::value(&oc.muon.momentum)->default_value(0.95f, "0.95"), scoped_help("muon-momentum", "Muon's momentum (Nesterov), in [0, 1) as --beta1").c_str())
    ("muon-weight-decay", po::value(&oc.muon.weight_decay)->default_value(0.0f, "0"), scoped_help("muon-weight-decay", "Muon's decoupled weight decay: param *= 1 - lr x this each step; bounded as --weight-decay: >= 0, and --muon-lr x this below 1").c_str())
    ("muon-ns-steps", po::value(&oc.muon.ns_steps)->default_value(5), scoped_help("muon-ns-steps", "Newton-Schulz steps per Muon update (1 to 99)").c_str())
    ("muon-adjust", po::value(&muon_adjust)->default_value("original"), scoped_help("muon-adjust", "original | match_rms_adamw: Muon's learning rate per (rows, cols) matrix, torch.optim.Muon's adjust_lr_fn: original: lr x sqrt(max(1, rows/cols)); match_rms_adamw: lr x 0.2 sqrt(max(rows, cols)) (update RMS as AdamW's: reuse AdamW's lr and weight decay)").c_str())
    ("grad-clip", po::value(&oc.grad_clip)->default_value(1.0f, "1.0"), "clip the global gradient L2 norm to this (0 = off)")
    ("seed", po::value(&seed)->default_value(seed), "seed of initialization, batch sampling and dropout")
    ("ckpt", po::value(&t.ckpt)->default_value(""), "checkpoint file written by rank 0 at the end (atomic)")
    ("ckpt-every", po::value(&t.ckpt_every)->default_value(0), "also write the checkpoint every N steps (0 = only at the end)")
    ("resume", po::value(&t.resume)->default_value(""), "continue from this checkpoint: the model, batch and schedule options not given (--dim ... --seed) are the checkpoint's; one given that differs is an error (give --data and tokenizer files as at the start)")
    ("metrics", po::value(&t.metrics)->default_value(""), "JSON-lines metrics file written by rank 0")
    ("log-every", po::value(&t.log_every)->default_value(1), "print a step line every N steps")
    ("timeline", po::value(&t.timeline)->default_value(""), "write rank 0's timeline of the 3 steps after the run's first (steps 2-4 of a fresh run; the only step of a 1-step run) as a Chrome trace (chrome://tracing, ui.perfetto.dev): forward, each block's backward, each gradient all-reduce's start and completion, the optimizer (host clock on CPUs, CUDA events on GPUs)")
    ("memory-report", po::bool_switch(&t.memory_report), "after the last step, rank 0 prints every buffer its allocator holds (parameters, gradients, optimizer state, activations by table row, the backend's workspaces and cache) summed by category, beside the allocator's peak (docs/cuda.md, \"Memory\")")
    ("recompute", po::value(&recompute)->default_value("auto"), "auto | 0 | 1 | 2: activation recompute: 0 = keep every layer's activations; 1 = recompute the MLP activation (GELU or SwiGLU output) in the backward; 2 = also the norm outputs (less memory, a little more compute; results bitwise unchanged); auto = 1 for SwiGLU models (one elementwise pass over the kept gate/up product, cheaper to recompute than to keep), 0 for GELU ones (GELU is fused into the fc matmul on CUDA: recomputing it costs that matmul)")
    ("logits-chunk-rows", po::value(&t.logits_chunk_rows)->default_value(0), "the head and the cross-entropy run in chunks of this many rows (positions) of the micro-batch, each chunk's head backward at once, so only one chunk's logits (rows x padded vocabulary) are held. 0 = automatic: for a vocabulary of more than 65,536 tokens, all rows where their logits fit in 256 MiB, else the fewest equal chunks under that (Llama-3.2-1B, 8192 rows: 8 of 1024); a smaller vocabulary (GPT-2's) keeps one chunk. Each chunk adds one read and write of the head's fp32 weight gradient; another value changes the results in the last bits (summation order), so a bitwise --resume needs the same value (not stored in the checkpoint)")
    ("fp8", po::value(&fp8)->default_value("none"), "none | mlp | head | mlp,head: multiply these linear layers in FP8. Needs the CUDA backend, --dtype bf16, --weight-copy persistent and a GPU of compute capability 8.9 or newer (L40S, H100, H200). mlp = each block's MLP (SwiGLU's gate/up and down projections, GELU's fc and fc_proj), head = the output head. Forward E4M3 x E4M3 (cuBLASLt's fast accumulation, as torchao), input and weight gradients E5M2 x E4M3 (fp32 accumulation), each tensor with one scale from its current amax (torchao's tensor-wise float8 recipe); activations bf16, master weights, gradients and optimizer state fp32 as without it. A weight whose dimensions are not multiples of 16 (or that is not 16-byte aligned) stays bf16, and so does a product whose rows are not a multiple of 16 (decoding); the run's `xtrain |` line says how many matrices are in FP8. Costs 2 bytes per parameter of the matrices taken plus the casts' scratch; MFU stays against the bf16 peak. At the Llama-3.2-1B shape mlp is 1.11x bf16 with the loss of bf16, the head in FP8 costs loss; small models run slower (docs/cuda.md, \"FP8\"). Not stored in a checkpoint: a --resume runs with the --fp8 it is given")
    ("cuda-graph", po::value(&cuda_graph)->default_value("auto"), "auto | on | off: with --grad-accum 1, --dropout 0 and no --timeline, record the step's forward and backward as a CUDA graph at the second step and launch that graph from then on (fewer launch gaps; results bitwise unchanged). auto = on one GPU (world 1); on = also with several GPUs, the bucketed gradient all-reduce (NCCL) recorded inside the graph (off by default with several GPUs); off = launch every kernel; no effect on the CPU backend (docs/cuda.md)");
  po::options_description sys = cli_group("System");
  sys.add_options()
    ("device", po::value(&device)->default_value("auto"), ("auto | cpu | cuda (compiled in: " + compiled_backends() + ")").c_str())
    ("dtype", po::value(&dtype)->default_value("auto"), "auto | fp32 | bf16 (auto: bf16 on cuda, fp32 on cpu; bf16: CUDA only: bf16 activations and tensor-core matmuls, fp32 weights and optimizer state)")
    ("attention", po::value(&attention)->default_value("auto"), "auto | flash | gemm | cudnn: the CUDA attention route (auto: cudnn with bf16, where cuDNN has a deterministic plan for the shape, else flash; gemm with fp32. cudnn: cuDNN's fused attention, bf16 only; flash: FlashAttention-2 kernels; gemm: cuBLAS GEMMs around a softmax kernel; shapes a route does not take go to flash, then gemm; docs/cuda.md)")
    ("weight-copy", po::value(&weight_copy)->default_value("persistent"), "persistent | per-use: how bf16 matmuls get bf16 copies of the fp32 weights. persistent: one copy of every weight kept on the GPU, rounded once per forward (2 bytes per parameter of memory); per-use: each matmul rounds its weight into a scratch copy (saves that memory; every weight rounded once per use instead of once per step: a little slower, docs/benchmarks.md). Results bitwise the same. Needs --dtype bf16 on cuda: per-use is refused with fp32 and on the CPU backend, which keep no copy (docs/cuda.md)")
    ("comm-timeout", po::value(&o.comm_timeout_s)->default_value(300.0, "300"), "seconds one collective (NCCL or MPI) may wait for the other ranks before the job aborts naming rank, step and operation (1 to 1e6; the ranks keep meeting while some work alone: tokenizing, rank 0 writing a checkpoint)");
  if (launcher == Launcher::threads)
    sys.add_options()("ranks", po::value(&o.ranks)->default_value(0), "ranks, one thread each (0 = one per visible GPU; required with the CPU backend)");
  CliSpec spec{launcher == Launcher::mpi ? "xtrain_mpi" : "xtrain_threads",
               launcher == Launcher::mpi
                   ? "Usage: mpirun -np N xtrain_mpi [options]\nTrains a GPT data-parallel over MPI ranks"
                   : "Usage: xtrain_threads [--ranks N] [options]\nTrains a GPT data-parallel over ranks that are "
                     "threads of this process (one GPU each on cuda)",
               cli_group(""), {}, {}};
  spec.options.add(data).add(model).add(train).add(sys);
  CliArgs args = parse_cli(spec, argc, argv);
  const po::variables_map& vm = args.vm;
  o.help = args.help, o.version = args.version;
  o.help_text = std::move(args.help_text), o.version_text = std::move(args.version_text);
  if (o.help || o.version) return o;
  reject_empty_values(vm, {"data", "val-data", "tokens-cache", "cache-dir", "init-from", "ckpt", "resume", "metrics", "timeline"});
  if (!o.init_from.empty()) {
    GPTConfig f;
    try {
      f = read_model_config(o.init_from);
    } catch (const Error& e) {  // a missing or bad config.json is a bad input file: exit 1, as for xtrain_generate --model
      throw Error(std::string("--init-from: ") + e.what());
    }
    // model options not given on the command line come from the model's config.json
    auto take = [&](const char* opt, int& dst, int v) { if (vm[opt].defaulted()) dst = v; };
    take("dim", m.C, f.C), take("heads", m.NH, f.NH), take("kv-heads", kv_heads, f.KVH), take("head-dim", head_dim, f.HS);
    take("layers", m.L, f.L), take("ffn", ffn, f.F), take("seq", t.seq, f.maxT);
    if (vm["arch"].defaulted()) arch = to_string(f.arch);
    if (f.traits().untied_head && vm["tie-embeddings"].defaulted()) tie = f.tied() ? "true" : "false";
    if (f.rmsnorm() && vm["norm-eps"].defaulted()) m.norm_eps = f.norm_eps;
    if (f.rotary() && vm["rope-theta"].defaulted()) m.rope_theta = f.rope_theta;
  }
  // --resume: the model, batch and schedule options not given come from the checkpoint
  const bool resume_read =
      take_from_checkpoint([&](const char* opt) { return !vm[opt].defaulted(); }, t, ModelOptions{kv_heads, head_dim, ffn, arch, tie},
                           &seed, OptimizerOptions{optimizer, lr_schedule, muon_adjust});
  o.canonical = canonical_options(spec.options, vm);
  t.seed = parse_seed(seed);
  read_tokenizer_options(vm, o.tokenizer);
  o.device = parse_device(device);
  o.dtype = parse_dtype(dtype);
  o.attention = parse_attention(attention);
  o.weight_copy = parse_weight_copy(weight_copy);
  oc.kind = parse_optimizer(optimizer);
  oc.schedule = parse_lr_schedule(lr_schedule);
  oc.muon.adjust = parse_muon_adjust(muon_adjust);
  m.maxT = t.seq;
  m.arch = parse_arch(arch);
  if (tie != "true" && tie != "false") throw UsageError("--tie-embeddings must be true or false, got '" + tie + "'");
  m.tie_embeddings = tie == "true" ? 1 : 0;
  // an option given with a value of another that does not read it (kOptionScopes): one line naming both.
  // The values after --init-from and --resume took theirs (an option they take is not "given"). With a
  // --resume that cannot be read the run's values are not known: the check waits, and run_rank's input
  // checks name the checkpoint's own problem (exit 1) rather than a scope the checkpoint might settle.
  const std::pair<const char*, std::string> chosen[] = {
      {"arch", to_string(m.arch)}, {"lr-schedule", to_string(oc.schedule)}, {"optimizer", to_string(oc.kind)}};
  for (const OptionScope& sc : kOptionScopes) {
    if (vm[sc.option].defaulted() || !resume_read) continue;
    for (const auto& [opt, value] : chosen)
      if (std::string(sc.needs) == opt && value != sc.value)
        throw UsageError(std::string("--") + sc.option + " needs --" + sc.needs + " " + sc.value + " (this run's --" +
                         sc.needs + " is " + value + ", which does not read it)");
  }
  m.KVH = kv_heads > 0 ? kv_heads : m.NH;
  if (m.NH <= 0) throw UsageError("--heads must be positive");
  // Sizes are bounded before any arithmetic in int: every tensor dimension and product stays far
  // from 2^31, and a model that cannot fit in memory is a usage error, not an allocation failure.
  GPTConfig given = m;  // the sizes as given (0: derived below)
  given.KVH = kv_heads, given.HS = head_dim, given.F = ffn;
  given.check_size();
  m.HS = head_dim > 0 ? head_dim : m.C / m.NH;
  m.F = ffn > 0 ? ffn : 4 * m.C;
  if (head_dim == 0 && m.C % m.NH != 0) throw UsageError("--dim must be divisible by --heads (or give --head-dim)");
  if (kv_heads < 0 || head_dim < 0 || ffn < 0) throw UsageError("--kv-heads, --head-dim and --ffn must be >= 0");
  m.validate();
  auto need = [](bool ok, const std::string& msg) {
    if (!ok) throw UsageError(msg);
  };
  // One bound per kind of value, shared by AdamW's options and their Muon counterparts (--muon-lr as
  // --lr, --muon-momentum as --beta1, --muon-weight-decay as --weight-decay). Decoupled weight decay
  // multiplies the weights by 1 - lr x wd each step (at the peak lr): at lr x wd = 1 that factor is 0 and
  // every step wipes the weights; past it the factor turns negative and flips every weight's sign.
  auto learning_rate = [&](const char* opt, float lr) { need(std::isfinite(lr) && lr > 0, std::string(opt) + " must be positive and finite"); };
  auto moment_decay = [&](const char* opt, float beta) { need(beta >= 0 && beta < 1, std::string(opt) + " must be in [0, 1)"); };
  auto weight_decay = [&](const char* opt, float wd, const char* lr_opt, float lr) {
    need(std::isfinite(wd) && wd >= 0, std::string(opt) + " must be >= 0 and finite");
    std::ostringstream os;
    os << opt << " " << wd << " x " << lr_opt << " " << lr << " = " << double(wd) * lr
       << " must be below 1 (decoupled weight decay multiplies the weights by 1 - lr x weight decay each step)";
    need(double(wd) * lr < 1, os.str());
  };
  need(t.batch > 0, "--batch must be positive");
  need(t.seq > 0, "--seq must be positive");
  need(t.steps > 0, "--steps must be positive");
  need(t.grad_accum > 0, "--grad-accum must be positive");
  need(std::isfinite(t.bucket_mb) && t.bucket_mb >= 0 && t.bucket_mb <= 1e6, "--bucket-mb must be between 0 and 1e6");
  need(t.dropout >= 0.0f && t.dropout < 1.0f, "--dropout must be in [0, 1)");
  learning_rate("--lr", oc.lr);
  weight_decay("--weight-decay", oc.weight_decay, "--lr", oc.lr);
  need(std::isfinite(oc.grad_clip) && std::isfinite(o.comm_timeout_s), "--grad-clip and --comm-timeout must be finite");
  need(t.grad_accum <= t.batch, "--grad-accum must not exceed --batch");
  need(oc.warmup_steps >= 0, "--warmup must be >= 0");
  need(oc.min_lr_frac >= 0 && oc.min_lr_frac <= 1, "--min-lr-frac must be in [0, 1]");
  need(oc.grad_clip >= 0, "--grad-clip must be >= 0");
  moment_decay("--beta1", oc.beta1);
  moment_decay("--beta2", oc.beta2);
  need(std::isfinite(oc.eps) && oc.eps > 0, "--adam-eps must be positive and finite");
  need(oc.decay_frac > 0 && oc.decay_frac <= 1, "--decay-frac must be in (0, 1]");
  if (oc.schedule == LrSchedule::wsd) {  // the decay has at least one step: it starts after wsd_decay_start
    const int S = t.schedule_length();
    if (wsd_decay_start(S, oc.warmup_steps, oc.decay_frac) >= S) {
      std::ostringstream os;  // the cause: a decay share that rounds to 0 steps, or a warmup that fills the run
      if (std::lround(static_cast<double>(oc.decay_frac) * S) < 1)
        os << "--decay-frac " << oc.decay_frac << " of a " << S << "-step schedule is round(" << double(oc.decay_frac) * S
           << ") = 0 decay steps: the run would end at its peak learning rate; give --decay-frac >= " << 1.0 / S
           << " (one step) or another --lr-schedule";
      else
        os << "--warmup " << oc.warmup_steps << " fills the " << S << "-step wsd schedule (its decay starts after the warmup): "
           << "0 decay steps, the run would end at its peak learning rate; give --warmup < " << S << " or another --lr-schedule";
      throw UsageError(os.str());
    }
  }
  learning_rate("--muon-lr", oc.muon.lr);
  moment_decay("--muon-momentum", oc.muon.momentum);
  weight_decay("--muon-weight-decay", oc.muon.weight_decay, "--muon-lr", oc.muon.lr);
  need(oc.muon.ns_steps >= 1 && oc.muon.ns_steps <= 99, "--muon-ns-steps must be between 1 and 99");
  need(t.val_fraction >= 0 && t.val_fraction < 1, "--val-fraction must be in [0, 1)");
  need(t.val_every >= 0, "--val-every must be >= 0");
  need(t.val_seqs > 0, "--val-seqs must be positive");
  need(t.val_every > 0 || vm["val-seqs"].defaulted(), "--val-seqs needs --val-every > 0 (with --val-every 0 nothing is evaluated)");
  need(t.eval_batch >= 1 && t.eval_batch <= 65536, "--eval-batch must be in [1, 65536]");
  o.evals = parse_eval_specs(eval_specs, "--eval", "NAME=FILES");
  o.eval_mcs = parse_eval_specs(eval_mc_specs, "--eval-mc", "NAME=FILE");
  for (const auto& a : o.evals)
    for (const auto& b : o.eval_mcs)
      if (a.first == b.first) throw UsageError("--eval and --eval-mc both name a set '" + a.first + "'");
  need(t.val_every > 0 || (o.evals.empty() && o.eval_mcs.empty()), "--eval and --eval-mc need --val-every > 0 (they are scored at every --val-every step)");
  need(t.stop_after >= 0, "--stop-after must be >= 0");
  need(t.ckpt_every >= 0, "--ckpt-every must be >= 0");
  need(t.log_every > 0, "--log-every must be positive");
  need(recompute == "auto" || recompute == "0" || recompute == "1" || recompute == "2",
       "--recompute must be auto, 0, 1 or 2, got " + recompute);
  t.recompute = recompute == "auto" ? -1 : std::stoi(recompute);
  need(t.logits_chunk_rows >= 0, "--logits-chunk-rows must be >= 0 (0 = automatic), got " + std::to_string(t.logits_chunk_rows));
  t.fp8 = parse_fp8_linears(fp8);
  for (auto& e : o.canonical)  // one text per value ("head,mlp" is "mlp,head"), as check_options_agree compares
    if (e.first == "--fp8") e.second = fp8_linears_name(t.fp8);
  need(cuda_graph == "auto" || cuda_graph == "on" || cuda_graph == "off", "--cuda-graph must be auto, on or off");
  t.cuda_graph = cuda_graph == "on"    ? TrainConfig::CudaGraph::on
                 : cuda_graph == "off" ? TrainConfig::CudaGraph::off
                                       : TrainConfig::CudaGraph::auto_one_rank;
  // upper bound: deadlines are steady_clock time points (int64 ns); 1e6 s (11.6 days) is far from overflow
  need(o.comm_timeout_s >= 1 && o.comm_timeout_s <= 1e6, "--comm-timeout must be between 1 and 1e6 seconds");
  need(!(t.ckpt_every > 0 && t.ckpt.empty()), "--ckpt-every needs --ckpt");
  need(!(t.stop_after > 0 && t.ckpt.empty()), "--stop-after needs --ckpt (otherwise the stopped run saves nothing)");
  need(o.ranks >= 0 && o.ranks <= 4096, "--ranks must be between 0 and 4096");
  need(!(o.no_cache && !o.tokens_cache.empty()), "--tokens-cache and --no-cache exclude each other (--no-cache writes no cache)");
  check_no_cache(o.no_cache, o.cache_dir);
  need(o.val_data.empty() || o.tokens_cache.empty(), "--tokens-cache names the cache of one --data file; with --val-data each cache is <file>.tokcache");
  o.data_format = parse_data_format(data_format);
  need(!o.jsonl_field.empty(), "--jsonl-field must not be empty");
  o.jsonl_field_given = !vm["jsonl-field"].defaulted();
  if (vm["data"].defaulted()) {
    std::error_code ec;
    if (!std::filesystem::exists(o.data, ec))
      throw UsageError("--data: the default " + echo_value(o.data, kEchoPathChars) + " is missing (" + data_dir_note("--data FILE") + ")");
  }
  return o;
}

std::vector<OutputFile> run_outputs(const RunOptions& o) {
  std::vector<OutputFile> out;
  for (const OutputFile& f : {OutputFile{"--ckpt", o.train.ckpt}, OutputFile{"--metrics", o.train.metrics},
                              OutputFile{"--timeline", o.train.timeline}})
    if (!f.path.empty()) out.push_back(f);
  return out;
}

void check_distinct_paths(const RunOptions& o, const std::vector<std::string>& data_files,
                          const std::vector<std::string>& val_files) {
  struct Path {
    std::string opt, path;
  };
  for (const std::string& v : val_files)
    for (const std::string& d : data_files)
      if (same_file(v, d)) throw UsageError("--val-data " + v + " is also a --data file (" + d + ")");
  std::vector<Path> reads, caches, outputs;  // read only; read and written; written
  for (const std::string& f : data_files) reads.push_back({"--data", f});
  for (const std::string& f : val_files) reads.push_back({"--val-data", f});
  for (const auto& [name, spec] : o.evals)
    for (const std::string& f : list_data_files(spec, "--eval " + name)) reads.push_back({"--eval " + name, f});
  for (const auto& [name, file] : o.eval_mcs) reads.push_back({"--eval-mc " + name, file});
  const size_t n_data = reads.size();
  for (const auto& [opt, path] : tokenizer_inputs(o.tokenizer)) reads.push_back({opt, path});
  reads.push_back({"--resume", o.train.resume});
  if (!o.init_from.empty()) {  // every file of the model directory
    std::error_code ec;
    for (std::filesystem::directory_iterator it(o.init_from, ec), end; !ec && it != end; it.increment(ec))
      reads.push_back({"--init-from", it->path().string()});
  }
  // Caches are protected with --no-cache too: it only means this run neither reads nor writes them.
  if (!o.tokens_cache.empty()) caches.push_back({"--tokens-cache", o.tokens_cache});
  if (o.tokens_cache.empty() && o.cache_dir == kCacheNextToData)
    for (size_t i = 0; i < n_data; ++i) caches.push_back({"the token cache", reads[i].path + ".tokcache"});
  for (const OutputFile& f : run_outputs(o)) outputs.push_back({f.opt, f.path});

  const auto differ = [](const Path& a, const Path& b) {
    if (same_file(a.path, b.path)) throw UsageError(a.opt + " and " + b.opt + " name the same file (" + b.path + ")");
  };
  // Caches against the other inputs. Against the data files only for a single file: implicit caches
  // are <file>.tokcache, which a directory listing leaves out, and files x caches grows as files^2.
  for (const Path& c : caches)
    for (size_t i = n_data == 1 ? 0 : n_data; i < reads.size(); ++i) differ(reads[i], c);
  for (size_t k = 0; k < outputs.size(); ++k) {
    // the token caches' name (cache_file_name, next to the data, in --cache-dir): which cache a run maps is
    // known only once the data is hashed, and writing one that the ranks have mapped kills them (SIGBUS)
    if (is_token_cache_name(outputs[k].path))
      throw UsageError(outputs[k].opt + " " + outputs[k].path + " ends in " + kTokenCacheExt +
                       ", the name of token caches: choose another name");
    // and their directory, where the tokenizer tables are too (.toktables)
    check_output_outside_cache_dirs(outputs[k].path, outputs[k].opt, o.cache_dir);
    for (const Path& r : reads)
      if (!(r.opt == "--resume" && outputs[k].opt == "--ckpt")) differ(r, outputs[k]);  // a requeued job resumes from its --ckpt
    for (const Path& c : caches) differ(c, outputs[k]);
    for (size_t j = 0; j < k; ++j) differ(outputs[j], outputs[k]);
  }
  // the lock beside each output (held by rank 0 for the whole run, removed at its end): an input or
  // another output given its name is named here, before run_rank takes any lock
  for (const Path& out : outputs) {
    const Path lock{out.opt + "'s lock file", out.path + ".lock"};
    for (const Path& other : outputs)
      if (other.opt != out.opt) differ(lock, other);
    for (const Path& r : reads) differ(r, lock);
    for (const Path& c : caches) differ(c, lock);
  }
  // Then no output inside a --data or --val-data directory: the next run would read it as a shard.
  std::vector<Path> dirs;
  for (const std::string& entry : data_spec_entries(o.data)) dirs.push_back({"--data", entry});
  if (!o.val_data.empty())
    for (const std::string& entry : data_spec_entries(o.val_data, "--val-data")) dirs.push_back({"--val-data", entry});
  for (const Path& dir : dirs) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir.path, ec)) continue;
    for (const Path& out : outputs) {
      if (out.path.empty()) continue;
      const std::string parent = std::filesystem::path(out.path).parent_path().string();
      if (same_file(parent.empty() ? "." : parent, dir.path))
        throw UsageError(out.opt + " " + out.path + " is inside the " + dir.opt + " directory " + dir.path +
                         " (a later run would read it as a shard)");
    }
  }
}

void check_jsonl_field(const RunOptions& o, const std::vector<std::string>& data_files,
                       const std::vector<std::string>& val_files) {
  if (!o.jsonl_field_given) return;
  std::vector<std::string> files = data_files;
  files.insert(files.end(), val_files.begin(), val_files.end());
  for (const auto& [name, spec] : o.evals)
    for (const std::string& f : list_data_files(spec, "--eval " + name)) files.push_back(f);
  check_jsonl_field_read(o.jsonl_field, o.data_format, files, "--data, --val-data or --eval");
}

void check_world(const RunOptions& o, int world) {
  const TrainConfig& t = o.train;
  const long long per_step = static_cast<long long>(world) * t.grad_accum;  // 64-bit: no overflow
  if (t.batch % per_step != 0) {
    std::ostringstream os;
    os << "--batch " << t.batch << " must be divisible by world size x --grad-accum = " << world << " x "
       << t.grad_accum << " = " << per_step;
    throw UsageError(os.str());
  }
}

}  // namespace xtrain
