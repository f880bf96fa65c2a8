// Tokenizer table cache (data/tokenizer_cache.h): the payload's writer and bounds-checked reader, and
// the entry's lookup, check and atomic write.
#include "data/tokenizer_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <unordered_map>
#include <unordered_set>

#include <xtrain/core/error.h>
#include "core/digest.h"
#include "core/io.h"
#include "core/json.h"
#include "data/hf_pipeline.h"
#include "data/tiktoken.h"
#include "data/token_cache.h"
#include "tokenizer_impl.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tokenizer cache entries are little-endian; this code copies host integers"
#endif

namespace xtrain {

namespace {
constexpr char kMagic[8] = {'X', 'T', 'T', 'O', 'K', 'T', 'A', 'B'};
constexpr size_t kHeaderBytes = 40;
constexpr uint64_t kMaxEntryBytes = uint64_t{1} << 30;  // Llama 3's 128k ranks take ~10 MB

struct Out {
  std::string b;
  template <class T>
  void put(T v) {
    b.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void str(std::string_view s) {
    put(uint64_t(s.size()));
    b.append(s.data(), s.size());
  }
};

// In: reads the payload front to back; every read is bounded by what is left (Error otherwise).
struct In {
  std::string_view b;
  size_t pos = 0;
  template <class T>
  T get() {
    if (b.size() - pos < sizeof(T)) XT_FAIL("truncated at byte " << pos);
    T v;
    std::memcpy(&v, b.data() + pos, sizeof v);
    pos += sizeof v;
    return v;
  }
  // count: a length whose items take at least min_bytes each, so it cannot run past the end
  size_t count(size_t min_bytes) {
    const uint64_t n = get<uint64_t>();
    if (n > (b.size() - pos) / min_bytes) XT_FAIL("a count of " << n << " at byte " << pos - 8 << " runs past the end");
    return size_t(n);
  }
  std::string str() {
    const size_t n = count(1);
    std::string s(b.substr(pos, n));
    pos += n;
    return s;
  }
  int32_t id(int32_t lo, int32_t V, const char* what) {  // an id in [lo, V)
    const int32_t v = get<int32_t>();
    if (v < lo || v >= V) XT_FAIL(what << " " << v << " at byte " << pos - 4 << " outside [" << lo << ", " << V << ")");
    return v;
  }
};

uint32_t kind_code(Tokenizer::Kind k) {
  switch (k) {
    case Tokenizer::Kind::Gpt2Files: return 1;
    case Tokenizer::Kind::Tiktoken: return 2;
    case Tokenizer::Kind::HfJson: return 3;
    case Tokenizer::Kind::SentencePiece: break;
  }
  return 0;
}
constexpr Tokenizer::Kind kKinds[] = {Tokenizer::Kind::Gpt2Files, Tokenizer::Kind::Tiktoken, Tokenizer::Kind::HfJson};

// restore_pipeline: a tokenizer.json's pipeline read again from its stored source (hf_pipeline.h)
// with the file's own reader, so an entry passes only what the file would. *specials: its added tokens
// as the tables' specials. Error "<why>" for a source that is not such JSON.
std::unique_ptr<bpe::HfPipeline> restore_pipeline(std::string source, std::vector<int32_t> added_ids, const std::string& f,
                                                  std::vector<std::pair<std::string, int32_t>>* specials) {
  try {
    const nlohmann::json root = parse_json(source, "its pipeline source");
    if (!root.is_object() || !root.contains("model") || !root["model"].is_object()) XT_FAIL("its pipeline source has no model object");
    if (root.contains("added_tokens"))
      for (const auto& t : root["added_tokens"])  // what added_token_ids checks of the whole file
        if (!t.is_object() || !t.contains("content") || !t["content"].is_string()) XT_FAIL("an added token without content");
    auto p = std::make_unique<bpe::HfPipeline>(bpe::read_hf_pipeline(root, f, added_ids));
    *specials = bpe::hf_added_specials(root, added_ids);
    p->source = std::move(source), p->added_ids = std::move(added_ids);
    return p;
  } catch (const nlohmann::json::exception& e) {
    XT_FAIL("its pipeline source: " << e.what());
  }
}

// check_merger_tables: the Merger's stored tables are what its constructor derives from the merges and
// the token bytes (bpe.h), which the fingerprint covers: a forged pair, byte id or whole-piece row would
// otherwise change ids behind a valid fingerprint. Linear in the tables: each byte id's token is that
// byte; each whole piece is its id's bytes; kListed (a tokenizer.json): the pair table rebuilt from the
// merges (the last index of a pair listed twice) and compared; kAnySplit (GPT-2's files, tiktoken): each
// pair's bytes concatenate to its result's, both sides mergeable, its rank the result's first merge
// (which pairs exist is the constructor's quadratic search, not repeated). Error "<why>" otherwise.
// TokenizerTables' view of Tokenizer::Impl (private): what check_merger_tables reads
struct MergerSources {
  Tokenizer::Kind kind;
  const std::vector<std::string>& token_bytes;
  const std::vector<std::array<int32_t, 3>>& merges;
  const std::vector<std::pair<std::string, int32_t>>& specials;
};
void check_merger_tables(const bpe::Merger::Tables& mt, const MergerSources& m, bpe::PairRule rule) {
  const std::vector<std::string>& tb = m.token_bytes;
  for (size_t rank = 0; rank < m.merges.size(); ++rank)
    if (m.merges[rank][2] < 0) XT_FAIL("merge " << rank << " has no result");
  std::vector<bool> special(tb.size(), false);
  for (const auto& [s, id] : m.specials) special[size_t(id)] = true;
  if (m.kind == Tokenizer::Kind::Tiktoken) {  // its merges (not in its fingerprint): every multi-byte rank in order
    size_t rank = 0;
    for (size_t id = 0; id < tb.size(); ++id)
      if (tb[id].size() > 1 && !special[id]) {
        if (rank >= m.merges.size() || m.merges[rank] != std::array<int32_t, 3>{-1, -1, int32_t(id)})
          XT_FAIL("merge " << rank << " is not rank " << id << "'s");
        ++rank;
      }
    if (rank != m.merges.size()) XT_FAIL(m.merges.size() << " merges, its ranks give " << rank);
  }
  for (int b = 0; b < 256; ++b)
    if (tb[size_t(mt.byte_ids[size_t(b)])] != std::string(1, char(b)))
      XT_FAIL("byte id " << mt.byte_ids[size_t(b)] << " of byte " << b << " is not that byte's token");
  std::unordered_set<uint64_t> keys;
  const auto key = [](int32_t l, int32_t r) { return (uint64_t(uint32_t(l)) << 32) | uint32_t(r); };
  for (const auto& p : mt.pairs)
    if (!keys.insert(key(p[0], p[1])).second) XT_FAIL("pair (" << p[0] << ", " << p[1] << ") stored twice");
  if (rule == bpe::PairRule::kListed) {
    std::unordered_map<uint64_t, std::array<int32_t, 2>> want;  // (left, right) -> rank, id, as Merger builds it
    for (size_t rank = 0; rank < m.merges.size(); ++rank) {
      const auto& mg = m.merges[rank];
      if (mg[0] < 0 || mg[1] < 0) XT_FAIL("merge " << rank << " has no pair");
      want[key(mg[0], mg[1])] = {int32_t(rank), mg[2]};
    }
    if (want.size() != mt.pairs.size()) XT_FAIL(mt.pairs.size() << " pairs, its merges give " << want.size());
    for (const auto& p : mt.pairs) {
      auto it = want.find(key(p[0], p[1]));
      if (it == want.end() || it->second[0] != p[2] || it->second[1] != p[3])
        XT_FAIL("pair (" << p[0] << ", " << p[1] << ") -> " << p[3] << " at rank " << p[2] << " is not its merges'");
    }
  } else {
    std::vector<int32_t> first_rank(tb.size(), -1);  // the rank of each merge result; -1: not a merge result
    for (size_t rank = m.merges.size(); rank-- > 0;) first_rank[size_t(m.merges[rank][2])] = int32_t(rank);
    std::vector<bool> mergeable(tb.size(), false);
    for (int32_t id : mt.byte_ids) mergeable[size_t(id)] = true;
    for (const auto& mg : m.merges) mergeable[size_t(mg[2])] = true;
    for (const auto& p : mt.pairs)
      if (!mergeable[size_t(p[0])] || !mergeable[size_t(p[1])] || first_rank[size_t(p[3])] != p[2] ||
          tb[size_t(p[0])].size() + tb[size_t(p[1])].size() != tb[size_t(p[3])].size() ||
          tb[size_t(p[3])].compare(0, tb[size_t(p[0])].size(), tb[size_t(p[0])]) != 0 ||
          tb[size_t(p[3])].compare(tb[size_t(p[0])].size(), std::string::npos, tb[size_t(p[1])]) != 0)
        XT_FAIL("pair (" << p[0] << ", " << p[1] << ") -> " << p[3] << " at rank " << p[2] << " is not its merges'");
  }
  std::vector<bool> whole(tb.size(), false);
  for (const auto& [bytes, id] : mt.whole) {
    if (tb[size_t(id)] != bytes || whole[size_t(id)]) XT_FAIL("whole-piece id " << id << " is not its bytes' token, once");
    whole[size_t(id)] = true;
  }
  // GPT-2's files look up no whole piece; tiktoken every rank's token (Tokenizer::from_ranks)
  size_t ranked = 0;
  for (size_t id = 0; id < tb.size(); ++id) ranked += !tb[id].empty() && !special[id];
  if (m.kind == Tokenizer::Kind::Gpt2Files && !mt.whole.empty()) XT_FAIL(mt.whole.size() << " whole pieces, GPT-2's files have none");
  if (m.kind == Tokenizer::Kind::Tiktoken && mt.whole.size() != ranked)
    XT_FAIL(mt.whole.size() << " whole pieces, its ranks give " << ranked);
}
}  // namespace

std::string TokenizerTables::save(const Tokenizer& t) {
  const Tokenizer::Impl& m = *t.impl_;
  XT_CHECK(kind_code(m.kind) != 0 && !m.spm && (m.hf != nullptr) == (m.kind == Tokenizer::Kind::HfJson),
           "tokenizer cache: only GPT-2 files, tiktoken and tokenizer.json tables are stored");
  Out o;
  o.put(kind_code(m.kind));
  o.str(m.name), o.str(m.pattern);
  o.put(m.eot), o.put(m.fingerprint);
  o.put(uint64_t(m.token_bytes.size()));
  for (const std::string& s : m.token_bytes) o.str(s);
  o.put(uint64_t(m.specials.size()));
  for (const auto& [s, id] : m.specials) o.str(s), o.put(id);
  o.put(uint64_t(m.merges.size()));
  for (const auto& mg : m.merges) o.put(mg[0]), o.put(mg[1]), o.put(mg[2]);
  o.put(uint64_t(m.unassigned.size()));
  for (bool u : m.unassigned) o.put(uint8_t(u));
  const bpe::Merger::Tables mt = m.merger->tables();
  for (int32_t id : mt.byte_ids) o.put(id);
  o.put(uint64_t(mt.pairs.size()));
  for (const auto& p : mt.pairs) o.put(p[0]), o.put(p[1]), o.put(p[2]), o.put(p[3]);
  o.put(uint64_t(mt.whole.size()));
  for (const auto& [s, id] : mt.whole) o.str(s), o.put(id);
  if (m.hf) {  // the pipeline's source, read again on restore
    o.str(m.hf->source);
    o.put(uint64_t(m.hf->added_ids.size()));
    for (int32_t id : m.hf->added_ids) o.put(id);
  }
  return std::move(o.b);
}

TokenizerTables::Expected TokenizerTables::expect(const std::string& loader) {
  Expected e;
  const std::string tiktoken = "tiktoken:";
  if (loader == kHfJsonLoader) e.kind = Tokenizer::Kind::HfJson;
  if (loader.compare(0, tiktoken.size(), tiktoken) == 0) {
    e.kind = Tokenizer::Kind::Tiktoken, e.name = loader.substr(tiktoken.size());
    e.pattern = tiktoken_pattern(e.name), e.specials = tiktoken_specials(e.name);
  }
  return e;
}

Tokenizer TokenizerTables::restore(std::string_view payload, const std::vector<std::string>& files, const Expected& want) {
  In in{payload};
  const uint32_t kind = in.get<uint32_t>();
  if (kind < 1 || kind > 3) XT_FAIL("unknown tokenizer kind " << kind);
  if (kind != kind_code(want.kind)) XT_FAIL("tokenizer kind " << kind << ", the loader builds kind " << kind_code(want.kind));
  std::string name = in.str(), pattern = in.str();
  // before the pattern is compiled: an entry never chooses the pre-tokenizer (a pattern that
  // backtracks without end would stall every start)
  if (name != want.name) XT_FAIL("encoding name \"" << name << "\", the loader's is \"" << want.name << "\"");
  if (pattern != want.pattern) XT_FAIL("its split pattern is not the loader's");
  // the pre-tokenizer of its split pattern (tiktoken's), GPT-2's for none
  auto m = pattern.empty() ? std::make_unique<Tokenizer::Impl>() : std::make_unique<Tokenizer::Impl>(pattern);
  m->kind = kKinds[kind - 1];
  m->name = std::move(name), m->pattern = std::move(pattern), m->files = files;
  const int32_t eot = in.get<int32_t>();
  m->fingerprint = in.get<uint64_t>();
  const size_t V = in.count(8);
  if (V > size_t(INT32_MAX)) XT_FAIL("a vocabulary of " << V << " ids");
  const int32_t v = int32_t(V);
  if (eot < -1 || eot >= v) XT_FAIL("end-of-text id " << eot << " outside [-1, " << V << ")");
  m->eot = eot;
  m->token_bytes.reserve(V);
  for (size_t i = 0; i < V; ++i) m->token_bytes.push_back(in.str());
  for (size_t i = 0, n = in.count(12); i < n; ++i) {
    std::string s = in.str();
    m->specials.emplace_back(std::move(s), in.id(0, v, "special token id"));
  }
  for (size_t i = 0, n = in.count(12); i < n; ++i) {
    std::array<int32_t, 3> mg;
    for (int32_t& x : mg) x = in.id(-1, v, "merge id");
    m->merges.push_back(mg);
  }
  const size_t unassigned = in.count(1);
  if (unassigned != 0 && unassigned != V) XT_FAIL(unassigned << " unassigned flags for " << V << " ids");
  for (size_t i = 0; i < unassigned; ++i) {
    const uint8_t u = in.get<uint8_t>();
    if (u > 1) XT_FAIL("unassigned flag " << int(u));
    m->unassigned.push_back(u == 1);
  }
  bpe::Merger::Tables mt;
  for (int32_t& id : mt.byte_ids) id = in.id(0, v, "byte id");
  for (size_t i = 0, n = in.count(16); i < n; ++i) {
    std::array<int32_t, 4> p;
    p[0] = in.id(0, v, "pair id"), p[1] = in.id(0, v, "pair id"), p[2] = in.id(0, INT32_MAX, "rank"), p[3] = in.id(0, v, "pair id");
    mt.pairs.push_back(p);
  }
  for (size_t i = 0, n = in.count(12); i < n; ++i) {
    std::string s = in.str();
    mt.whole.emplace_back(std::move(s), in.id(0, v, "whole-piece id"));
  }
  std::string source;
  std::vector<int32_t> added_ids;
  if (m->kind == Tokenizer::Kind::HfJson) {
    source = in.str();
    for (size_t i = 0, n = in.count(4); i < n; ++i) added_ids.push_back(in.id(-1, v, "added token id"));
  }
  if (in.pos != payload.size()) XT_FAIL(payload.size() - in.pos << " trailing bytes");
  // a tokenizer.json's specials are its pipeline's added tokens (Tokenizer::from_raw), not the tables'
  std::vector<std::pair<std::string, int32_t>> specials = m->specials;
  if (m->kind == Tokenizer::Kind::HfJson) {
    if (!m->specials.empty()) XT_FAIL(m->specials.size() << " specials apart from its pipeline's added tokens");
    m->hf = restore_pipeline(std::move(source), std::move(added_ids), files.at(0), &specials);
    for (const std::vector<int32_t>* ids : {&m->hf->prefix, &m->hf->suffix})
      for (int32_t id : *ids)
        if (id < 0 || id >= v) XT_FAIL("post-processor id " << id << " outside [0, " << V << ")");
  }
  // what the loader derives from these tables, derived again: the end-of-text id and the fingerprint
  if (m->eot != end_of_text_id(specials))
    XT_FAIL("end-of-text id " << m->eot << ", its specials give " << end_of_text_id(specials));
  uint64_t fingerprint = 0;
  if (m->kind == Tokenizer::Kind::Tiktoken) {
    auto have = m->specials, expected = want.specials;
    std::sort(have.begin(), have.end()), std::sort(expected.begin(), expected.end());
    if (have != expected) XT_FAIL("its special tokens are not " << want.name << "'s");
    fingerprint = tiktoken_fingerprint(m->name, m->pattern, m->token_bytes, m->unassigned, want.specials);
  } else {
    fingerprint = bpe_fingerprint(m->token_bytes, m->merges, specials, m->hf ? m->hf->description : "");
  }
  if (fingerprint != m->fingerprint)
    XT_FAIL("fingerprint " << hex64(m->fingerprint) << ", its tables give " << hex64(fingerprint));
  check_merger_tables(mt, {m->kind, m->token_bytes, m->merges, m->specials}, m->kind == Tokenizer::Kind::HfJson ? bpe::PairRule::kListed : bpe::PairRule::kAnySplit);
  m->merger = std::make_unique<bpe::Merger>(mt);
  return Tokenizer(std::move(m));
}

std::string tokenizer_tables_path(const std::string& dir, const std::string& loader, const std::vector<std::string>& source_bytes) {
  Xxh3Stream h;
  const std::string tag = "xtrain-tokenizer-tables";
  h.update(tag.data(), tag.size());
  const uint32_t version = kTokenizerTablesVersion;
  h.update(&version, sizeof version);
  const uint64_t loader_bytes = loader.size();
  h.update(&loader_bytes, 8);
  h.update(loader.data(), loader.size());
  for (const std::string& b : source_bytes) {
    const uint64_t n = b.size();
    h.update(&n, 8);
    h.update(b.data(), b.size());
  }
  return (std::filesystem::path(dir) / (hex64(h.digest()) + kTokenizerTablesExt)).string();
}

namespace {
// read_entry: the entry's bytes, "" when there is none; Error "<why>" for one that is not this user's
// regular file or cannot be read (never through a symlink: O_NOFOLLOW)
std::string read_entry(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (fd.get() < 0) {
    const int err = errno;
    if (err == ENOENT) return "";
    struct stat link{};
    if (err == ELOOP && ::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) XT_FAIL("is a symbolic link");
    XT_FAIL("cannot open it (" << std::strerror(err) << ")");
  }
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) XT_FAIL("cannot stat it (" << std::strerror(errno) << ")");
  if (!S_ISREG(st.st_mode)) XT_FAIL("not a regular file");
  if (st.st_nlink > 1) XT_FAIL(st.st_nlink << " hard links (another name could change it)");
  if (st.st_uid != ::geteuid()) XT_FAIL("owned by uid " << st.st_uid << ", not this user (uid " << ::geteuid() << ")");
  if (uint64_t(st.st_size) < kHeaderBytes || uint64_t(st.st_size) > kMaxEntryBytes) XT_FAIL("a size of " << st.st_size << " bytes");
  std::string b(size_t(st.st_size), '\0');
  size_t got = 0;
  while (got < b.size()) {
    const ssize_t n = ::pread(fd.get(), b.data() + got, b.size() - got, off_t(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) XT_FAIL("cannot read it (" << (n < 0 ? std::strerror(errno) : "shorter than its size") << ")");
    got += size_t(n);
  }
  return b;
}

// warn: one warning line, written at once (ranks share the terminal: core/log.h's print_rank_line)
void warn(const TokenizerCacheDir& cache, const std::string& message) {
  const std::string line = cache.log_prefix + "warning: tokenizer cache " + message + "\n";
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

uint64_t key_of(const std::string& path) {  // the key the name holds (tokenizer_tables_path)
  uint64_t key = 0;
  parse_hex64(std::filesystem::path(path).stem().string(), &key);
  return key;
}
}  // namespace

Tokenizer load_tokenizer_cached(const TokenizerCacheDir& cache, const std::string& loader, const std::vector<std::string>& sources,
                                const TokenizerBuild& build, bool* hit) {
  if (hit) *hit = false;
  std::vector<std::string> bytes;
  try {
    for (const std::string& s : sources) bytes.push_back(read_file(s));
  } catch (const Error&) {
    return build(nullptr);  // an unreadable source: the loader's own error
  }
  if (not_a_directory(cache.dir)) {  // one warning for the one cause, not a failed read and then a failed write
    std::string why = cache.origin + " " + cache.dir + ": not a directory";
    try {
      open_output_directory(cache.dir, cache.origin, false);
    } catch (const Error& e) {
      why = e.what();  // which component is not one
    }
    warn(cache, "not used (" + why + ")");
    return build(&bytes);
  }
  const std::string path = tokenizer_tables_path(cache.dir, loader, bytes);
  const uint64_t key = key_of(path);
  try {
    const std::string entry = read_entry(path);
    if (!entry.empty()) {
      uint32_t version = 0;
      uint64_t k = 0, n = 0, h = 0;
      std::memcpy(&version, entry.data() + 8, 4), std::memcpy(&k, entry.data() + 16, 8);
      std::memcpy(&n, entry.data() + 24, 8), std::memcpy(&h, entry.data() + 32, 8);
      const std::string_view payload = std::string_view(entry).substr(kHeaderBytes);
      if (std::memcmp(entry.data(), kMagic, 8) != 0) XT_FAIL("not a tokenizer cache entry (no magic)");
      if (version != kTokenizerTablesVersion) XT_FAIL("format version " << version << ", this build reads " << kTokenizerTablesVersion);
      if (k != key) XT_FAIL("key " << hex64(k) << " is not its name's");
      if (n != payload.size()) XT_FAIL("its header gives " << n << " payload bytes, it holds " << payload.size());
      if (xxh3_64(payload.data(), payload.size()) != h) XT_FAIL("its payload hash does not match (damaged)");
      Tokenizer t = TokenizerTables::restore(payload, sources, TokenizerTables::expect(loader));
      if (hit) *hit = true;
      return t;
    }
  } catch (const Error& e) {
    warn(cache, path + ": " + e.what() + "; rebuilding it");
  }
  Tokenizer t = build(&bytes);  // from the bytes the key names, never read again
  struct stat link{};
  if (::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {  // the reader refused it: never write through it
    warn(cache, path + " is a symbolic link; not writing through it");
    return t;
  }
  try {
    const std::string payload = TokenizerTables::save(t);
    Out o;
    o.b.append(kMagic, 8);
    o.put(kTokenizerTablesVersion), o.put(uint32_t(0)), o.put(key), o.put(uint64_t(payload.size()));
    o.put(xxh3_64(payload.data(), payload.size()));
    o.b += payload;
    open_output_directory(cache.dir, cache.origin, true);
    write_file_atomic(path, o.b, "cannot write tokenizer cache");
  } catch (const Error& e) {
    warn(cache, std::string("not written (") + e.what() + ")");
  }
  return t;
}

}  // namespace xtrain
