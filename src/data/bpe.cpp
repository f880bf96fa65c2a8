// GPT-2's byte <-> unicode alphabet and the byte-pair merge of one pre-token (see bpe.h).
#include "bpe.h"

#include <queue>

namespace xtrain::bpe {

const std::array<char32_t, 256>& byte_to_unicode() {
  // Derived exactly as encoder.py's bytes_to_unicode(): bytes that are printable in Latin-1 keep
  // their code point; the rest are shifted to 256 + n in increasing byte order, so that no token
  // string contains whitespace or control characters.
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); };
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) t[b] = printable(b) ? char32_t(b) : next++;
    return t;
  }();
  return table;
}

namespace {

// Inverse of byte_to_unicode(): code point -> byte, -1 for code points outside the alphabet.
// The largest code point used is 256 + 67 = U+0143 ('Ń').
constexpr int kAlphabetEnd = 256 + 68;
const std::array<int16_t, kAlphabetEnd>& unicode_to_byte() {
  static const std::array<int16_t, kAlphabetEnd> table = [] {
    std::array<int16_t, kAlphabetEnd> t{};
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_to_unicode()[b]] = int16_t(b);
    return t;
  }();
  return table;
}

// Decodes one UTF-8 code point at s[*i] (advancing *i); false for a malformed sequence.
bool next_code_point(std::string_view s, size_t* i, char32_t* cp) {
  const auto c0 = uint8_t(s[*i]);
  int len = c0 < 0x80 ? 1 : (c0 >> 5) == 0x6 ? 2 : (c0 >> 4) == 0xE ? 3 : (c0 >> 3) == 0x1E ? 4 : 0;
  if (len == 0 || *i + len > s.size()) return false;
  char32_t v = len == 1 ? c0 : c0 & (0x7F >> len);
  for (int k = 1; k < len; ++k) {
    const auto c = uint8_t(s[*i + k]);
    if ((c & 0xC0) != 0x80) return false;
    v = (v << 6) | (c & 0x3F);
  }
  *i += len;
  *cp = v;
  return true;
}

}  // namespace

bool token_text_to_bytes(std::string_view text, std::string* bytes) {
  bytes->clear();
  for (size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    if (!next_code_point(text, &i, &cp) || cp >= char32_t(kAlphabetEnd)) return false;
    const int b = unicode_to_byte()[cp];
    if (b < 0) return false;
    bytes->push_back(char(b));
  }
  return true;
}

Merger::Merger(const std::array<int32_t, 256>& byte_ids, const std::vector<std::array<int32_t, 3>>& merges,
               const std::vector<std::string>& token_bytes, PairRule rule, const std::vector<int32_t>& whole_ids)
    : byte_ids_(byte_ids) {
  pairs_.reserve(merges.size() * (rule == PairRule::kAnySplit ? 4 : 1));
  if (rule == PairRule::kListed) {
    for (size_t rank = 0; rank < merges.size(); ++rank)
      pairs_.insert_or_assign(key(merges[rank][0], merges[rank][1]), RankId{int32_t(rank), merges[rank][2]});
  } else {
    // The mergeable tokens (tiktoken's mergeable_ranks): the 256 bytes and every merge result.
    std::unordered_map<std::string_view, int32_t> mergeable;
    mergeable.reserve(256 + merges.size());
    for (int32_t id : byte_ids) mergeable.emplace(token_bytes[id], id);
    for (const auto& m : merges) mergeable.emplace(token_bytes[m[2]], m[2]);
    // Register every split of every merged token; the first (lowest) rank wins.
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const int32_t id = merges[rank][2];
      const std::string_view s = token_bytes[id];
      for (size_t k = 1; k < s.size(); ++k) {
        auto l = mergeable.find(s.substr(0, k));
        auto r = mergeable.find(s.substr(k));
        if (l != mergeable.end() && r != mergeable.end())
          pairs_.emplace(key(l->second, r->second), RankId{int32_t(rank), id});
      }
    }
  }
  whole_.reserve(whole_ids.size());
  for (int32_t id : whole_ids) whole_.emplace(token_bytes[size_t(id)], id);
}

Merger::Tables Merger::tables() const {
  Tables t;
  t.byte_ids = byte_ids_;
  t.pairs.reserve(pairs_.size());
  for (const auto& [k, v] : pairs_) t.pairs.push_back({int32_t(uint32_t(k >> 32)), int32_t(uint32_t(k)), v.rank, v.id});
  t.whole.assign(whole_.begin(), whole_.end());
  return t;
}

Merger::Merger(const Tables& t) : byte_ids_(t.byte_ids) {
  pairs_.reserve(t.pairs.size());
  for (const auto& p : t.pairs) pairs_.emplace(key(p[0], p[1]), RankId{p[2], p[3]});
  whole_.reserve(t.whole.size());
  for (const auto& [bytes, id] : t.whole) whole_.emplace(bytes, id);
}

void Merger::merge(std::string_view piece, std::vector<int32_t>* out) const {
  const int n = int(piece.size());
  if (n == 1) {
    out->push_back(byte_ids_[uint8_t(piece[0])]);
    return;
  }
  if (!whole_.empty()) {
    auto it = whole_.find(std::string(piece));
    if (it != whole_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  // Symbols form a linked list indexed by their first byte; a merge keeps the left symbol.
  struct Sym {
    int32_t id, prev, next;
  };
  std::vector<Sym> sym(n);
  for (int i = 0; i < n; ++i) sym[i] = {byte_ids_[uint8_t(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};
  // Candidate merges, lowest rank first and leftmost on ties (tiktoken's order). Entries go stale
  // when a neighbour merges; they are recognised by the ids recorded at push time.
  struct Cand {
    int32_t rank, pos, left, right, id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int l) {
    if (l < 0 || sym[l].next < 0) return;
    const int r = sym[l].next;
    auto it = pairs_.find(key(sym[l].id, sym[r].id));
    if (it != pairs_.end()) heap.push({it->second.rank, l, sym[l].id, sym[r].id, it->second.id});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    const int l = c.pos, r = sym[l].next;
    if (sym[l].id != c.left || r < 0 || sym[r].id != c.right) continue;  // stale
    sym[l].id = c.id;
    sym[l].next = sym[r].next;
    if (sym[r].next >= 0) sym[sym[r].next].prev = l;
    sym[r].id = -1;
    push(sym[l].prev);
    push(l);
  }
  for (int i = 0; i >= 0; i = sym[i].next) out->push_back(sym[i].id);
}

}  // namespace xtrain::bpe
