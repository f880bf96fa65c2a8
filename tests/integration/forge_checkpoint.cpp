// forge_checkpoint IN OUT FIELD=VALUE... | forge_checkpoint IN --get FIELD: a damaged checkpoint WITH A VALID
// CHECKSUM, for the tests of the loader's header validation (tests/test_bad_input.sh). The header fields are
// those of kMetaFields (include/xtrain/checkpoint/checkpoint.h), read and written through that table, so this tool follows the
// format wherever it changes. Edits: a header field by name (an integer for int and u64 fields, a number for
// float fields); params0=, m0=, v0= set the first float of that array (e.g. nan, -1); the arrays are cut or
// zero-extended to the header's num_params floats each unless body=keep is given (Muon's momentum, muon_count
// floats after them, is kept as it is). format=03 writes the file as format 03 (no optimizer rows, no momentum:
// what an xtrain of then wrote). The XXH3-64 checksum at the end is recomputed. Exit 0, or 1 with one line for a file that is not a checkpoint of this format.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/digest.h"
#include "core/io.h"
#include <xtrain/checkpoint/checkpoint.h>

using namespace xtrain;

namespace {

constexpr size_t kHeaderStart = 8 + 4;  // magic, u32 header_bytes

// The parts of the file being edited: a gpt2 file holds the base rows only, another family's file the
// family's rows too; a format-04 file the optimizer's rows last (checkpoint.h, MetaPart).
bool g_family = false, g_v04 = true;

bool present(const MetaField& f) {
  return f.part == MetaPart::base || (f.part == MetaPart::family && g_family) || (f.part == MetaPart::optim && g_v04);
}
const MetaField* find_field(const std::string& name) {
  for (const MetaField& f : kMetaFields)
    if (name == f.name && present(f)) return &f;
  return nullptr;
}
// field_at: where row f lies in the header (the rows present, in table order)
size_t field_at(const MetaField& f) {
  size_t at = kHeaderStart;
  for (const MetaField& g : kMetaFields) {
    if (&g == &f) break;
    if (present(g)) at += g.bytes();
  }
  return at;
}

std::string get_text(const std::string& buf, const MetaField& f) {
  const char* p = buf.data() + field_at(f);
  std::ostringstream os;
  if (f.type == MetaType::i32) { int32_t x; std::memcpy(&x, p, 4); os << x; }
  if (f.type == MetaType::f32) { float x; std::memcpy(&x, p, 4); os << x; }
  if (f.type == MetaType::u64) { uint64_t x; std::memcpy(&x, p, 8); os << x; }
  return os.str();
}

void set_field(std::string& buf, const MetaField& f, const std::string& value) {
  char* p = buf.data() + field_at(f);
  if (f.type == MetaType::i32) { const int32_t x = int32_t(std::stoll(value)); std::memcpy(p, &x, 4); }
  if (f.type == MetaType::f32) { const float x = std::stof(value); std::memcpy(p, &x, 4); }
  if (f.type == MetaType::u64) { const uint64_t x = std::stoull(value); std::memcpy(p, &x, 8); }
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "forge_checkpoint: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return fail("usage: forge_checkpoint IN OUT FIELD=VALUE... | forge_checkpoint IN --get FIELD");
  std::ifstream in(argv[1], std::ios::binary);
  std::string buf((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint32_t header_bytes = 0;
  if (buf.size() >= kHeaderStart) std::memcpy(&header_bytes, buf.data() + 8, 4);
  g_v04 = buf.compare(0, 8, "XTCKPT04") == 0;
  const size_t optim = g_v04 ? kMetaOptimBytes : 0;
  if (buf.size() < kHeaderStart + header_bytes + 8 || (!g_v04 && buf.compare(0, 8, "XTCKPT03") != 0) ||
      (header_bytes != kMetaBytes + optim && header_bytes != kMetaBytes + kMetaFamilyBytes + optim))
    return fail(std::string(argv[1]) + ": not a checkpoint of this build's format");
  g_family = header_bytes != kMetaBytes + optim;
  const MetaField* num_params = find_field("num_params");
  if (argc == 4 && std::string(argv[2]) == "--get") {
    const MetaField* f = find_field(argv[3]);
    if (!f) return fail(std::string("no header field ") + argv[3]);
    std::printf("%s\n", get_text(buf, *f).c_str());
    return 0;
  }
  const uint64_t n_old = std::stoull(get_text(buf, *num_params));
  const size_t body_start = kHeaderStart + header_bytes;
  std::string body = buf.substr(body_start, buf.size() - 8 - body_start);
  std::string header = buf.substr(0, body_start);
  bool keep_body = false, to03 = false;
  std::map<int, float> first;  // array (params, m, v) -> its new first float
  for (int i = 3; i < argc; ++i) {
    const std::string e = argv[i];
    const size_t eq = e.find('=');
    if (eq == std::string::npos) return fail("an edit is FIELD=VALUE: " + e);
    const std::string name = e.substr(0, eq), value = e.substr(eq + 1);
    if (name == "body") {
      keep_body = value == "keep";
    } else if (name == "format") {
      if (value != "03") return fail("format=03 is the only format edit");
      to03 = true;
    } else if (name == "params0" || name == "m0" || name == "v0") {
      first[name == "params0" ? 0 : name == "m0" ? 1 : 2] = std::stof(value);
    } else if (const MetaField* f = find_field(name)) {
      set_field(header, *f, value);
    } else {
      return fail("no header field " + name);
    }
  }
  const uint64_t n = std::stoull(get_text(header, *num_params));
  std::vector<std::string> arrays(4);
  const size_t muon_at = std::min(body.size(), size_t(3 * 4 * n_old));
  arrays[3] = body.substr(muon_at);  // Muon's momentum (empty for AdamW and format 03)
  for (size_t k = 0; k < 3; ++k) {
    const size_t at = std::min(body.size(), size_t(k * 4 * n_old));
    arrays[k] = body.substr(at, std::min(body.size() - at, size_t(4 * n_old)));
    if (!keep_body) arrays[k].resize(4 * n, '\0');
  }
  for (const auto& [k, value] : first)
    if (arrays[k].size() >= 4) std::memcpy(arrays[k].data(), &value, 4);
  if (to03) {  // format 03: the magic, the header without the optimizer's rows, no momentum
    if (!g_v04) return fail("format=03: the file is format 03 already");
    const MetaField* first_optim = nullptr;
    for (const MetaField& f : kMetaFields)
      if (f.part == MetaPart::optim && !first_optim) first_optim = &f;
    header.erase(field_at(*first_optim), kMetaOptimBytes);
    header.replace(0, 8, "XTCKPT03");
    const uint32_t hb = static_cast<uint32_t>(header_bytes - kMetaOptimBytes);
    std::memcpy(header.data() + 8, &hb, 4);
    arrays[3].clear();
  }
  std::string out = header + arrays[0] + arrays[1] + arrays[2] + arrays[3];
  const uint64_t sum = xxh3_64(out.data(), out.size());
  out.append(reinterpret_cast<const char*>(&sum), 8);
  std::ofstream(argv[2], std::ios::binary).write(out.data(), std::streamsize(out.size()));
  return 0;
}
