// Runs a tokenizer.json's pipeline (hf_pipeline.h) as `tokenizers` 0.23 does: added tokens split out
// of the raw text, the normalizer on the rest, added tokens again in the normalized text, the
// pre-tokenizer steps, then the model on each pre-token. Unicode normalization and character
// properties come from ICU (docs/dependencies.md says why).
#include "hf_pipeline.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include <algorithm>

#include <xtrain/core/error.h>

namespace xtrain::bpe {

namespace {

const icu::Normalizer2& normalizer_of(NormalForm form) {
  UErrorCode ec = U_ZERO_ERROR;
  const icu::Normalizer2* n = form == NormalForm::kNFC    ? icu::Normalizer2::getNFCInstance(ec)
                              : form == NormalForm::kNFD  ? icu::Normalizer2::getNFDInstance(ec)
                              : form == NormalForm::kNFKC ? icu::Normalizer2::getNFKCInstance(ec)
                                                          : icu::Normalizer2::getNFKDInstance(ec);
  XT_CHECK(U_SUCCESS(ec) && n != nullptr, "ICU Normalizer2: " << u_errorName(ec));
  return *n;
}

// valid_prefix: bytes of the longest well-formed UTF-8 prefix of s (ICU's U8_NEXT rules).
size_t valid_prefix(std::string_view s) {
  int32_t i = 0;
  const int32_t n = int32_t(s.size());
  while (i < n) {
    const int32_t at = i;
    UChar32 c;
    U8_NEXT(reinterpret_cast<const uint8_t*>(s.data()), i, n, c);
    if (c < 0) return size_t(at);
  }
  return s.size();
}

// Rust regex's \s (White_Space) and \w (Alphabetic, marks, decimal digits, connector punctuation,
// Join_Control): tokenizers' added-token lstrip/rstrip and single_word tests use them.
bool is_space(UChar32 c) { return u_hasBinaryProperty(c, UCHAR_WHITE_SPACE); }
bool is_word(UChar32 c) {
  const int8_t t = u_charType(c);
  return u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL) ||
         t == U_NON_SPACING_MARK || t == U_COMBINING_SPACING_MARK || t == U_ENCLOSING_MARK ||
         t == U_DECIMAL_DIGIT_NUMBER || t == U_CONNECTOR_PUNCTUATION;
}
UChar32 last_char(std::string_view s) {  // < 0 when none or ill-formed
  if (s.empty()) return -1;
  int32_t i = int32_t(s.size());
  UChar32 c;
  U8_PREV(reinterpret_cast<const uint8_t*>(s.data()), 0, i, c);
  return c;
}
UChar32 first_char(std::string_view s) {
  if (s.empty()) return -1;
  int32_t i = 0;
  UChar32 c;
  U8_NEXT(reinterpret_cast<const uint8_t*>(s.data()), i, int32_t(s.size()), c);
  return c;
}
// Where the run of whitespace that ends s starts / the bytes of the run that starts s.
size_t trailing_space_start(std::string_view s) {
  int32_t i = int32_t(s.size());
  while (i > 0) {
    int32_t j = i;
    UChar32 c;
    U8_PREV(reinterpret_cast<const uint8_t*>(s.data()), 0, j, c);
    if (c < 0 || !is_space(c)) break;
    i = j;
  }
  return size_t(i);
}
size_t leading_space_bytes(std::string_view s) {
  int32_t i = 0;
  while (i < int32_t(s.size())) {
    int32_t j = i;
    UChar32 c;
    U8_NEXT(reinterpret_cast<const uint8_t*>(s.data()), j, int32_t(s.size()), c);
    if (c < 0 || !is_space(c)) break;
    i = j;
  }
  return size_t(i);
}

// split_added: AddedVocabulary::find_matches: the tokens found leftmost-longest (aho-corasick's
// LeftmostLongest; the search goes on after a match's own end, also after a discarded one), with
// single_word, lstrip and rstrip applied; text(span) for the text between them, id(token id).
void split_added(std::string_view s, const std::vector<AddedToken>& tokens,
                 const std::function<void(std::string_view)>& text, const std::function<void(int32_t)>& id) {
  if (tokens.empty()) {
    if (!s.empty()) text(s);
    return;
  }
  // next[i]: where tokens[i] occurs next at or after the last search position (tokens are sorted
  // longest first, so the first at the smallest position is the longest there).
  std::vector<size_t> next(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) next[i] = s.find(tokens[i].content);
  size_t search = 0, done = 0;
  while (true) {
    size_t best = std::string_view::npos;
    const AddedToken* hit = nullptr;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (next[i] != s.npos && next[i] < search) next[i] = s.find(tokens[i].content, search);
      if (next[i] < best) best = next[i], hit = &tokens[i];
    }
    if (!hit) break;
    size_t start = best, stop = best + hit->content.size();
    search = stop;
    if (hit->single_word) {
      const UChar32 before = last_char(s.substr(0, start)), after = first_char(s.substr(stop));
      if ((start > 0 && before >= 0 && is_word(before)) || (stop < s.size() && after >= 0 && is_word(after))) continue;
    }
    if (hit->lstrip) start = std::max(trailing_space_start(s.substr(0, start)), done);
    if (hit->rstrip) stop += leading_space_bytes(s.substr(stop));
    if (done < start) text(s.substr(done, start - done));
    id(hit->id);
    done = stop;
  }
  if (done < s.size()) text(s.substr(done));
}

// split_step: one Split (tokenizers' NormalizedString::split with its behaviour, after Invert) as a
// stream: emit(piece) for the non-empty pieces in order.
void split_step(const PreTokenizerStep& st, std::string_view s, const std::function<void(std::string_view)>& emit) {
  bool pending = false, pending_match = false, prev_match = false;
  size_t pb = 0, pe = 0;
  auto out = [&](size_t b, size_t e) {
    if (b < e) emit(s.substr(b, e - b));
  };
  auto flush = [&] {
    if (pending) out(pb, pe);
    pending = false;
  };
  auto hold = [&](size_t b, size_t e, bool m) { pending = true, pb = b, pe = e, pending_match = m; };
  st.regex->find_matches(s, [&](size_t b, size_t e, bool m) {
    m = m != st.invert;
    switch (st.behavior) {
      case SplitBehavior::kRemoved:
        if (!m) out(b, e);
        break;
      case SplitBehavior::kIsolated:
        out(b, e);
        break;
      case SplitBehavior::kMergedWithPrevious:  // a match joins the piece before it, unless that was a match
        if (m && !prev_match && pending) pe = e;
        else flush(), hold(b, e, m);
        break;
      case SplitBehavior::kMergedWithNext:  // a match joins the piece after it, unless that is a match
        if (pending && pending_match && !m) out(pb, e), pending = false;
        else if (m) flush(), hold(b, e, m);
        else flush(), out(b, e);
        break;
      case SplitBehavior::kContiguous:  // runs of matches and runs of non-matches
        if (pending && m == prev_match) pe = e;
        else flush(), hold(b, e, m);
        break;
    }
    prev_match = m;
  });
  flush();
}

}  // namespace

bool normalize_unicode(NormalForm form, std::string_view text, std::string* out) {
  const icu::Normalizer2& n = normalizer_of(form);
  UErrorCode ec = U_ZERO_ERROR;
  const size_t valid = valid_prefix(text);
  if (valid == text.size() && n.isNormalizedUTF8(icu::StringPiece(text.data(), int32_t(text.size())), ec) && U_SUCCESS(ec))
    return false;
  std::string r;
  r.reserve(text.size() + text.size() / 8);
  icu::StringByteSink<std::string> sink(&r);
  for (size_t pos = 0; pos < text.size();) {
    const size_t run = valid_prefix(text.substr(pos));
    if (run > 0) {
      ec = U_ZERO_ERROR;
      n.normalizeUTF8(0, icu::StringPiece(text.data() + pos, int32_t(run)), sink, nullptr, ec);
      XT_CHECK(U_SUCCESS(ec), "ICU normalizeUTF8: " << u_errorName(ec));
      pos += run;
    } else {  // one ill-formed byte, copied
      r.push_back(text[pos++]);
    }
  }
  *out = std::move(r);
  return true;
}

void HfPipeline::encode(std::string_view text, std::vector<int32_t>* out,
                        const std::function<void(std::string_view, const char*)>& model) const {
  out->insert(out->end(), prefix.begin(), prefix.end());
  auto push_id = [out](int32_t id) { out->push_back(id); };
  const char* segment = text.data();  // the raw segment being worked on, for `where`
  auto where = [&](std::string_view piece) {
    return piece.data() >= text.data() && piece.data() <= text.data() + text.size() ? piece.data() : segment;
  };
  std::function<void(size_t, std::string_view)> pre = [&](size_t k, std::string_view piece) {
    if (piece.empty()) return;
    if (k == steps.size()) return model(piece, where(piece));
    const PreTokenizerStep& st = steps[k];
    std::string spaced;
    if (st.add_prefix_space && piece[0] != ' ') piece = spaced = " " + std::string(piece);
    if (!st.regex) return pre(k + 1, piece);
    split_step(st, piece, [&](std::string_view sub) { pre(k + 1, sub); });
  };
  split_added(text, added_raw, [&](std::string_view raw) {
    segment = raw.data();
    std::string normalized, next;
    std::string_view s = raw;
    for (NormalForm f : normalizers)
      if (normalize_unicode(f, s, &next)) normalized.swap(next), s = normalized;
    split_added(s, added_normalized, [&](std::string_view piece) { pre(0, piece); }, push_id);
  }, push_id);
  out->insert(out->end(), suffix.begin(), suffix.end());
}

}  // namespace xtrain::bpe
