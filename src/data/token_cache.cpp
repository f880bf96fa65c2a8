// Token cache files (format in src/data/token_cache.h).
#include "data/token_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <utility>

#include <xtrain/core/error.h>
#include "core/digest.h"
#include "core/io.h"

namespace xtrain {

namespace {

constexpr char kMagic[8] = {'X', 'T', 'T', 'O', 'K', 'E', 'N', 'S'};
constexpr uint32_t kVersion = 3;
constexpr size_t kHeaderBytes = 88;

void put_le(std::string* buf, uint64_t v, int bytes) {
  for (int k = 0; k < bytes; ++k) buf->push_back(char((v >> (8 * k)) & 0xFF));
}
uint64_t get_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int k = 0; k < bytes; ++k) v |= uint64_t(p[k]) << (8 * k);
  return v;
}

// CacheFile: what an existing cache path holds, to decide whether it may be replaced: a token cache
// (damaged or not) or an empty file (e.g. left by a crash) may be; a foreign file or one this
// process cannot read (it cannot tell which) is never.
enum class CacheFile { missing, token_cache, empty, foreign, unreadable };
CacheFile classify_cache(const std::string& path, std::string* why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    *why = std::strerror(errno);
    return CacheFile::unreadable;
  }
  char magic[sizeof(kMagic)] = {};
  size_t got = 0;
  ssize_t n = 0;
  while (got < sizeof magic && (n = ::read(fd, magic + got, sizeof magic - got)) > 0) got += size_t(n);
  const int read_errno = errno;
  ::close(fd);
  if (n < 0) {
    *why = std::strerror(read_errno);
    return CacheFile::unreadable;
  }
  if (got == 0) return CacheFile::empty;
  // the whole magic, or a cache cut short inside it (damaged: rebuilt, not left as a foreign file)
  return std::memcmp(magic, kMagic, got) == 0 ? CacheFile::token_cache : CacheFile::foreign;
}

// dir_writable: this process may create files in the directory of path.
bool dir_writable(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return ::access(dir.empty() ? "." : dir.c_str(), W_OK) == 0;
}

// not_own_file: why a cache with this (l)stat may not be trusted in a cache directory, "" when it may:
// it must be a regular file of this user with one link (another name could change it underneath)
std::string not_own_file(const struct stat& st) {
  if (S_ISLNK(st.st_mode)) return "is a symbolic link";
  if (!S_ISREG(st.st_mode)) return "is not a regular file";
  if (st.st_uid != ::geteuid())
    return "is owned by uid " + std::to_string(st.st_uid) + ", not this user (uid " + std::to_string(::geteuid()) + ")";
  if (st.st_nlink != 1) return "has " + std::to_string(st.st_nlink) + " hard links";
  return "";
}

}  // namespace

bool looks_like_token_cache(const std::string& path) {
  std::string why;
  const CacheFile f = classify_cache(path, &why);
  return f == CacheFile::token_cache || f == CacheFile::empty;
}

bool starts_with_token_cache_magic(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  char magic[sizeof(kMagic)] = {};
  const ssize_t n = ::pread(fd, magic, sizeof magic, 0);
  ::close(fd);
  return n == ssize_t(sizeof magic) && std::memcmp(magic, kMagic, sizeof magic) == 0;
}

SourceId stat_source(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) XT_FAIL("cannot read " << path << ": " << std::strerror(errno));
  SourceId s;
  s.bytes = static_cast<uint64_t>(st.st_size);
  const auto ns = [](const struct timespec& t) { return uint64_t(t.tv_sec) * 1000000000ull + uint64_t(t.tv_nsec); };
  s.mtime_ns = ns(st.st_mtim);
  s.device = static_cast<uint64_t>(st.st_dev);
  s.inode = static_cast<uint64_t>(st.st_ino);
  s.ctime_ns = ns(st.st_ctim);
  return s;
}

int token_id_bytes(int vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

void write_token_cache(const std::string& path, const std::vector<int32_t>& ids, int vocab_size,
                       uint64_t tok_fingerprint, const SourceId& source, mode_t mode) {
  const int id_bytes = token_id_bytes(vocab_size);
  std::string buf(kMagic, sizeof(kMagic));
  buf.reserve(kHeaderBytes + size_t(id_bytes) * ids.size());
  put_le(&buf, kVersion, 4);
  put_le(&buf, uint64_t(id_bytes), 4);
  put_le(&buf, tok_fingerprint, 8);
  put_le(&buf, source.bytes, 8);
  put_le(&buf, source.mtime_ns, 8);
  put_le(&buf, source.hash, 8);
  put_le(&buf, ids.size(), 8);
  put_le(&buf, 0, 8);  // ids hash, filled in below
  put_le(&buf, source.device, 8);
  put_le(&buf, source.inode, 8);
  put_le(&buf, source.ctime_ns, 8);
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size) XT_FAIL("cannot write token cache " << path << ": token id " << id
                                                                         << " outside the vocabulary [0, " << vocab_size << ")");
    put_le(&buf, uint32_t(id), id_bytes);
  }
  const uint64_t ids_hash = xxh3_64(buf.data() + kHeaderBytes, buf.size() - kHeaderBytes);
  std::string hash_le;
  put_le(&hash_le, ids_hash, 8);
  buf.replace(56, 8, hash_le);
  // Atomic replace (several ranks may write the same cache at once): readers, and mappings made
  // before, see the old file or the complete new one.
  write_file_atomic(path, buf, "cannot write token cache", {}, mode);
}

std::shared_ptr<const MappedTokenCache> MappedTokenCache::open(const std::string& path, bool owned_only) {
  RegularFile file = open_regular_file(path, "token cache " + path + ": cannot open");
  if (owned_only) {
    const std::string why = not_own_file(file.st);
    if (!why.empty()) XT_FAIL("token cache " << path << " " << why);
  }
  const size_t size = static_cast<size_t>(file.st.st_size);
  if (size < 12) {  // magic and version: enough to name an older format before its header size
    XT_FAIL("token cache " << path << " is truncated: " << size << " bytes, less than the " << kHeaderBytes << "-byte header");
  }
  std::shared_ptr<MappedTokenCache> c(new MappedTokenCache);
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, file.fd.get(), 0);
  const int map_errno = errno;
  file.fd.reset();  // a mapping keeps the file
  if (map != MAP_FAILED) {
    c->map_ = map, c->map_bytes_ = size;  // unmapped by the destructor from here on
    c->bytes_ = static_cast<const unsigned char*>(map);
  } else if (map_errno == ENOMEM) {  // no mapping left for this process: a private copy instead
    static std::once_flag warned;
    std::call_once(warned, [&] {
      std::cerr << "warning: token cache " << path << ": mmap failed (" << std::strerror(map_errno)
                << ": too many mappings, see vm.max_map_count, or an address-space limit, ulimit -v); this and "
                   "further caches are read into memory, not shared between the ranks of a node\n";
    });
    c->copy_ = read_file(path);  // one line naming the path when it does not fit in memory either
    if (c->copy_.size() != size) XT_FAIL("token cache " << path << " changed while it was read");
    c->bytes_ = reinterpret_cast<const unsigned char*>(c->copy_.data());
  } else {
    XT_FAIL("token cache " << path << ": mmap failed: " << std::strerror(map_errno));
  }
  const unsigned char* p = c->bytes_;
  if (std::memcmp(p, kMagic, sizeof(kMagic)) != 0) XT_FAIL("token cache " << path << " is not a token cache (bad magic)");
  const uint64_t version = get_le(p + 8, 4);
  if (version != kVersion) XT_FAIL("token cache " << path << " has format version " << version << ", expected " << kVersion);
  if (size < kHeaderBytes)
    XT_FAIL("token cache " << path << " is truncated: " << size << " bytes, less than the " << kHeaderBytes << "-byte header");
  TokenCacheHeader& h = c->header_;
  const uint64_t id_bytes = get_le(p + 12, 4);
  if (id_bytes != 2 && id_bytes != 4) XT_FAIL("token cache " << path << " is corrupt (id width " << id_bytes << " bytes)");
  h.id_bytes = int(id_bytes);
  h.tokenizer_fingerprint = get_le(p + 16, 8);
  h.source.bytes = get_le(p + 24, 8);
  h.source.mtime_ns = get_le(p + 32, 8);
  h.source.hash = get_le(p + 40, 8);
  h.count = get_le(p + 48, 8);
  h.ids_hash = get_le(p + 56, 8);
  h.source.device = get_le(p + 64, 8);
  h.source.inode = get_le(p + 72, 8);
  h.source.ctime_ns = get_le(p + 80, 8);
  // Compare in a form that cannot overflow for a corrupt count.
  if ((size - kHeaderBytes) % id_bytes != 0 || (size - kHeaderBytes) / id_bytes != h.count)
    XT_FAIL("token cache " << path << " is truncated or corrupt: header says " << h.count << " tokens of " << id_bytes
                           << " bytes, file has " << size << " bytes");
  if (xxh3_64(p + kHeaderBytes, size - kHeaderBytes) != h.ids_hash)
    XT_FAIL("token cache " << path << " is corrupt (ids hash mismatch)");
  return c;
}

MappedTokenCache::~MappedTokenCache() {
  if (map_) ::munmap(map_, map_bytes_);
}

TokenView MappedTokenCache::ids() const {
  return TokenView{bytes_ + kHeaderBytes, header_.count, header_.id_bytes};
}

std::vector<int32_t> encode_with_progress(const Tokenizer& tok, std::string_view text, const std::string& name,
                                          int rank, const ProgressOptions& opt) {
  Progress progress("tokenize " + name, text.size(), rank, opt);
  std::vector<int32_t> ids = tok.encode(text, [&](size_t done) { progress.update(done); });
  progress.finish();
  return ids;
}

std::string default_token_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && xdg[0] == '/') return (std::filesystem::path(xdg) / "xtrain").string();
  const char* home = std::getenv("HOME");
  if (home && *home) return (std::filesystem::path(home) / ".cache" / "xtrain").string();
  return "";
}

std::string token_cache_dir(const std::string& cache_dir_option) {
  if (cache_dir_option.empty()) return default_token_cache_dir();
  return cache_dir_option == kCacheNextToData ? "" : cache_dir_option;
}

void check_no_cache(bool no_cache, const std::string& cache_dir) {
  if (no_cache && !cache_dir.empty())
    throw UsageError("--cache-dir and --no-cache exclude each other (--no-cache reads and writes no token cache)");
}

std::string token_cache_dir_origin(const std::string& cache_dir_option) {
  if (!cache_dir_option.empty()) return "--cache-dir";
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  return xdg && xdg[0] == '/' ? "$XDG_CACHE_HOME/xtrain" : "$HOME/.cache/xtrain";  // default_token_cache_dir's choice
}

void check_cache_dir_owner(const std::string& dir, const std::string& origin) {
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0) return;  // absent: made by this user when the first cache is written
  if (st.st_uid != ::geteuid() && st.st_uid != 0)
    XT_FAIL(origin << " " << dir << ": owned by uid " << st.st_uid << ", neither this user (uid " << ::geteuid()
                   << ") nor root; not reading or writing caches in it");
}

bool not_a_directory(const std::string& dir) {
  struct stat st{};
  if (::stat(dir.c_str(), &st) == 0) return !S_ISDIR(st.st_mode);
  return errno == ENOTDIR;
}

namespace {
// resolved_path: path made absolute with every symbolic link on it followed, at any component and not only
// the last (relative targets from the link's directory, dangling ones too: a write through "link/x" makes
// the link's target), and "." and ".." applied in turn (".." of a directory reached: its parent on disk, as
// the kernel takes it; below a missing one, lexically, as open_output_directory makes it): where a write
// through path lands. Empty past 40 links (the kernel's ELOOP limit; a loop, where that write fails).
std::filesystem::path resolved_path(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path abs = fs::absolute(path, ec);
  if (ec) return {};
  const fs::path below_root = abs.relative_path();
  std::deque<fs::path> rest(below_root.begin(), below_root.end());
  fs::path out = abs.root_path();
  for (int links = 0; !rest.empty();) {
    const fs::path c = rest.front();
    rest.pop_front();
    if (c.empty() || c == ".") continue;  // "d/" and "d/." are d
    if (c == "..") {
      out = out.parent_path();  // out holds no symbolic link: its parent is the one on disk
      continue;
    }
    if (!fs::is_symlink(fs::symlink_status(out / c, ec))) {
      out /= c;
      continue;
    }
    const fs::path target = fs::read_symlink(out / c, ec);
    if (ec || ++links > 40) return {};
    const fs::path parts = target.relative_path();
    rest.insert(rest.begin(), parts.begin(), parts.end());
    if (target.is_absolute()) out = target.root_path();
  }
  return out;
}

// for_each_cache_dir: fn(dir, origin) for the cache directories check_output_outside_cache_dirs names
template <typename Fn>
void for_each_cache_dir(const std::string& cache_dir_option, Fn fn) {
  const std::pair<std::string, std::string> dirs[] = {{token_cache_dir(cache_dir_option), token_cache_dir_origin(cache_dir_option)},
                                                      {default_token_cache_dir(), token_cache_dir_origin("")}};
  for (const auto& [dir, origin] : dirs)
    if (!dir.empty()) fn(dir, origin);
}

[[noreturn]] void refuse_in_cache_dir(const std::string& opt, const std::string& path, const char* relation,
                                      const std::string& dir, const std::string& origin) {
  throw UsageError(opt + " " + path + " " + relation + " the token cache directory " + dir + " (" + origin +
                   ": token caches and tokenizer tables, replaced by name when stale): choose another directory");
}
}  // namespace

void check_output_outside_cache_dirs(const std::string& path, const std::string& opt, const std::string& cache_dir_option) {
  if (path.empty()) return;
  // the directory as given and the one a write reaches (every symbolic link on the way followed)
  std::vector<std::string> parents;
  const std::filesystem::path resolved = resolved_path(path);  // empty for a loop: the write fails on it
  for (const std::filesystem::path& p : {std::filesystem::path(path), resolved.empty() ? std::filesystem::path(path) : resolved}) {
    const std::string parent = p.parent_path().string();
    parents.push_back(parent.empty() ? "." : parent);
  }
  for_each_cache_dir(cache_dir_option, [&](const std::string& dir, const std::string& origin) {
    if (same_file(parents[0], dir) || same_file(parents[1], dir)) refuse_in_cache_dir(opt, path, "is inside", dir, origin);
  });
}

void check_directory_outside_cache_dirs(const std::string& path, const std::string& opt, const std::string& cache_dir_option) {
  if (path.empty()) return;
  // the directory and each one above it with every symbolic link on the way followed (resolved_path:
  // "link/" to a directory not made yet inside the cache is in it; "cache/x/../../out" is beside it), then
  // compared by same_file with the cache directory, itself resolved so (it may be a link, or not made yet)
  std::filesystem::path p = resolved_path(path);
  if (p.empty()) return;  // a symbolic link loop: the write fails on it
  for_each_cache_dir(cache_dir_option, [&](const std::string& dir, const std::string& origin) {
    const std::filesystem::path resolved_dir = resolved_path(dir);
    const std::string cache = resolved_dir.empty() ? dir : resolved_dir.string();
    for (std::filesystem::path q = p, top = p;; q = q.parent_path()) {
      if (same_file(q.string(), cache)) refuse_in_cache_dir(opt, path, q == top ? "is" : "is inside", dir, origin);
      if (!q.has_relative_path()) break;  // the root
    }
  });
}

std::string keyed_cache_path(const std::string& dir, uint64_t text_hash, uint64_t tok_fingerprint) {
  char name[64];
  std::snprintf(name, sizeof name, "%016llx-%016llx.tokcache", static_cast<unsigned long long>(text_hash),
                static_cast<unsigned long long>(tok_fingerprint));
  return (std::filesystem::path(dir) / name).string();
}

IdsRecipe text_recipe(const Tokenizer& tok, const std::string& name, int rank) {
  return IdsRecipe{tok.fingerprint(),
                   [&tok, name, rank](const std::string& bytes) { return encode_with_progress(tok, bytes, name, rank); }};
}

TokenStream load_tokens(const std::string& text_path, const Tokenizer& tok, std::string cache_path, bool write_cache,
                        const std::string& log_prefix, int rank, bool* tokenized, bool record_identity) {
  return load_cached_ids(text_path, text_recipe(tok, text_path, rank), tok.vocab_size(), std::move(cache_path),
                         write_cache, log_prefix, tokenized, record_identity);
}

TokenStream load_cached_ids(const std::string& path, const IdsRecipe& recipe, int vocab_size, std::string cache_path,
                            bool write_cache, const std::string& log_prefix, bool* tokenized, bool record_identity,
                            bool owned_only) {
  if (tokenized) *tokenized = true;
  std::string text;  // the file's bytes (a text, or JSON lines as stored)
  bool have_text = false;
  const auto read_text = [&] {
    if (!have_text) text = read_file(path), have_text = true;
  };
  const auto encode = [&] {
    read_text();
    return recipe.encode(text);
  };
  // A text that is not a regular file (e.g. /dev/null) has no cache: <text>.tokcache would be created
  // next to a device node.
  if (cache_path.empty() && is_non_regular(path)) return TokenStream(encode());
  if (cache_path.empty()) cache_path = path + kTokenCacheExt;
  struct stat cache_st{};
  if (owned_only && ::lstat(cache_path.c_str(), &cache_st) == 0) {
    const std::string why = not_own_file(cache_st);
    if (!why.empty()) {  // never another user's ids, nor a write through their file
      const std::string line = log_prefix + "warning: token cache " + cache_path + " " + why +
                               "; not reading or replacing it, tokenizing " + path + " in memory\n";
      std::fputs(line.c_str(), stderr);
      std::fflush(stderr);
      return TokenStream(encode());
    }
  }
  if (is_non_regular(cache_path)) {  // a FIFO or device: reading could hang, writing would destroy it
    std::cerr << log_prefix << "warning: token cache " << cache_path
              << " exists and is not a regular file; neither reading nor writing it\n";
    return TokenStream(encode());
  }
  // Identity before reading: a text changed while we read it then fails the next run's quick check.
  SourceId source = stat_source(path);
  struct stat text_st{};
  const mode_t cache_mode = ::stat(path.c_str(), &text_st) == 0 ? (text_st.st_mode & 0666) : 0600;
  const auto as_stream = [](std::shared_ptr<const MappedTokenCache> c) {
    TokenStream s;
    s.append(c->ids(), c);
    return s;
  };
  std::string why;
  const CacheFile kind = ::access(cache_path.c_str(), F_OK) == 0 ? classify_cache(cache_path, &why) : CacheFile::missing;
  if (kind == CacheFile::empty)  // e.g. left by a crash: a lost shortcut like a damaged cache
    std::cerr << log_prefix << "warning: token cache " << cache_path << " is empty (0 bytes); re-tokenizing " << path << "\n";
  if (kind == CacheFile::unreadable) {
    std::cerr << log_prefix << "warning: token cache " << cache_path << " is unreadable (" << why
              << "); tokenizing " << path << " in memory, not overwriting it\n";
    return TokenStream(encode());
  }
  if (kind == CacheFile::foreign) {  // never replace it (e.g. --tokens-cache pointing at a corpus)
    std::cerr << log_prefix << "warning: " << cache_path << " exists and is not a token cache; not overwriting it\n";
    return TokenStream(encode());
  }
  if (kind == CacheFile::token_cache) {
    try {
      auto c = MappedTokenCache::open(cache_path, owned_only);
      const TokenCacheHeader& h = c->header();
      const bool quick = h.source.same_stat(source);
      bool same = h.tokenizer_fingerprint == recipe.fingerprint && h.source.bytes == source.bytes;
      if (same && !quick) {
        read_text();  // another file, or this one copied, touched or moved: the content decides
        same = xxh3_64(text.data(), text.size()) == h.source.hash;
      }
      // Record the text's new identity (same ids), so later start-ups pass the quick check unread.
      // Not in a directory this process cannot write: the copy of the ids would only be thrown away.
      if (same && !quick && write_cache && record_identity && dir_writable(cache_path)) {
        SourceId now = source;
        now.hash = h.source.hash;
        try {
          write_token_cache(cache_path, as_stream(c).to_vector(), vocab_size, recipe.fingerprint, now, cache_mode);
        } catch (const Error& e) {  // e.g. a full disk: the cache is still valid
          std::cerr << log_prefix << "warning: " << e.what() << "\n";
        }
      }
      if (same) {
        if (tokenized) *tokenized = false;
        return as_stream(std::move(c));
      }
    } catch (const Error& e) {
      // A damaged cache (or one of an older format) is only a lost shortcut: say so and rebuild it.
      std::cerr << log_prefix << "warning: " << e.what() << "; re-tokenizing " << path << "\n";
    }
  }
  std::vector<int32_t> ids = encode();
  source.hash = xxh3_64(text.data(), text.size());
  std::string().swap(text);  // freed before the cache's bytes are built: peak memory is text + ids
  if (write_cache) {  // missing, empty, stale, damaged or of an older format: (re)written
    try {
      write_token_cache(cache_path, ids, vocab_size, recipe.fingerprint, source, cache_mode);
      return as_stream(MappedTokenCache::open(cache_path, owned_only));  // the vector is freed; pages are shared
    } catch (const Error& e) {  // e.g. a read-only data directory: training can go on without it
      std::cerr << log_prefix << "warning: " << e.what() << "\n";
    }
  }
  return TokenStream(std::move(ids));
}

bool is_token_cache_name(const std::string& path) {
  const std::string ext = kTokenCacheExt;
  return path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
}

}  // namespace xtrain
