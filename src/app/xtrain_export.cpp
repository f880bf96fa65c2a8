// xtrain_export: checkpoint -> model directory (model.safetensors, config.json, generation_config.json
// and the model's tokenizer as tokenizer.json and its configuration, export.h) in the Hugging Face layout of the model's family (GPT2LMHeadModel, LlamaForCausalLM) or
// xtrain's own (docs/serving.md); prints md5 and
// sha256 of model.safetensors, records them in a JSON registry, and verifies a checkpoint or an
// export against the registry. Exit codes (core/cli.h): 0 success, 1 error or digest mismatch, 2 usage
// error.
#include <boost/program_options.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/cli.h"
#include "core/digest.h"
#include "core/echo.h"
#include <xtrain/core/error.h>
#include "core/io.h"
#include "core/json.h"
#include "core/lock.h"
#include "data/token_cache.h"
#include "data/tokenizer_options.h"
#include <xtrain/serve/export.h>
#include "serve/export_commit.h"
#include <xtrain/checkpoint/checkpoint.h>

namespace po = boost::program_options;
namespace fs = std::filesystem;
using nlohmann::json;
using namespace xtrain;

namespace {

struct Options {
  std::string input, out, format = "auto", registry, name, verify;
  TokenizerFiles tokenizer;  // the run's tokenizer options: the tokenizer the export writes
  bool replace = false;
  std::string exit_text;  // --help or --version: print this and exit 0, nothing else checked
};

Options parse(int argc, char** argv) {
  Options o;
  CliSpec spec{"xtrain_export",
               "Usage: xtrain_export CKPT --out DIR [options]\n"
               "       xtrain_export --verify NAME --registry FILE (CKPT | DIR)\n"
               "Writes DIR/model.safetensors, config.json, generation_config.json and the model's tokenizer as\n"
               "tokenizer.json, tokenizer_config.json and special_tokens_map.json (with vocab.json + merges.txt for\n"
               "GPT-2's files, tokenizer.model for a SentencePiece model), all or nothing, and prints the md5 and\n"
               "sha256 of model.safetensors; the same checkpoint always gives the same bytes. Give the training\n"
               "run's tokenizer options (default: GPT-2's files); another tokenizer than the checkpoint's is refused",
               cli_group("Options"), {}, {}};
  po::options_description& opts = spec.options;
  opts.add_options()
    ("out", po::value(&o.out), "output directory (created if absent; neither the token cache directory nor inside it; default: none)")
    ("format", po::value(&o.format)->default_value("auto"), "hf | xtrain | auto: hf = Hugging Face layout of the model's family (GPT2LMHeadModel, LlamaForCausalLM); xtrain = xtrain's own names (any shape, e.g. GPT-2 with --kv-heads < --heads); auto = hf when it can express the model, else xtrain");
  add_tokenizer_options(opts, o.tokenizer, {"the one the model was trained with, written as vocab.json",
                                            "the one the model was trained with, written as merges.txt"});
  opts.add_options()
    ("registry", po::value(&o.registry), "JSON registry file (it and its directory created if absent): an export records NAME -> md5, sha256, layout, model config, step, data hash (default: none)")
    ("name", po::value(&o.name), "registry name of this export (default: the --out directory's name)")
    ("replace", po::bool_switch(&o.replace), "let --registry's entry NAME be replaced when it exists (without: refused before anything is written)")
    ("verify", po::value(&o.verify), "check the input against registry entry NAME: a checkpoint is re-exported in memory, an export directory's model.safetensors is hashed; exit 1 naming expected and found digests (default: none)");
  spec.hidden.add_options()("input", po::value(&o.input));
  spec.positional.add("input", 1);
  const CliArgs args = parse_cli(spec, argc, argv);
  const po::variables_map& vm = args.vm;
  if (args.help || args.version) {
    o.exit_text = args.help ? args.help_text : args.version_text;
    return o;
  }
  reject_empty_values(vm, {"out", "registry", "name", "verify"});
  read_tokenizer_options(vm, o.tokenizer);
  if (o.input.empty()) throw UsageError("give a checkpoint (or, with --verify, an export directory)");
  if (o.verify.empty() && fs::is_directory(o.input)) throw UsageError(o.input + " is a directory: export takes a checkpoint file");
  if (o.format != "auto" && o.format != "hf" && o.format != "xtrain") throw UsageError("--format must be hf, xtrain or auto");
  if (!o.verify.empty()) {
    if (o.registry.empty()) throw UsageError("--verify needs --registry");
    if (!o.out.empty() || !o.name.empty() || o.replace) throw UsageError("--verify writes nothing: drop --out, --name and --replace");
  } else {
    if (o.out.empty()) throw UsageError("--out DIR is required");
    if (!o.name.empty() && o.registry.empty()) throw UsageError("--name needs --registry");
    if (o.replace && o.registry.empty()) throw UsageError("--replace needs --registry");
    if (o.name.empty()) {  // the directory's name: "d/", "d/." and "./d" all give "d"
      fs::path p = fs::absolute(o.out).lexically_normal();
      if (!p.has_filename()) p = p.parent_path();
      o.name = p.filename().string();
      if (!o.registry.empty() && o.name.empty()) throw UsageError("--out " + o.out + " has no name to record: give --name");
    }
    for (unsigned char ch : o.name)
      if (ch < 0x20 || ch == 0x7f) throw UsageError("--name must not contain control characters");
    // The registry is JSON (UTF-8): a name it cannot hold is refused now, before the model is written
    // (an --out directory's name included), never after the export as an unrecorded model.
    try {
      (void)json(o.name).dump();
    } catch (const json::exception&) {
      throw UsageError("--name must be valid UTF-8 (the registry is JSON)");
    }
  }
  return o;
}

json read_registry(const std::string& path, bool must_exist) {
  std::error_code ec;
  if (!must_exist && !fs::exists(path, ec)) return json{{"models", json::object()}};
  json r;
  try {
    r = read_json_file(path);  // bounded in size and depth (core/json.h): a deep entry is refused, not rewritten
  } catch (const Error& e) {
    XT_FAIL("--registry: " << e.what());
  }
  if (!r.is_object() || !r.contains("models") || !r["models"].is_object())
    XT_FAIL("registry " << path << ": expected {\"models\": {NAME: entry, ...}}");
  return r;
}

// RegistryLock: an exclusive flock on "<registry>.lock" (created next to the registry, never through a
// symlink), held for a whole export so that concurrent exports to one registry each record their entry.
// The lock sits next to the file the registry resolves to (locate_output: symlinks only of this user
// or root), so every spelling of it (a symlink included) takes the same lock. Waited for with a line
// saying so, at most 600 s (DirLock); Error naming the lock file when it cannot be created.
class RegistryLock {
 public:
  explicit RegistryLock(const std::string& registry)
      : loc_(locate_output(registry, "--registry")),
        lock_(loc_.dir_fd, loc_.name + ".lock", loc_.path() + ".lock", "registry lock", "xtrain_export",
              "another export of this registry") {}

 private:
  OutputLocation loc_;
  DirLock lock_;
};

ExportFiles export_checkpoint(const std::string& ckpt, ModelLayout layout, const Options& o, CheckpointMeta* meta) {
  const CheckpointState st = load_checkpoint(ckpt);
  *meta = st.meta;
  return make_export(st.meta.model, st.params, layout, load_tokenizer(o.tokenizer), st.meta.tokenizer_fingerprint);
}

ModelLayout pick_layout(const std::string& format, const GPTConfig& cfg) {
  if (format == "xtrain") return ModelLayout::Xtrain;
  const std::string why = hf_unsupported(cfg);
  if (format == "hf" && !why.empty())
    throw UsageError(std::string("--format hf: the Hugging Face ") + hf_architecture(cfg) + " layout cannot express this model: " + why +
                     " (use --format xtrain)");
  return why.empty() ? ModelLayout::Hf : ModelLayout::Xtrain;
}

int verify(const Options& o) {
  const json reg = read_registry(o.registry, true);
  if (!reg["models"].contains(o.verify)) XT_FAIL("registry " << o.registry << " has no entry " << echo_value(o.verify));
  const json& e = reg["models"][o.verify];
  std::string want_md5, want_sha, want_layout;
  try {  // a field of the wrong type ("md5": 5) is one line naming the file and the entry
    want_md5 = e.value("md5", ""), want_sha = e.value("sha256", ""), want_layout = e.value("layout", "hf");
  } catch (const json::exception& ex) {
    XT_FAIL("registry " << o.registry << ": entry " << o.verify << ": " << ex.what());
  }
  // the layouts an export records (layout_name); another value is a damaged or foreign entry, and
  // re-exporting in a guessed layout would report digests of a file the entry never described
  if (want_layout != layout_name(ModelLayout::Hf) && want_layout != layout_name(ModelLayout::Xtrain))
    XT_FAIL("registry " << o.registry << ": entry " << o.verify << ": unknown layout '" << echo_value(want_layout) << "' (known: "
                        << layout_name(ModelLayout::Hf) << ", " << layout_name(ModelLayout::Xtrain) << ")");
  std::string bytes;
  if (fs::is_directory(o.input)) {
    bytes = read_file((fs::path(o.input) / kModelFile).string());
  } else {
    const ModelLayout layout = want_layout == layout_name(ModelLayout::Xtrain) ? ModelLayout::Xtrain : ModelLayout::Hf;
    CheckpointMeta meta;
    bytes = export_checkpoint(o.input, layout, o, &meta).at(kModelFile);
  }
  const std::string md5 = md5_hex(bytes), sha = sha256_hex(bytes);
  if (md5 != want_md5 || sha != want_sha) {
    std::fprintf(stderr, "verify %s: FAILED: %s gives md5 %s sha256 %s, registry %s expects md5 %s sha256 %s\n", o.verify.c_str(),
                 o.input.c_str(), md5.c_str(), sha.c_str(), o.registry.c_str(), want_md5.c_str(), want_sha.c_str());
    return 1;
  }
  std::printf("verify %s: OK: md5 %s sha256 %s\n", o.verify.c_str(), md5.c_str(), sha.c_str());
  return 0;
}

// check_outputs_apart: no file this export writes (DIR's four files, the registry) is one it reads
// (the checkpoint, the tokenizer files) or another of its outputs, nor is the registry's lock file an
// input, nor is DIR the per-user cache directory or inside it (check_directory_outside_cache_dirs); UsageError naming
// both otherwise.
// Checked before anything is read or written.
void check_outputs_apart(const Options& o) {
  std::vector<std::string> inputs = {o.input};
  for (const auto& [option, path] : tokenizer_inputs(o.tokenizer)) inputs.push_back(path);
  std::vector<std::string> outputs;
  for (const char* f : kExportFileNames) outputs.push_back((fs::path(o.out) / f).string());
  // DIR is neither the per-user cache directory, whose tokenizer tables are named by content (token_cache.h),
  // nor inside it; nor is a file of it a link into it
  check_directory_outside_cache_dirs(o.out, "--out", "");
  check_output_outside_cache_dirs(outputs.front(), "--out", "");
  if (!o.registry.empty()) {
    for (const std::string& out : outputs)
      if (same_file(o.registry, out)) throw UsageError("--registry " + o.registry + " is also the export's " + out);
    if (same_file(o.registry, o.out)) throw UsageError("--registry " + o.registry + " is also the export's --out directory");
    outputs.push_back(o.registry);
    // the registry's lock (RegistryLock, removed at the end): never an input
    for (const std::string& in : inputs)
      if (same_file(o.registry + ".lock", in))
        throw UsageError("input " + in + " is also the --registry lock file (" + o.registry + ".lock); not overwriting it");
  }
  for (const std::string& out : outputs)
    for (const std::string& in : inputs)
      if (same_file(out, in)) throw UsageError("input " + in + " is also an output (" + out + "); not overwriting it");
}

int run(const Options& o) {
  if (!o.verify.empty()) return verify(o);
  check_outputs_apart(o);
  // The registry is locked, read and checked before the model is written: a bad registry or a taken
  // name leaves no exported-but-unrecorded model.
  std::unique_ptr<RegistryLock> lock;
  json reg;
  if (!o.registry.empty()) {
    const std::string dir = fs::path(o.registry).parent_path().string();  // created if absent, as --out is
    if (!dir.empty()) open_output_directory(dir, "--registry", /*create=*/true);
    check_writable(o.registry, "--registry");  // before the model is written: no unrecorded export
    lock = std::make_unique<RegistryLock>(o.registry);
    reg = read_registry(o.registry, false);
    if (reg["models"].contains(o.name) && !o.replace)
      throw UsageError("registry " + o.registry + " already has an entry " + o.name + " (give --replace to replace it)");
  }
  const CheckpointState st = load_checkpoint(o.input);
  const ModelLayout layout = pick_layout(o.format, st.meta.model);
  const Tokenizer tok = load_tokenizer(o.tokenizer);
  const ExportFiles files = make_export(st.meta.model, st.params, layout, tok, st.meta.tokenizer_fingerprint);
  // All or nothing: the files replace the previous export together, and are undone (the previous
  // files come back) when the registry cannot record them.
  ExportCommit commit(o.out, files);
  const std::string& model = files.at(kModelFile);
  const std::string md5 = md5_hex(model), sha = sha256_hex(model), path = (fs::path(o.out) / kModelFile).string();
  bool replaced = false;
  if (!o.registry.empty()) {
    replaced = reg["models"].contains(o.name);
    const GPTConfig& c = st.meta.model;
    reg["models"][o.name] = {
        {"md5", md5}, {"sha256", sha}, {"layout", layout_name(layout)}, {"step", st.meta.step},
        {"data_hash", hex64(st.meta.data_hash)}, {"tokenizer_fingerprint", hex64(st.meta.tokenizer_fingerprint)},
        {"config", {{"vocab_size", c.V}, {"n_positions", c.maxT}, {"n_embd", c.C}, {"n_layer", c.L}, {"n_head", c.NH},
                    {"n_kv_head", c.KVH}, {"head_dim", c.HS}, {"n_inner", c.F}}}};
    try {
      write_file_atomic(o.registry, reg.dump(2) + "\n");
    } catch (const Error& e) {
      XT_FAIL(e.what() << "; the export into " << o.out << " was undone (its previous files are kept)");
    }
  }
  commit.keep();
  std::printf("export | %s (step %d, %s) -> %s, layout %s\n", o.input.c_str(), st.meta.step, st.meta.model.describe().c_str(),
              o.out.c_str(), layout_name(layout));
  std::printf("md5    %s  %s\nsha256 %s  %s\n", md5.c_str(), path.c_str(), sha.c_str(), path.c_str());
  if (!o.registry.empty())
    std::printf("registry | %s: %s %s\n", o.registry.c_str(), o.name.c_str(), replaced ? "replaced" : "recorded");
  std::printf("tokenizer | %s (fingerprint %s): %s", tok.describe().c_str(), hex64(tok.fingerprint()).c_str(), kTokenizerJsonFile);
  for (const char* f : {kTokenizerConfigFile, kSpecialTokensMapFile, kVocabFile, kMergesFile, kSentencePieceFile})
    if (files.count(f)) std::printf(", %s", f);
  std::printf("\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_cli("xtrain_export", [&] {
    const Options o = parse(argc, argv);
    if (!o.exit_text.empty()) {
      std::cout << o.exit_text;
      return kExitOk;
    }
    return run(o);
  });
}
