// xtrain_generate: text from a trained model (an xtrain checkpoint or an export directory) with a KV
// cache, streamed as it is made, then one line of prompt and generation speed on stderr (with --timing the
// cold start's phases, with --repeat the warm generations' figures). A plain process (no launcher, no MPI).
// Exit codes (core/cli.h): 0 success, 1 runtime error, 2 usage error.
#include <boost/program_options.hpp>

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <cstdio>
#include <exception>
#include <future>
#include <sstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <xtrain/backend/registry.h>
#include "core/cli.h"
#include <xtrain/backend/backend.h>
#include "core/digest.h"
#include <xtrain/core/error.h>
#include "core/io.h"
#include <xtrain/core/progress.h>
#include "data/tiktoken.h"
#include "data/token_cache.h"
#include "data/tokenizer_options.h"
#include <xtrain/model/inference.h>
#include <xtrain/model/model.h>
#include <xtrain/serve/export.h>
#include <xtrain/serve/generate.h>
#include <xtrain/checkpoint/checkpoint.h>

namespace po = boost::program_options;
using Clock = std::chrono::steady_clock;
using namespace xtrain;

namespace {

constexpr const char* kUsage =
    "Usage: xtrain_generate (--ckpt FILE | --model DIR) [--prompt TEXT | --prompt-file FILE | --prompt-ids IDS]\n"
    "                       [options]\n"
    "Samples text from a trained GPT with a KV cache.";

// make_options: this tool's options; the tokenizer files are bound to `files`.
po::options_description make_options(TokenizerFiles& files) {
  po::options_description o = cli_group("Options");
  o.add_options()
      ("ckpt", po::value<std::string>(), "xtrain checkpoint to generate from (xtrain_mpi --ckpt; default: none)")
      ("model", po::value<std::string>(), "export directory to generate from (xtrain_export --out; with no tokenizer option, its tokenizer: tokenizer.model, tokenizer.json, or vocab.json + merges.txt; default: none)")
      ("prompt", po::value<std::string>(), "prompt text (default, and empty: start from <|endoftext|>, GPT-2's unconditional start)")
      ("prompt-file", po::value<std::string>(), "file whose bytes are the prompt (default: none)")
      ("prompt-ids", po::value<std::string>(),
       "the prompt as token ids in [0, vocabulary size), e.g. \"15496 11 995\" or \"15496,11,995\" (what xtrain_tokenize --print-ids prints; default: none)")
      ("max-new-tokens", po::value<int>()->default_value(64),
       "tokens to generate at most; past the model's context length each token is sampled from the last maxT tokens (the context cropped, as nanoGPT does)")
      ("temperature", po::value<float>()->default_value(1.0f), "softmax temperature; 0 = greedy (argmax)")
      ("top-k", po::value<int>()->default_value(0), "sample among the k most probable tokens (0 = all)")
      ("top-p", po::value<float>()->default_value(1.0f),
       "nucleus sampling: the smallest most-probable set of probability >= p, in (0, 1]")
      ("seed", po::value<std::string>()->default_value("1337"), "sampling seed in [0, 2^64-1] (same seed, same model: same text)")
      ("batch", po::value<int>()->default_value(1),
       "sequences generated together from the same prompt, 1..4096 (sequence b draws from stream (seed, b)); above 1 "
       "the texts are printed at the end, not streamed")
      ("ignore-eos", "keep generating after <|endoftext|> (id 50256 for GPT-2)")
      ("print-ids", "print the generated token ids (one line per sequence) instead of the text")
      ("dump-logits", po::value<std::string>(),
       "write the prompt's logits to FILE: float32 little-endian, row-major (T, V), no header; row t = "
       "logits of the token after prompt tokens 0..t (docs/serving.md; default: none)")
      ("device", po::value<std::string>()->default_value("auto"), "auto | cpu | cuda")
      ("dtype", po::value<std::string>()->default_value("auto"), "auto (bf16 on cuda, fp32 on cpu) | fp32 | bf16")
      ("cuda-graph", po::value<std::string>()->default_value("auto"),
       ("auto | off: on cuda, record the one-token decoding step once as a CUDA graph and launch it per token, and "
       "for greedy decoding a run of " + std::to_string(Decoder::kGreedySteps) + " steps as one graph "
       "(same logits bit for bit, fewer launches); off = launch every kernel; no effect on cpu").c_str())
      ("timing",
       ("print on stderr one 'timing | PHASE: MS ms' line per phase of this cold start: the backend set-up (in a thread "
       "started first, beside the phases up to the wait for it; on cuda followed by its parts, indented: the driver, the "
       "context, device properties and stream, the cuBLAS handle, workspace and allocator, the cuBLASLt handle, and the "
       "cuBLASLt heuristics once their own thread is done; no cuDNN handle: it is made at the first cuDNN attention, "
       "which decoding never calls), then in order: reading the model file (--ckpt), loading "
       "the tokenizer, encoding the prompt, waiting for the backend set-up, reading the model file (--model: into the "
       "backend's memory), weights to the device, decoder allocation and weight preparation, the prompt to the first "
       "token, recording the decoding graphs, the first decoding call (greedy: " +
        std::to_string(Decoder::kGreedySteps) + " one-token steps whose tokens the device feeds itself, or one); then "
       "steady decoding (tokens, ms, tok/s; a graph recorded after the first call left out) and "
       "the process start to the first token (from the process's start time in /proc/self/stat: 10 ms ticks); "
       "--dump-logits adds its phase (the prompt's forward and the file) before the decoder's; with "
       "--max-new-tokens 0 the lines end there: no token is made, so no decoder, decoding or first-token lines; a "
       "phase that did not run has no line (no one-token step with --max-new-tokens 1: no first-call or steady line)").c_str())
      ("repeat", po::value<int>()->default_value(1),
       "generate N times in this process from the same prompt (only the first is printed; every one must give "
       "the same tokens) and print a 'repeat |' line: the warm prompt-to-first-token time (median over "
       "generations 2..N) and the steady decoding speed over them; 1..1000; above 1, needs --max-new-tokens >= 1");
  add_tokenizer_options(o, files, {"with --model: DIR/vocab.json unless given", "with --model: DIR/merges.txt unless given"});
  // (with --model and no tokenizer option at all, the directory's tokenizer: model_dir_tokenizer)
  return o;
}

// LoadedModel: what generation needs from a checkpoint or an export directory.
struct LoadedModel {
  GPTConfig config;
  std::vector<float> params;  // host, param_layout order
  uint64_t tokenizer_fingerprint = 0;  // 0 = not recorded (exports made by transformers)
  std::string fingerprint_source;      // where tokenizer_fingerprint was recorded (for messages)
  std::string vocab_json, merges_txt;  // an export's tokenizer files ("" when absent)
  std::optional<ModelDir> dir;         // --model: the directory (its params moved out)
};

// load_model: the checkpoint's or the directory's model. With params_for (an export directory) the weights
// go where it says (load_model_dir) and LoadedModel::params stays empty: host memory, or with `device`
// that backend's memory, uploaded in parts (no host copy of the model).
LoadedModel load_model(const po::variables_map& vm, const std::function<float*(const GPTConfig&)>& params_for,
                       Backend* device) {
  LoadedModel m;
  if (vm.count("ckpt")) {
    ProgressOptions progress = long_work_options();
    progress.out = stderr;  // stdout is the generated text
    CheckpointState st = load_checkpoint(vm["ckpt"].as<std::string>(), 0, progress);
    m.config = st.meta.model;
    m.params = std::move(st.params);
    m.tokenizer_fingerprint = st.meta.tokenizer_fingerprint;
    m.fingerprint_source = "the checkpoint";
    return m;
  }
  const std::string dir = vm["model"].as<std::string>();
  ModelDir d = device ? load_model_dir(dir, params_for, *device) : load_model_dir(dir, params_for);
  m.config = d.cfg;
  m.params = std::move(d.params);
  m.vocab_json = d.vocab_json, m.merges_txt = d.merges_txt;
  m.tokenizer_fingerprint = d.tokenizer_fingerprint;
  m.fingerprint_source = "its config.json";
  m.dir = std::move(d);
  return m;
}

// load_tokenizer_for: with --model and no tokenizer option, the directory's tokenizer
// (model_dir_tokenizer); else the options' tokenizer, checked against the directory's
// (check_model_tokenizer), except that with an export holding vocab.json and merges.txt, each of
// --encoder-json / --vocab-bpe not given on the command line is the export's file (as --help says), not
// the data/gpt2 default.
Tokenizer load_tokenizer_for(const TokenizerFiles& files, const LoadedModel& lm) {
  if (!lm.dir) return load_tokenizer(files);  // files.cache_dir: the tables of the last start (run below)
  const std::string what = "--model " + lm.dir->dir;
  if (!files.any_given) return model_dir_tokenizer(*lm.dir, what, files);  // files.cache_dir: its tables too
  TokenizerFiles f = files;
  const bool gpt2_pair = files.tokenizer_json.empty() && files.tokenizer_model.empty() && tokenizer_ranks_path(files).empty();
  if (gpt2_pair && !lm.vocab_json.empty() && !lm.merges_txt.empty()) {
    if (!f.encoder_json_given) f.encoder_json = lm.vocab_json;
    if (!f.vocab_bpe_given) f.vocab_bpe = lm.merges_txt;
  }
  Tokenizer tok = load_tokenizer(f);
  check_model_tokenizer(*lm.dir, tok, what, /*check_files=*/false);  // the fingerprint: the files may be those given
  return tok;
}

// tokenizer_mismatch: the line for a model trained with another tokenizer than the one loaded: what was
// loaded (the files, and whether they are the defaults), the model's fingerprint and where it is recorded,
// the encoding of that fingerprint when it is one of the tiktoken encodings whose rank file is installed
// (the run's option then), else the options that name a tokenizer.
std::string tokenizer_mismatch(const TokenizerFiles& files, const Tokenizer& tok, const LoadedModel& lm) {
  const bool gpt2_pair = files.tokenizer_json.empty() && files.tokenizer_model.empty() && tokenizer_ranks_path(files).empty();
  const bool defaults = gpt2_pair && files.gpt2_defaults();
  std::string loaded;
  if (gpt2_pair && !lm.vocab_json.empty() && !lm.merges_txt.empty()) {  // load_tokenizer_for: the directory's files
    loaded = (files.encoder_json_given ? "--encoder-json " + files.encoder_json : lm.vocab_json) + " + " +
             (files.vocab_bpe_given ? "--vocab-bpe " + files.vocab_bpe : lm.merges_txt);
  } else {
    for (const auto& [opt, path] : tokenizer_inputs(files)) loaded += (loaded.empty() ? "" : " + ") + opt + " " + path;
    if (defaults) loaded = "no tokenizer option given: the default GPT-2 files " + loaded;
  }
  std::string hint;
  for (const std::string& name : tiktoken_names()) {
    if (!tokenizer_ranks_path(files).empty() && name == files.tokenizer) continue;  // the one that did not match
    std::error_code ec;
    if (!std::filesystem::exists(tiktoken_default_file(name), ec)) continue;
    try {
      if (Tokenizer::from_tiktoken(tiktoken_default_file(name), name).fingerprint() == lm.tokenizer_fingerprint) {
        hint = "it is --tokenizer " + name;
        break;
      }
    } catch (const Error&) {
    }
  }
  if (hint.empty())
    hint = "give the tokenizer options of its training run: --tokenizer NAME, --tokenizer-json FILE, --tokenizer-model FILE or "
           "--encoder-json FILE --vocab-bpe FILE";
  return "the model was trained with the tokenizer of fingerprint " + hex64(lm.tokenizer_fingerprint) + " (" + lm.fingerprint_source +
         "), not the one loaded (" + loaded +
         ", fingerprint " + hex64(tok.fingerprint()) + "): " + hint;
}

// check_dump_logits_target: --dump-logits must not name any file this run reads (the checkpoint, the
// model directory's files, the tokenizer files, the prompt file; UsageError naming both otherwise)
// and must be writable (check_writable: Error), checked before the model loads.
void check_dump_logits_target(const po::variables_map& vm) {
  if (!vm.count("dump-logits")) return;
  const std::string out = vm["dump-logits"].as<std::string>();
  // as the trainer's outputs: a token cache's name, which training ranks may have mapped (SIGBUS if rewritten)
  if (is_token_cache_name(out))
    throw UsageError("--dump-logits " + out + " ends in " + kTokenCacheExt + ", the name of token caches: choose another name");
  check_output_outside_cache_dirs(out, "--dump-logits", "");  // nor in the per-user cache directory (token_cache.h)
  std::vector<std::string> inputs;
  for (const char* o : {"ckpt", "prompt-file", "tokenizer-json", "tokenizer-model", "tokenizer-ranks", "encoder-json", "vocab-bpe"})
    if (vm.count(o)) inputs.push_back(vm[o].as<std::string>());
  if (vm.count("model"))
    for (const char* f : kExportFileNames)
      inputs.push_back(vm["model"].as<std::string>() + "/" + f);
  for (const std::string& in : inputs)
    if (same_file(out, in)) throw UsageError("--dump-logits " + out + " is an input of this run (" + in + "); not overwriting it");
  check_writable(out, "--dump-logits");
}

void write_logits(const std::string& path, const std::vector<float>& logits) {
  const uint32_t probe = 1;
  XT_CHECK(*reinterpret_cast<const unsigned char*>(&probe) == 1, "--dump-logits writes little-endian floats; this host is big-endian");
  write_file_atomic(path, std::string(reinterpret_cast<const char*>(logits.data()), logits.size() * sizeof(float)),
                    "cannot write --dump-logits");
}

// Phases: --timing's cold-start phases in order, milliseconds each. lap() ends a phase: it waits for the
// device (Backend::synchronize, so work a phase queued is counted in it) and takes the steady clock.
struct Phases {
  Clock::time_point t0 = Clock::now();
  std::vector<std::pair<std::string, double>> ms;
  void lap(const std::string& what, Backend* be) {
    if (be) be->synchronize();
    const Clock::time_point t = Clock::now();
    ms.emplace_back(what, std::chrono::duration<double, std::milli>(t - t0).count());
    t0 = t;
  }
  void add(const std::string& what, double seconds) { ms.emplace_back(what, seconds * 1e3); }
};

// BackendSetUp: the backend the set-up thread made, and how long that took (ms, from its start)
struct BackendSetUp {
  std::unique_ptr<Backend> be;
  double ms = 0;
};

// ms_since_process_start: milliseconds since the kernel started this process (/proc/self/stat's start
// time, in clock ticks since boot, against CLOCK_BOOTTIME: so the program's loading and its shared
// libraries' count too; a tick is 10 ms on Linux), or -1 where that cannot be read.
double ms_since_process_start() {
  const std::string stat = [] {
    try {
      return read_file("/proc/self/stat");
    } catch (const Error&) {
      return std::string();
    }
  }();
  const size_t paren = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos) return -1;
  std::istringstream in(stat.substr(paren + 1));
  std::string field;
  for (int i = 3; i <= 22 && (in >> field); ++i)
    if (i == 22) {
      struct timespec now{};
      const long ticks = ::sysconf(_SC_CLK_TCK);
      if (ticks <= 0 || ::clock_gettime(CLOCK_BOOTTIME, &now) != 0) return -1;
      const double start_ms = std::stod(field) * 1e3 / double(ticks);
      return double(now.tv_sec) * 1e3 + double(now.tv_nsec) / 1e6 - start_ms;
    }
  return -1;
}

// describe_model_dir: what generation needs of an export directory before its weights: config.json's
// model and tokenizer fingerprint, the tokenizer files (read_model_dir; the weights: load_model)
LoadedModel describe_model_dir(const std::string& dir) {
  LoadedModel m;
  ModelDir d = read_model_dir(dir);
  m.config = d.cfg;
  m.vocab_json = d.vocab_json, m.merges_txt = d.merges_txt;
  m.tokenizer_fingerprint = d.tokenizer_fingerprint;
  m.fingerprint_source = "its config.json";
  m.dir = std::move(d);
  return m;
}

// median: of a non-empty list.
double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const size_t n = x.size();
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

int run(const po::variables_map& vm, TokenizerFiles& files) {
  if (vm.count("ckpt") + vm.count("model") != 1) throw UsageError("give exactly one of --ckpt FILE, --model DIR");
  if (vm.count("prompt") + vm.count("prompt-file") + vm.count("prompt-ids") > 1)
    throw UsageError("give at most one of --prompt, --prompt-file, --prompt-ids");
  GenerateOptions opts;
  opts.max_new_tokens = vm["max-new-tokens"].as<int>();
  if (opts.max_new_tokens < 0) throw UsageError("--max-new-tokens must be >= 0");
  opts.sampler.temperature = vm["temperature"].as<float>();
  opts.sampler.top_k = vm["top-k"].as<int>();
  opts.sampler.top_p = vm["top-p"].as<float>();
  opts.sampler.validate();
  opts.seed = parse_seed(vm["seed"].as<std::string>());
  const int batch = vm["batch"].as<int>();
  if (batch < 1 || batch > 4096) throw UsageError("--batch must be in [1, 4096]");  // KV cache: batch x context rows
  const bool print_ids = vm.count("print-ids") > 0;
  const std::string graph_opt = vm["cuda-graph"].as<std::string>();
  if (graph_opt != "auto" && graph_opt != "off") throw UsageError("--cuda-graph must be auto or off, got '" + graph_opt + "'");
  const bool use_graph = graph_opt == "auto";
  const bool timing = vm.count("timing") > 0;
  const int repeat = vm["repeat"].as<int>();
  if (repeat < 1 || repeat > 1000) throw UsageError("--repeat must be in [1, 1000], got " + std::to_string(repeat));
  // --repeat's figures are the warm generations' first token and decoding: with no new token there is
  // nothing to generate again or to time, so the option would be ignored
  if (repeat > 1 && opts.max_new_tokens == 0)
    throw UsageError("--repeat " + std::to_string(repeat) +
                     " needs --max-new-tokens >= 1: it times the warm generations' first token, and --max-new-tokens 0 "
                     "generates none");
  read_tokenizer_options(vm, files);
  files.cache_dir = default_token_cache_dir();  // the per-user cache directory of the trainer's default (token_cache.h)
  files.cache_dir_origin = token_cache_dir_origin("");  // no --cache-dir here: the variable that chose it
  try {
    check_cache_dir_owner(files.cache_dir, files.cache_dir_origin);
  } catch (const Error& e) {  // the tables are only a shortcut: derived, not read from another user's directory
    const std::string line = std::string("warning: ") + e.what() + "; the tokenizer's tables are derived, not cached\n";
    std::fputs(line.c_str(), stderr);
    files.cache_dir.clear();
  }
  reject_empty_values(vm, {"ckpt", "model", "prompt-file", "prompt-ids", "dump-logits"});
  check_dump_logits_target(vm);

  BackendOptions bo;
  bo.device = parse_device(vm["device"].as<std::string>());
  bo.dtype = parse_dtype(vm["dtype"].as<std::string>());
  // bo.weight_copy stays persistent (no --weight-copy here): decoding reads every weight per token, so
  // per-use copies would round the whole model again for each one.
  // The backend's set-up (cuda: the context, cuBLAS(Lt) handles and workspace) runs in a thread started
  // first, beside all that needs no backend: a checkpoint's read, config.json, the tokenizer, the prompt and
  // its checks. This thread then uses the backend: xtrain_generate binds device 0 (one process, local rank
  // 0), which is also every thread's current device by default.
  const Clock::time_point setup_start = Clock::now();
  std::future<BackendSetUp> setup = std::async(std::launch::async, [bo, setup_start] {
    BackendSetUp s;
    s.be = make_backend(bo);
    s.be->synchronize();
    s.ms = std::chrono::duration<double, std::milli>(Clock::now() - setup_start).count();
    return s;
  });
  Phases phases;
  phases.t0 = setup_start;
  LoadedModel lm;
  std::vector<int32_t> prompt;
  std::string text;
  std::optional<Tokenizer> loaded;
  try {
    // --ckpt: the whole model, read to the host; --model: config.json and the tokenizer files (the
    // weights go straight into the backend's memory below)
    lm = vm.count("ckpt") ? load_model(vm, {}, nullptr) : describe_model_dir(vm["model"].as<std::string>());
    if (vm.count("ckpt")) phases.lap("reading the model file", nullptr);
    loaded.emplace(load_tokenizer_for(files, lm));
    phases.lap("loading the tokenizer", nullptr);
    const Tokenizer& tok = *loaded;
    if (vm.count("prompt-ids")) {
      prompt = parse_token_ids(vm["prompt-ids"].as<std::string>(), "--prompt-ids", tok.vocab_size());
      text = tok.decode(prompt);
    } else {
      // none given: the empty prompt (GPT-2's unconditional start below)
      text = vm.count("prompt")        ? vm["prompt"].as<std::string>()
             : vm.count("prompt-file") ? read_file(vm["prompt-file"].as<std::string>())
                                       : std::string();
      prompt = tok.encode(text);
    }
    if (prompt.empty()) {
      if (tok.eot_id() < 0) throw UsageError("empty prompt and the tokenizer has no <|endoftext|> to start from");
      prompt.push_back(tok.eot_id());  // GPT-2's unconditional start
    }
    if (!vm.count("ignore-eos")) opts.eos_id = tok.eot_id();
    if (int(prompt.size()) > lm.config.maxT)
      throw UsageError("the prompt has " + std::to_string(prompt.size()) + " tokens; the model's context is " +
                       std::to_string(lm.config.maxT));
    if (lm.tokenizer_fingerprint != 0 && lm.tokenizer_fingerprint != tok.fingerprint())
      throw UsageError(tokenizer_mismatch(files, tok, lm));
    if (lm.config.V != tok.vocab_size())
      throw UsageError("the model's vocabulary (" + std::to_string(lm.config.V) + ") differs from the tokenizer's (" +
                       std::to_string(tok.vocab_size()) + ")");
    phases.lap("encoding the prompt", nullptr);
  } catch (...) {
    // the backend's own error first, as when it was set up before the rest (e.g. --device cuda without CUDA)
    const std::exception_ptr here = std::current_exception();
    setup.get();
    std::rethrow_exception(here);
  }
  const Tokenizer& tok = *loaded;
  BackendSetUp set_up = setup.get();
  std::unique_ptr<Backend> be = std::move(set_up.be);
  phases.lap("waiting for the backend set-up", nullptr);
  // An export goes from the file straight into the model's parameters: the model is made as soon as
  // config.json gives its shape; on the CPU backend read into them, on CUDA through pinned buffers, each
  // part copied while the next is read and converted on the device (no host copy of the weights)
  std::unique_ptr<GPT> model;
  auto params_for = [&](const GPTConfig& cfg) -> float* {
    model = std::make_unique<GPT>(cfg, *be, 0, /*with_grads=*/false);
    return model->params();
  };
  if (vm.count("model")) {
    const LoadedModel described = std::move(lm);
    lm = load_model(vm, params_for, be->kind() == Device::cpu ? nullptr : be.get());
    // what the checks above read, read again with the weights: a directory rewritten in between is refused
    if (lm.config.describe() != described.config.describe() || lm.tokenizer_fingerprint != described.tokenizer_fingerprint)
      XT_FAIL("--model " << vm["model"].as<std::string>() << ": config.json changed while it was read; read it again");
    phases.lap("reading the model file", be.get());
  }
  if (!model) {  // a checkpoint, or a backend whose memory is not the host's: copy the host parameters over
    model = std::make_unique<GPT>(lm.config, *be, 0, /*with_grads=*/false);
    XT_CHECK(lm.params.size() == model->num_params(),
             "the model has " << lm.params.size() << " parameters; its config needs " << model->num_params());
    be->copy_to_device(model->params(), lm.params.data(), lm.params.size() * sizeof(float));
    lm.params = {};
  }
  phases.lap("weights to the device", be.get());

  if (vm.count("dump-logits")) {
    Decoder dec(*model, 1);
    write_logits(vm["dump-logits"].as<std::string>(), dec.forward(prompt.data(), int(prompt.size())));
    std::fprintf(stderr, "wrote logits (%zu, %d) to %s\n", prompt.size(), lm.config.V,
                 vm["dump-logits"].as<std::string>().c_str());
    phases.lap("the prompt's forward and the file for --dump-logits (" + std::to_string(prompt.size()) + " tokens)",
               be.get());
  }
  // --timing's set-up line and its parts, then the phases so far
  auto print_phases = [&] {
    // the set-up ran in its own thread from the start, beside the phases up to the wait for it
    std::fprintf(stderr, "timing | backend set-up (%s), in a thread beside the phases up to the wait: %.3f ms\n",
                 be->name().c_str(), set_up.ms);
    for (const auto& [what, ms] : be->setup_ms()) std::fprintf(stderr, "timing |   %s: %.3f ms\n", what.c_str(), ms);
    for (const auto& [what, ms] : phases.ms) std::fprintf(stderr, "timing | %s: %.3f ms\n", what.c_str(), ms);
  };
  if (opts.max_new_tokens == 0) {  // no token: no decoder, no decoding and no first-token lines
    if (timing) print_phases();
    return 0;
  }

  Decoder dec(*model, batch, use_graph);
  phases.lap("decoder allocation and weight preparation", be.get());
  Utf8Stream stream;
  const bool stream_text = !print_ids && batch == 1;
  if (stream_text) std::cout << text << std::flush;
  std::vector<int32_t> seq = prompt;  // what the streamed token follows
  double first_token_ms = -1;  // since the process started, at the first token's arrival on the host
  auto on_token = [&](int, int32_t id) {
    if (first_token_ms < 0) first_token_ms = ms_since_process_start();
    if (!stream_text) return;
    std::cout << stream.push(continuation_text(tok, seq, {id})) << std::flush;
    seq.push_back(id);
  };
  GenerateStats st;
  const std::vector<std::vector<int32_t>> prompts(batch, prompt);
  const auto out = generate(dec, prompts, opts, on_token, &st);
  phases.add("prompt to first token (" + std::to_string(st.prompt_tokens) + " tokens x " + std::to_string(batch) + ")",
             st.prefill_s);
  if (dec.graph_recordings() > 0) phases.add("recording the decoding graphs", dec.graph_record_seconds());
  // "recording included" only where a graph was recorded: on the CPU, or with --cuda-graph off, there is none;
  // no line where no one-token step ran (one new token, or eos first: all sampled from the prompt's logits)
  if (st.decode_tokens > 0)
    phases.add("first decoding call (" + std::to_string(st.first_call_steps) + " one-token step" +
                   (st.first_call_steps == 1 ? "" : "s") + (dec.graph_recordings() > 0 ? ", recording included)" : ")"),
               st.first_step_s);
  // the warm generations: the same prompt again on the same decoder (weights prepared, graph recorded)
  std::vector<double> warm_first_token_s;
  double warm_decode_s = 0.0;
  long long warm_decode_tokens = 0;
  for (int r = 2; r <= repeat; ++r) {
    GenerateStats rs;
    if (generate(dec, prompts, opts, nullptr, &rs) != out)
      XT_FAIL("--repeat: generation " << r << " gave other tokens than generation 1 (same prompt, seed and model)");
    warm_first_token_s.push_back(rs.prefill_s);
    warm_decode_s += rs.decode_s, warm_decode_tokens += rs.decode_tokens;
  }
  if (stream_text) std::cout << stream.flush() << "\n";
  for (int b = 0; b < batch && !stream_text; ++b) {
    if (print_ids) {
      for (size_t i = 0; i < out[b].size(); ++i) std::cout << (i ? " " : "") << out[b][i];
      std::cout << "\n";
    } else {
      std::cout << "--- sequence " << b << "\n" << text << continuation_text(tok, prompt, out[b]) << "\n";
    }
  }
  flush_stdout();  // a lost text is exit 1 with one line, before the summary lines
  if (st.context_crops > 0)
    std::fprintf(stderr, "%d tokens past the model's context of %d: each sampled from the last %d tokens\n",
                 st.context_crops, lm.config.maxT, lm.config.maxT);
  const double prompt_tps = st.prefill_s > 0 ? double(st.prompt_tokens) * batch / st.prefill_s : 0.0;
  // the generation speed is that of the one-token steps: with none (every token from the prompt's logits) there
  // is no speed to give, and the line says where the tokens came from
  char gen_speed[64] = " from the prompt's logits, no one-token step";
  if (st.decode_tokens > 0)
    std::snprintf(gen_speed, sizeof gen_speed, " at %.1f tok/s", st.decode_s > 0 ? st.decode_tokens / st.decode_s : 0.0);
  std::fprintf(stderr, "prompt: %d token%s x %d at %.1f tok/s; generation: %d token%s%s (%s, %s%s)\n",
               st.prompt_tokens, st.prompt_tokens == 1 ? "" : "s", batch, prompt_tps, st.new_tokens,
               st.new_tokens == 1 ? "" : "s", gen_speed, be->device_name().c_str(), to_string(be->dtype()),
               dec.graph_recorded() ? ", one-token steps as a CUDA graph" : "");
  if (timing) {
    print_phases();
    // a graph recorded after the first call (the one-token step after the greedy runs) is set-up, not decoding
    const double steady_s = st.decode_s - st.first_step_s - st.late_record_s;
    const int steady_tokens = st.decode_tokens - st.first_step_tokens;
    if (steady_tokens > 0)  // the one-token steps after the first: none with two new tokens or fewer
      std::fprintf(stderr, "timing | steady decoding: %d tokens in %.3f ms, %.1f tok/s\n", steady_tokens, steady_s * 1e3,
                   steady_s > 0 ? steady_tokens / steady_s : 0.0);
    if (first_token_ms >= 0) std::fprintf(stderr, "timing | process start to first token: %.3f ms\n", first_token_ms);
  }
  if (repeat > 1) {
    char warm_speed[96] = "";  // none where no one-token step ran
    if (warm_decode_tokens > 0)
      std::snprintf(warm_speed, sizeof warm_speed, "; steady decoding: %lld tokens at %.1f tok/s", warm_decode_tokens,
                    warm_decode_s > 0 ? warm_decode_tokens / warm_decode_s : 0.0);
    std::fprintf(stderr,
                 "repeat | %d generations, the same tokens each time; warm prompt to first token: median %.3f ms over "
                 "generations 2..%d%s\n",
                 repeat, median(warm_first_token_s) * 1e3, repeat, warm_speed);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_cli("xtrain_generate", [&] {
    TokenizerFiles files;
    const CliArgs args = parse_cli({"xtrain_generate", kUsage, make_options(files), {}, {}}, argc, argv);
    if (args.help || args.version) {
      std::cout << (args.help ? args.help_text : args.version_text);
      return kExitOk;
    }
    return run(args.vm, files);
  });
}
