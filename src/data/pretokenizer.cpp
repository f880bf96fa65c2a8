// GPT-2's pre-tokenizer regex through PCRE2 (see bpe.h for the pattern and the invalid-UTF-8 rule).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "bpe.h"
#include <xtrain/core/error.h>

namespace xtrain::bpe {

namespace {

// openai/gpt-2 src/encoder.py; tiktoken's "gpt2" pattern is the same language written with
// possessive quantifiers and `'(?:[sdmt]|ll|ve|re)`.
constexpr const char* kPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  const int n = pcre2_get_error_message(code, buf, sizeof(buf));
  return n < 0 ? "PCRE2 error " + std::to_string(code) : std::string(reinterpret_cast<char*>(buf), size_t(n));
}

struct MatchData {
  pcre2_match_data* md;
  explicit MatchData(const pcre2_code* re) : md(pcre2_match_data_create_from_pattern(re, nullptr)) {
    XT_CHECK(md != nullptr, "pcre2_match_data_create_from_pattern: out of memory");
  }
  ~MatchData() { pcre2_match_data_free(md); }
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
};

}  // namespace

struct PreTokenizer::Code {
  pcre2_code* re = nullptr;
  ~Code() { pcre2_code_free(re); }
};

const char* PreTokenizer::gpt2_pattern() { return kPattern; }

PreTokenizer::PreTokenizer(bool use_jit, size_t window_bytes) : PreTokenizer(kPattern, use_jit, window_bytes) {}

PreTokenizer::PreTokenizer(const std::string& pattern, bool use_jit, size_t window_bytes)
    : code_(std::make_unique<Code>()), window_bytes_(window_bytes) {
  XT_CHECK(window_bytes_ > kWindowMarginBytes, "window " << window_bytes_ << " must exceed the margin");
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  // DOLLAR_ENDONLY: `$` (cl100k's `\s++$`) is the end of the text as in tiktoken's regex engine, not
  // also before a final newline (PCRE2's default). The GPT-2 pattern has no `$`.
  code_->re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                            PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY, &err, &err_offset,
                            nullptr);
  XT_CHECK(code_->re != nullptr, "split pattern: pcre2_compile at offset " << err_offset << ": " << pcre2_message(err));
  uint32_t have_jit = 0;
  pcre2_config(PCRE2_CONFIG_JIT, &have_jit);
  // JIT is an optimisation only: when it is unavailable or fails, pcre2_match interprets.
  if (use_jit && have_jit) jit_ = pcre2_jit_compile(code_->re, PCRE2_JIT_COMPLETE) == 0;
}

PreTokenizer::~PreTokenizer() = default;

// first_match: the first match in `rest` as [*start, *end); false when there is none (only invalid
// UTF-8 is left). The interpreter scans the whole subject for invalid UTF-8 on every call (JIT does
// not), which makes one call per piece quadratic in the text length; so the interpreter sees a
// window of the text. A match is accepted only when it ends kWindowMarginBytes before the window's
// end: every alternative decides within 3 characters of where it starts or of where its match ends
// (contractions, the optional space plus one class character, the one-character lookahead), so such
// a match is the one the whole text gives. Otherwise the window doubles.
bool PreTokenizer::first_match(std::string_view rest, void* match_data, size_t* start, size_t* end) const {
  auto* md = static_cast<pcre2_match_data*>(match_data);
  for (size_t window = jit_ ? rest.size() : window_bytes_;; window *= 2) {
    const size_t len = std::min(window, rest.size());
    const int rc = pcre2_match(code_->re, reinterpret_cast<PCRE2_SPTR>(rest.data()), len, 0, 0, md, nullptr);
    XT_CHECK(rc > 0 || rc == PCRE2_ERROR_NOMATCH, "pcre2_match: " << pcre2_message(rc));
    const bool whole = len == rest.size();
    if (rc > 0) {
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      if (whole || ov[1] + kWindowMarginBytes <= len) {
        *start = ov[0];
        *end = ov[1];
        XT_CHECK(*end > *start && *end <= len, "empty or out-of-range pre-token match");
        return true;
      }
    } else if (whole) {
      return false;
    }
  }
}

void PreTokenizer::split(std::string_view text, const std::function<void(std::string_view)>& fn) const {
  if (text.empty()) return;
  MatchData data(code_->re);
  while (!text.empty()) {
    size_t start = 0, end = 0;
    if (!first_match(text, data.md, &start, &end)) {  // only invalid UTF-8 is left
      fn(text);
      return;
    }
    if (start > 0) fn(text.substr(0, start));  // bytes skipped as invalid UTF-8
    fn(text.substr(start, end - start));
    text.remove_prefix(end);
  }
}

struct SplitRegex::Code {
  pcre2_code* re = nullptr;
  std::string what;  // names the pattern in messages
  ~Code() { pcre2_code_free(re); }
};

SplitRegex::SplitRegex(const std::string& pattern, bool literal, const std::string& what)
    : code_(std::make_unique<Code>()) {
  code_->what = what;
  // Ruby syntax: `^`/`$` at line starts and ends (newline = LF), `.` not across a newline.
  pcre2_compile_context* ctx = pcre2_compile_context_create(nullptr);
  XT_CHECK(ctx != nullptr, "pcre2_compile_context_create: out of memory");
  pcre2_set_newline(ctx, PCRE2_NEWLINE_LF);
  const uint32_t options = literal ? PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | PCRE2_LITERAL
                                   : PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_MULTILINE;
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  code_->re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &err, &err_offset, ctx);
  pcre2_compile_context_free(ctx);
  if (code_->re == nullptr) XT_FAIL(what << ": pcre2_compile at offset " << err_offset << ": " << pcre2_message(err));
  uint32_t have_jit = 0;
  pcre2_config(PCRE2_CONFIG_JIT, &have_jit);
  if (have_jit) pcre2_jit_compile(code_->re, PCRE2_JIT_COMPLETE);  // an optimisation only, as above
}

SplitRegex::~SplitRegex() = default;

void SplitRegex::find_matches(std::string_view text, const std::function<void(size_t, size_t, bool)>& fn) const {
  MatchData data(code_->re);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t prev = 0, from = 0, last_end = std::string_view::npos;
  while (from <= text.size()) {
    const int rc = pcre2_match(code_->re, subject, text.size(), from, 0, data.md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc <= 0)  // e.g. PCRE2's match limit: a pattern that backtracks without bound on this text
      XT_FAIL(code_->what << ": the pattern failed on the text at byte " << from << " of a " << text.size()
                          << "-byte piece: " << pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
    const size_t start = ov[0], end = ov[1];
    if (start == end) {
      // Move on one character (one byte inside invalid UTF-8); an empty match right where the last
      // match ended is not one (the regex crates' find_iter rule).
      size_t next = start + 1;
      while (next < text.size() && (uint8_t(text[next]) & 0xC0) == 0x80) ++next;
      if (start != last_end) {
        if (prev < start) fn(prev, start, false);
        fn(start, start, true);
        prev = start;
      }
      from = next;
      continue;
    }
    if (prev < start) fn(prev, start, false);
    fn(start, end, true);
    prev = from = last_end = end;
  }
  if (prev < text.size()) fn(prev, text.size(), false);
}

}  // namespace xtrain::bpe
