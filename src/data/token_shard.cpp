// llm.c token shards and nanoGPT raw token files (see src/data/token_shard.h).
#include "data/token_shard.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include <xtrain/core/error.h>
#include "core/io.h"
#include "data/token_cache.h"

namespace xtrain {

namespace {

// Mapping: a file's bytes mapped read-only (MAP_SHARED: the ranks of a node share the page cache),
// or read into memory where no more mappings are allowed (ENOMEM, as MappedTokenCache does).
struct Mapping {
  void* map = nullptr;
  size_t bytes = 0;
  std::string copy;
  const unsigned char* data = nullptr;
  ~Mapping() {
    if (map) ::munmap(map, bytes);
  }
};

std::shared_ptr<const Mapping> map_file(const std::string& path, const std::string& what) {
  RegularFile file = open_regular_file(path, what + ": cannot open");
  auto m = std::make_shared<Mapping>();
  m->bytes = static_cast<size_t>(file.st.st_size);
  if (m->bytes == 0) return m;
  void* p = ::mmap(nullptr, m->bytes, PROT_READ, MAP_SHARED, file.fd.get(), 0);
  if (p != MAP_FAILED) {
    m->map = p;
    m->data = static_cast<const unsigned char*>(p);
  } else {
    m->copy = read_file(path);
    m->data = reinterpret_cast<const unsigned char*>(m->copy.data());
  }
  return m;
}

int32_t get_i32(const unsigned char* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);  // little-endian (token_stream.cpp asserts the platform is)
  return v;
}

// check_ids: every id of view is < vocab_size; else throws "<what>: token id X at index I ...".
void check_ids(const TokenView& view, int vocab_size, const std::string& what) {
  const auto fail = [&](size_t i, uint32_t id) {
    XT_FAIL(what << ": token id " << id << " at index " << i << " outside the vocabulary [0, " << vocab_size << ")");
  };
  const uint32_t v = static_cast<uint32_t>(vocab_size);
  if (view.id_bytes == 2) {
    const auto* p = static_cast<const uint16_t*>(view.ids);
    for (size_t i = 0; i < view.count; ++i)
      if (p[i] >= v) fail(i, p[i]);
  } else {
    const auto* p = static_cast<const uint32_t*>(view.ids);
    for (size_t i = 0; i < view.count; ++i)
      if (p[i] >= v) fail(i, p[i]);
  }
}

TokenStream stream_of(const std::shared_ptr<const Mapping>& m, size_t offset, size_t count, int id_bytes) {
  TokenStream s;
  s.append(TokenView{m->data ? m->data + offset : nullptr, count, id_bytes}, m);
  return s;
}

}  // namespace

bool starts_with_llmc_magic(const std::string& path) {
  try {
    RegularFile file = open_regular_file(path, path);
    unsigned char b[4];
    if (::pread(file.fd.get(), b, sizeof b, 0) != ssize_t(sizeof b)) return false;
    const int32_t magic = get_i32(b);
    return magic == kLlmcMagicGpt2 || magic == kLlmcMagicLlama3;
  } catch (const Error&) {
    return false;
  }
}

TokenStream open_llmc_shard(const std::string& path, int vocab_size) {
  const std::string what = "llm.c shard " + path;
  const std::shared_ptr<const Mapping> m = map_file(path, what);
  if (m->bytes < kLlmcHeaderBytes)
    XT_FAIL(what << " is truncated: " << m->bytes << " bytes, less than the " << kLlmcHeaderBytes << "-byte header");
  const int32_t magic = get_i32(m->data), version = get_i32(m->data + 4), count = get_i32(m->data + 8);
  int id_bytes = 0;
  if (magic == kLlmcMagicGpt2) {
    if (version != kLlmcVersionGpt2)
      XT_FAIL(what << ": version " << version << " with the GPT-2 magic " << magic << " (llm.c writes version "
                   << kLlmcVersionGpt2 << ")");
    id_bytes = 2;
  } else if (magic == kLlmcMagicLlama3) {
    if (version != kLlmcVersionLlama3)
      XT_FAIL(what << ": version " << version << " with the Llama 3 magic " << magic << " (llm.c writes version "
                   << kLlmcVersionLlama3 << ")");
    id_bytes = 4;
  } else {
    XT_FAIL(what << ": magic " << magic << " is not llm.c's (" << kLlmcMagicGpt2 << " for uint16 ids, "
                 << kLlmcMagicLlama3 << " for uint32)");
  }
  if (count < 0) XT_FAIL(what << ": negative token count " << count << " in the header");
  const size_t want = kLlmcHeaderBytes + static_cast<size_t>(count) * static_cast<size_t>(id_bytes);
  if (m->bytes != want)
    XT_FAIL(what << (m->bytes < want ? " is truncated: " : " has trailing bytes: ") << m->bytes
                 << " bytes, but its header says 1024 + " << count << " tokens x " << id_bytes << " bytes = " << want);
  TokenStream s = stream_of(m, kLlmcHeaderBytes, static_cast<size_t>(count), id_bytes);
  for (const TokenView& v : s.parts()) check_ids(v, vocab_size, what);
  return s;
}

TokenStream open_nanogpt_bin(const std::string& path, int vocab_size) {
  const std::string what = "nanoGPT token file " + path;
  const std::shared_ptr<const Mapping> m = map_file(path, what);
  if (m->bytes % 2 != 0) XT_FAIL(what << ": " << m->bytes << " bytes, not a whole number of uint16 ids");
  TokenStream s = stream_of(m, 0, m->bytes / 2, 2);
  for (const TokenView& v : s.parts()) check_ids(v, vocab_size, what);
  return s;
}

void write_llmc_shard(const std::string& path, const int32_t* ids, size_t count, int vocab_size) {
  const int id_bytes = token_id_bytes(vocab_size);
  if (count >= (size_t{1} << 31)) XT_FAIL("cannot write llm.c shard " << path << ": " << count << " tokens, llm.c's count is an int32");
  int32_t header[256] = {};
  header[0] = id_bytes == 2 ? kLlmcMagicGpt2 : kLlmcMagicLlama3;
  header[1] = id_bytes == 2 ? kLlmcVersionGpt2 : kLlmcVersionLlama3;
  header[2] = static_cast<int32_t>(count);
  std::string buf(reinterpret_cast<const char*>(header), sizeof header);
  buf.resize(kLlmcHeaderBytes + count * static_cast<size_t>(id_bytes));
  char* out = buf.data() + kLlmcHeaderBytes;
  for (size_t i = 0; i < count; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size)
      XT_FAIL("cannot write llm.c shard " << path << ": token id " << ids[i] << " outside the vocabulary [0, " << vocab_size << ")");
    const uint32_t id = static_cast<uint32_t>(ids[i]);
    if (id_bytes == 2) {
      const uint16_t v = static_cast<uint16_t>(id);
      std::memcpy(out + 2 * i, &v, 2);
    } else {
      std::memcpy(out + 4 * i, &id, 4);
    }
  }
  write_file_atomic(path, buf, "cannot write llm.c shard");
}

}  // namespace xtrain
