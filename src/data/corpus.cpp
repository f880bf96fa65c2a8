// The training corpus: --data files, their shared tokenizing and the joined stream (see
// src/data/corpus.h).
#include <xtrain/data/corpus.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <utility>

#include "comm/agree.h"
#include <xtrain/core/error.h>
#include "core/digest.h"
#include "core/io.h"
#include <xtrain/core/log.h>
#include "data/jsonl.h"
#include "data/token_cache.h"

namespace xtrain {

namespace fs = std::filesystem;

namespace {

// check_data_file: path is a regular file (after symlinks) that this process may read; opt names the option.
void check_data_file(const std::string& path, const std::string& opt) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st))
    XT_FAIL(opt << ": cannot read " << path << ": " << (ec ? ec.message() : std::string("No such file or directory")));
  if (!fs::is_regular_file(st))
    XT_FAIL(opt << " " << path << ": cannot read: not a regular file (a directory, FIFO or device)");
  if (::access(path.c_str(), R_OK) != 0) XT_FAIL(opt << ": cannot read " << path << ": " << std::strerror(errno));
  if (starts_with_token_cache_magic(path))
    throw UsageError(opt + " " + path + ": a token cache (it starts with the cache's magic), not a text");
}

bool is_shard_name(const std::string& name) {
  return !name.empty() && name[0] != '.' && name.find(".tokcache") == std::string::npos;
}

}  // namespace

std::vector<std::string> data_spec_entries(const std::string& spec, const std::string& opt) {
  std::vector<std::string> entries;
  size_t at = 0;
  for (;;) {
    const size_t comma = spec.find(',', at);
    const std::string path = spec.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (path.empty()) throw UsageError(opt + " \"" + spec + "\": an empty path in the list");
    entries.push_back(path);
    if (comma == std::string::npos) return entries;
    at = comma + 1;
  }
}

std::vector<std::string> list_data_files(const std::string& spec, const std::string& opt) {
  std::vector<std::string> files;
  for (const std::string& path : data_spec_entries(spec, opt)) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      std::vector<std::string> names;
      for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec))
        if (is_shard_name(it->path().filename().string())) names.push_back(it->path().filename().string());
      if (ec) XT_FAIL(opt << " " << path << ": cannot read the directory: " << ec.message());
      if (names.empty()) XT_FAIL(opt << " " << path << ": no data files in the directory");
      std::sort(names.begin(), names.end());
      for (const std::string& n : names) files.push_back((fs::path(path) / n).string());
    } else {
      if (is_token_cache_name(path))
        throw UsageError(opt + " " + path + ": a token cache, not a text (give the text it was made from)");
      files.push_back(path);
    }
  }
  for (const std::string& f : files) check_data_file(f, opt);
  check_distinct_files(files, opt);
  return files;
}

void check_distinct_files(const std::vector<std::string>& files, const std::string& opt) {
  std::map<std::pair<dev_t, ino_t>, std::string> seen;  // a file listed twice would be trained on twice
  for (const std::string& f : files) {
    struct stat st{};
    if (::stat(f.c_str(), &st) != 0) XT_FAIL(opt << ": cannot read " << f << ": " << std::strerror(errno));
    const auto [it, fresh] = seen.emplace(std::make_pair(st.st_dev, st.st_ino), f);
    if (!fresh)
      throw UsageError(opt + " lists one file twice: " + it->second + " and " + f +
                       (it->second == f ? "" : " (the same file)"));
  }
}

TokenStream join_files(const std::vector<TokenStream>& files, int eot_id, const std::vector<bool>& token_file) {
  // one shared one-id vector serves every separator
  auto eot = std::make_shared<const std::vector<int32_t>>(1, eot_id);
  const auto flagged = [&](size_t i) { return i < token_file.size() && token_file[i]; };
  TokenStream joined;
  for (size_t i = 0; i < files.size(); ++i) {
    if (i > 0 && eot_id >= 0 && !flagged(i - 1) && !flagged(i)) joined.append(TokenView{eot->data(), 1, 4}, eot);
    joined.append(files[i]);
  }
  return joined;
}

TokenStream load_corpus(HostCollectives& group, int local_rank, int local_size, const std::vector<std::string>& files,
                        std::shared_ptr<const Tokenizer> tok, const CorpusOptions& opt) {
  const int rank = group.rank();
  const std::string log_prefix = rank_prefix(rank, group.host());
  if (files.size() > 1 && !opt.tokens_cache.empty())
    throw UsageError("--tokens-cache names the cache of one file; with " + std::to_string(files.size()) +
                     " " + opt.option + " files each cache is <file>.tokcache");
  // Without a separator the last token of one file would be followed by the first of the next as if
  // one text went on: refused rather than joined silently (join_files).
  if (files.size() > 1 && tok->eot_id() < 0)
    throw UsageError(opt.option + " names " + std::to_string(files.size()) +
                     " files, but the tokenizer has no <|endoftext|> token to separate them; join them into one file "
                     "or use a tokenizer with <|endoftext|>");
  // every rank detects every file's format (a few bytes each); a refused .bin ends every rank
  std::vector<DataFormat> formats(files.size(), DataFormat::text);
  agree(group, [&] {
    for (size_t i = 0; i < files.size(); ++i) formats[i] = detect_data_format(files[i], opt.format);
  });
  using Loaded = std::map<size_t, TokenStream>;
  struct Result {
    Loaded streams;
    double tokenized = 0;  // files this rank tokenized
    std::vector<double> keys;  // with a cache_dir: each owned text's xxh3_64 as two 32-bit halves, 0 elsewhere
  };
  const bool keyed = !opt.cache_dir.empty() && opt.tokens_cache.empty();
  // Texts and JSON lines have token caches, each made by its recipe (token_cache.h); token files are
  // mapped as they are.
  const auto cached = [](DataFormat f) { return f == DataFormat::text || f == DataFormat::jsonl; };
  const auto recipe_of = [tok, formats, field = opt.jsonl_field, rank](size_t i, const std::string& path) {
    return formats[i] == DataFormat::jsonl ? jsonl_recipe(*tok, field, path, rank) : text_recipe(*tok, path, rank);
  };
  const auto key_of = [](const std::vector<double>& keys, size_t i) {
    return (static_cast<uint64_t>(keys[2 * i]) << 32) | static_cast<uint64_t>(keys[2 * i + 1]);
  };
  Result mine;
  mine.keys.assign(2 * files.size(), 0.0);
  // Phase 1 (not with --no-cache, where every rank tokenizes every file in phase 2).
  if (!opt.no_cache) {
    mine = agree_while_working(group, [=] {
      Result r;
      r.keys.assign(2 * files.size(), 0.0);
      bool can_write = true;
      if (keyed && local_rank < static_cast<int>(files.size())) {
        try {
          open_output_directory(opt.cache_dir, "--cache-dir", true);  // symlinks as for every output (io.h)
        } catch (const Error& e) {  // training goes on, tokenizing in memory
          std::cerr << log_prefix << "warning: " << e.what() << "; tokenizing in memory\n";
          can_write = false;
        }
      }
      for (size_t i = static_cast<size_t>(local_rank); i < files.size(); i += static_cast<size_t>(local_size)) {
        if (!cached(formats[i])) continue;  // phase 2, on every rank
        const IdsRecipe recipe = recipe_of(i, files[i]);
        bool tokenized = false;
        std::string cache = opt.tokens_cache;
        if (keyed) {  // the file's bytes as stored (a .jsonl.zst compressed), as the cache header's hash
          const std::string text = read_file(files[i]);
          const uint64_t h = xxh3_64(text.data(), text.size());
          r.keys[2 * i] = static_cast<double>(h >> 32), r.keys[2 * i + 1] = static_cast<double>(h & 0xffffffffu);
          cache = keyed_cache_path(opt.cache_dir, h, recipe.fingerprint);
        }
        r.streams[i] = load_cached_ids(files[i], recipe, tok->vocab_size(), cache, can_write, log_prefix, &tokenized, !keyed, keyed);
        r.tokenized += tokenized;
      }
      return r;
    }, OnStopSignal::end_job);
  }
  // every rank learns every text's hash from the rank that owns it on its node (the same on each node)
  if (keyed) group.all_reduce_max_host(mine.keys.data(), static_cast<int>(mine.keys.size()));
  const std::vector<double> keys = mine.keys;
  std::vector<bool> done(files.size(), false);
  for (const auto& kv : mine.streams) done[kv.first] = true;
  Loaded rest = agree_while_working(group, [=] {
    Loaded r;
    for (size_t i = 0; i < files.size(); ++i) {
      if (done[i]) continue;
      if (!cached(formats[i]) || (opt.no_cache && formats[i] == DataFormat::jsonl)) {
        r[i] = load_pretokenized_or_jsonl(files[i], formats[i], *tok, opt.jsonl_field, rank);  // streamed
      } else if (opt.no_cache) {
        r[i] = TokenStream(encode_with_progress(*tok, read_file(files[i]), files[i], rank));
      } else {  // a peer of this node made the cache: map it (tokenize in memory when it could not)
        const IdsRecipe recipe = recipe_of(i, files[i]);
        const std::string cache = keyed ? keyed_cache_path(opt.cache_dir, key_of(keys, i), recipe.fingerprint) : opt.tokens_cache;
        r[i] = load_cached_ids(files[i], recipe, tok->vocab_size(), cache, false, log_prefix, nullptr, !keyed, keyed);
      }
    }
    return r;
  }, OnStopSignal::end_job);
  std::vector<TokenStream> parts(files.size());
  for (auto& [i, s] : mine.streams) parts[i] = std::move(s);
  for (auto& [i, s] : rest) parts[i] = std::move(s);
  std::vector<bool> token_file(files.size());
  for (size_t i = 0; i < files.size(); ++i) token_file[i] = is_token_file(formats[i]);
  TokenStream joined = join_files(parts, tok->eot_id(), token_file);
  // files tokenized per rank (one slot each), and the node count (the ranks of local rank 0)
  std::vector<double> counts(static_cast<size_t>(group.world_size()) + 1, 0.0);
  counts[static_cast<size_t>(rank)] = mine.tokenized;
  counts.back() = local_rank == 0 ? 1 : 0;
  group.all_reduce_sum_host(counts.data(), static_cast<int>(counts.size()));
  double tokenized = 0, ranks = 0;
  for (size_t r = 0; r + 1 < counts.size(); ++r) tokenized += counts[r], ranks += counts[r] > 0;
  const double nodes = counts.back();
  // texts and JSON lines have token caches; token files are read as they are, every start
  size_t texts = 0, jsonls = 0;
  for (DataFormat f : formats) texts += f == DataFormat::text, jsonls += f == DataFormat::jsonl;
  if (!opt.no_cache && texts + jsonls > 0) {
    char now[64] = "none", kinds[96] = "";
    if (tokenized > 0) std::snprintf(now, sizeof now, "%.0f on %.0f rank%s", tokenized, ranks, ranks == 1 ? "" : "s");
    if (texts > 0) std::snprintf(kinds, sizeof kinds, "%zu text file%s", texts, texts == 1 ? "" : "s");
    if (jsonls > 0)
      std::snprintf(kinds + std::strlen(kinds), sizeof kinds - std::strlen(kinds), "%s%zu JSON lines file%s",
                    texts > 0 ? ", " : "", jsonls, jsonls == 1 ? "" : "s");
    print0(rank, "cache  | %s, %zu tokens in all | tokenized now: %s | caches reused: %.0f (%.0f node%s)\n", kinds,
           joined.size(), now, static_cast<double>(texts + jsonls) * nodes - tokenized, nodes, nodes == 1 ? "" : "s");
  }
  return joined;
}

}  // namespace xtrain
