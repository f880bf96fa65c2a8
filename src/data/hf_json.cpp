// Reading a Hugging Face tokenizer.json: the BPE model's vocabulary and merges (bpe::RawVocab) and
// its pipeline (hf_pipeline.h), each field either honoured exactly as `tokenizers` 0.23 does or
// refused with one line naming its JSON path and value.
#include <algorithm>
#include <climits>
#include <unordered_map>
#include <unordered_set>

#include "bpe.h"
#include "core/echo.h"
#include <xtrain/core/error.h>
#include "core/json.h"
#include <xtrain/data/tokenizer.h>
#include "hf_pipeline.h"

namespace xtrain {

namespace bpe {

namespace {

[[noreturn]] void refuse(const std::string& f, const std::string& path, const nlohmann::json& v, const std::string& why) {
  // an object is named by its "type" where it has one (the echo of an object gives only its size)
  const bool typed = v.is_object() && v.contains("type") && v["type"].is_string();
  XT_FAIL(f << ": " << echo_value(path) << " = " << json_echo(v)
            << (typed ? " of type \"" + echo_value(v["type"].get<std::string>()) + "\"" : std::string())
            << " is not supported (" << why << ")");
}

// only_keys: every field of `obj` is one of `keys`; another may change the ids, so it is refused.
void only_keys(const std::string& f, const nlohmann::json& obj, const std::string& path,
               std::initializer_list<const char*> keys) {
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (std::none_of(keys.begin(), keys.end(), [&](const char* k) { return it.key() == k; }))
      refuse(f, path + "." + it.key(), it.value(), "unknown field: it may change the ids");
}

bool flag(const std::string& f, const nlohmann::json& obj, const std::string& path, const char* key, bool dflt) {
  if (!obj.contains(key) || obj[key].is_null()) return dflt;
  if (!obj[key].is_boolean()) refuse(f, path + "." + key, obj[key], "expected true or false");
  return obj[key].get<bool>();
}

std::string type_of(const std::string& f, const nlohmann::json& obj, const std::string& path, const char* what) {
  if (!obj.is_object() || !obj.contains("type") || !obj["type"].is_string())
    refuse(f, path, obj, std::string("expected a ") + what + " object with a \"type\"");
  return obj["type"].get<std::string>();
}

const nlohmann::json& array_of(const std::string& f, const nlohmann::json& obj, const std::string& path, const char* key) {
  if (!obj.contains(key) || !obj[key].is_array()) refuse(f, path + "." + key, obj.value(key, nlohmann::json()), "expected an array");
  return obj[key];
}

// too_many_steps: why a chain longer than kMaxPipelineSteps is refused.
std::string too_many_steps() {
  return "more than " + std::to_string(kMaxPipelineSteps) +
         " steps of one kind, nested Sequences counted flat; real tokenizers chain at most five";
}

// read_sequence: a "Sequence" step (normalizer, pre-tokenizer or post-processor): its only other field
// `key` is an array whose items read_item(item, item_path) reads in order.
template <class ReadItem>
void read_sequence(const std::string& f, const nlohmann::json& obj, const std::string& path, const char* key,
                   const ReadItem& read_item) {
  only_keys(f, obj, path, {"type", key});
  const auto& list = array_of(f, obj, path, key);
  if (list.size() > kMaxPipelineSteps) refuse(f, path + "." + key, list, too_many_steps());
  for (size_t i = 0; i < list.size(); ++i) read_item(list[i], path + "." + key + "[" + std::to_string(i) + "]");
}

void read_normalizer(const std::string& f, const nlohmann::json& n, const std::string& path, HfPipeline* p) {
  if (n.is_null()) return;
  const std::string type = type_of(f, n, path, "normalizer");
  if (type == "Sequence") {
    read_sequence(f, n, path, "normalizers", [&](const nlohmann::json& item, const std::string& at) {
      read_normalizer(f, item, at, p);
    });
    return;
  }
  const NormalForm forms[] = {NormalForm::kNFC, NormalForm::kNFD, NormalForm::kNFKC, NormalForm::kNFKD};
  const char* names[] = {"NFC", "NFD", "NFKC", "NFKD"};
  for (int i = 0; i < 4; ++i)
    if (type == names[i]) {
      only_keys(f, n, path, {"type"});
      if (p->normalizers.size() == kMaxPipelineSteps) refuse(f, path, n, too_many_steps());
      p->normalizers.push_back(forms[i]);
      return;
    }
  refuse(f, path, n, "implemented normalizers: NFC, NFD, NFKC, NFKD and a Sequence of them");
}

void read_pre_tokenizer(const std::string& f, const nlohmann::json& t, const std::string& path, HfPipeline* p) {
  const std::string type = type_of(f, t, path, "pre-tokenizer");
  if (type == "Sequence") {
    read_sequence(f, t, path, "pretokenizers", [&](const nlohmann::json& item, const std::string& at) {
      read_pre_tokenizer(f, item, at, p);
    });
    return;
  }
  // before any pattern is compiled: encode nests one call per step (hf_pipeline.cpp)
  if (p->steps.size() == kMaxPipelineSteps) refuse(f, path, t, too_many_steps());
  PreTokenizerStep st;
  if (type == "ByteLevel") {
    only_keys(f, t, path, {"type", "add_prefix_space", "trim_offsets", "use_regex"});
    st.add_prefix_space = flag(f, t, path, "add_prefix_space", true);
    if (flag(f, t, path, "use_regex", true)) st.regex = std::make_unique<SplitRegex>(PreTokenizer::gpt2_pattern(), false, f + ": " + path);
    st.byte_level = true;
    p->steps.push_back(std::move(st));
    return;
  }
  if (type != "Split") refuse(f, path, t, "implemented pre-tokenizers: ByteLevel, Split and a Sequence of them");
  only_keys(f, t, path, {"type", "pattern", "behavior", "invert"});
  const nlohmann::json& pat = t.value("pattern", nlohmann::json());
  const bool regex = pat.is_object() && pat.size() == 1 && pat.contains("Regex") && pat["Regex"].is_string();
  const bool literal = pat.is_object() && pat.size() == 1 && pat.contains("String") && pat["String"].is_string();
  if (!regex && !literal) refuse(f, path + ".pattern", pat, "expected {\"Regex\": ...} or {\"String\": ...}");
  st.regex = std::make_unique<SplitRegex>(pat.begin().value().get<std::string>(), literal, f + ": " + path + ".pattern");
  const nlohmann::json& b = t.value("behavior", nlohmann::json());
  const char* names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
  const SplitBehavior kinds[] = {SplitBehavior::kRemoved, SplitBehavior::kIsolated, SplitBehavior::kMergedWithPrevious,
                                 SplitBehavior::kMergedWithNext, SplitBehavior::kContiguous};
  int k = -1;
  for (int i = 0; i < 5; ++i)
    if (b.is_string() && b.get<std::string>() == names[i]) k = i;
  if (k < 0) refuse(f, path + ".behavior", b, "expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous");
  st.behavior = kinds[k];
  st.invert = flag(f, t, path, "invert", false);
  p->steps.push_back(std::move(st));
}

// read_template: TemplateProcessing's single template: the ids before and after sequence A.
void read_template(const std::string& f, const nlohmann::json& t, const std::string& path, HfPipeline* p) {
  only_keys(f, t, path, {"type", "single", "pair", "special_tokens"});
  const auto& single = array_of(f, t, path, "single");
  const nlohmann::json specials = t.value("special_tokens", nlohmann::json::object());
  std::vector<int32_t> before, after;
  int sequences = 0;
  for (size_t i = 0; i < single.size(); ++i) {
    const nlohmann::json& item = single[i];
    const std::string where = path + ".single[" + std::to_string(i) + "]";
    if (item.is_object() && item.size() == 1 && item.contains("Sequence") && item["Sequence"].is_object()) {
      if (item["Sequence"].value("id", "") != "A") refuse(f, where, item, "a single template holds sequence A only");
      ++sequences;
      continue;
    }
    if (!item.is_object() || item.size() != 1 || !item.contains("SpecialToken") || !item["SpecialToken"].is_object() ||
        !item["SpecialToken"].contains("id") || !item["SpecialToken"]["id"].is_string())
      refuse(f, where, item, "expected {\"SpecialToken\": {\"id\": ...}} or {\"Sequence\": {\"id\": \"A\"}}");
    const std::string name = item["SpecialToken"]["id"].get<std::string>();
    if (!specials.is_object() || !specials.contains(name) || !specials[name].is_object() ||
        !specials[name].contains("ids") || !specials[name]["ids"].is_array())
      refuse(f, where, item, "its token is not in special_tokens with \"ids\"");
    for (const auto& id : specials[name]["ids"]) {
      if (!id.is_number_unsigned() || id.get<uint64_t>() > uint64_t(INT32_MAX))
        refuse(f, path + ".special_tokens", specials[name], "ids must be token ids");
      (sequences ? after : before).push_back(id.get<int32_t>());
    }
  }
  if (sequences != 1) refuse(f, path + ".single", single, "a single template holds sequence A exactly once");
  p->prefix.insert(p->prefix.begin(), before.begin(), before.end());  // an earlier processor's ids are inside
  p->suffix.insert(p->suffix.end(), after.begin(), after.end());
}

// read_post_processor: *count: the processors read so far (nested Sequences counted flat).
void read_post_processor(const std::string& f, const nlohmann::json& t, const std::string& path, HfPipeline* p,
                         size_t* count) {
  if (t.is_null()) return;
  const std::string type = type_of(f, t, path, "post-processor");
  if (type != "Sequence" && (*count)++ == kMaxPipelineSteps) refuse(f, path, t, too_many_steps());
  if (type == "Sequence") {
    read_sequence(f, t, path, "processors", [&](const nlohmann::json& item, const std::string& at) {
      read_post_processor(f, item, at, p, count);
    });
  } else if (type == "ByteLevel") {  // offsets only
    only_keys(f, t, path, {"type", "add_prefix_space", "trim_offsets", "use_regex"});
  } else if (type == "TemplateProcessing") {
    read_template(f, t, path, p);
  } else {
    refuse(f, path, t, "implemented post-processors: ByteLevel, TemplateProcessing and a Sequence of them");
  }
}

}  // namespace

std::vector<int32_t> added_token_ids(const nlohmann::json& root, const std::string& f) {
  std::vector<int32_t> ids;
  if (!root.contains("added_tokens")) return ids;
  const nlohmann::json& list = root["added_tokens"];
  if (!list.is_array()) refuse(f, "added_tokens", list, "expected an array; tokenizers refuses the file");
  static const nlohmann::json none;
  const nlohmann::json& model = root.contains("model") ? root["model"] : none;
  const nlohmann::json& vocab = model.is_object() && model.contains("vocab") ? model["vocab"] : none;
  const int64_t vocab_size = vocab.is_object() ? int64_t(vocab.size()) : 0;  // tokenizers' get_vocab_size
  std::unordered_map<std::string, int32_t> id_of;  // content -> id (tokenizers' added_tokens_map)
  int64_t max_id = -1;                             // the largest id in id_of
  for (const auto& t : list) {
    if (!t.is_object() || !t.contains("id") || !t.contains("content") || !t["id"].is_number_integer() ||
        !t["content"].is_string())
      XT_FAIL(f << ": added_tokens entry without integer \"id\" and string \"content\": " << json_echo(t));
    const std::string& content = t["content"].get_ref<const std::string&>();
    const int32_t file_id = id_value(t["id"], f + ": added_tokens entry " + json_echo(t["content"]));
    if (content.empty()) {  // tokenizers ignores an empty added token
      ids.push_back(-1);
      continue;
    }
    const auto seen = id_of.find(content);
    int64_t id = 0;
    if (seen != id_of.end()) {
      // One string with two ids: tokenizers keeps the first entry's and drops the other, so its
      // vocabulary is smaller than the file's ids say; xtrain refuses rather than guess either size.
      if (seen->second != file_id)
        XT_FAIL(f << ": added_tokens lists \"" << echo_value(content) << "\" twice, with ids " << seen->second << " and "
                  << file_id << " (tokenizers keeps " << seen->second << " and drops " << file_id
                  << "; give each string one id)");
      id = seen->second;
    } else if (vocab.is_object() && vocab.contains(content)) {
      id = id_value(vocab[content], f + ": model.vocab entry " + json_echo(t["content"]));  // the vocabulary's id
    } else {
      id = max_id >= vocab_size || vocab_size == 0 ? max_id + 1 : vocab_size;
      if (id > INT32_MAX) XT_FAIL(f << ": added_tokens entry " << json_echo(t["content"]) << " would get id " << id);
    }
    id_of.emplace(content, int32_t(id));
    max_id = std::max(max_id, id);
    ids.push_back(int32_t(id));
  }
  return ids;
}

HfPipeline read_hf_pipeline(const nlohmann::json& root, const std::string& f) {
  return read_hf_pipeline(root, f, added_token_ids(root, f));
}

nlohmann::json hf_pipeline_source(const nlohmann::json& root) {
  nlohmann::json out = nlohmann::json::object();
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() != "model" || !it.value().is_object()) {
      out[it.key()] = it.value();
      continue;
    }
    nlohmann::json& model = out["model"] = nlohmann::json::object();
    for (auto m = it.value().begin(); m != it.value().end(); ++m)
      if (m.key() != "vocab" && m.key() != "merges") model[m.key()] = m.value();
  }
  return out;
}

std::vector<std::pair<std::string, int32_t>> hf_added_specials(const nlohmann::json& root, const std::vector<int32_t>& added_ids) {
  std::vector<std::pair<std::string, int32_t>> specials;
  std::unordered_set<std::string> added;  // an entry repeated (same string, same id) counts once
  for (size_t i = 0; i < added_ids.size(); ++i) {
    const std::string& content = root["added_tokens"][i]["content"].get_ref<const std::string&>();
    if (added_ids[i] >= 0 && added.insert(content).second) specials.emplace_back(content, added_ids[i]);
  }
  return specials;
}

HfPipeline read_hf_pipeline(const nlohmann::json& root, const std::string& f, const std::vector<int32_t>& added_ids) {
  HfPipeline p;
  const size_t listed = root.contains("added_tokens") && root["added_tokens"].is_array() ? root["added_tokens"].size() : 0;
  if (added_ids.size() != listed) XT_FAIL(f << ": " << added_ids.size() << " added token ids for " << listed << " added_tokens");
  only_keys(f, root, "tokenizer", {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer",
                                   "post_processor", "decoder", "model"});
  for (const char* k : {"truncation", "padding"})
    if (root.contains(k) && !root[k].is_null()) refuse(f, k, root[k], "it changes the ids; only null is implemented");
  read_normalizer(f, root.value("normalizer", nlohmann::json()), "normalizer", &p);
  const nlohmann::json& pre = root.value("pre_tokenizer", nlohmann::json());
  if (pre.is_null()) refuse(f, "pre_tokenizer", pre, "the vocabulary is byte-level: a ByteLevel pre-tokenizer is needed");
  read_pre_tokenizer(f, pre, "pre_tokenizer", &p);
  size_t processors = 0;
  read_post_processor(f, root.value("post_processor", nlohmann::json()), "post_processor", &p, &processors);

  const nlohmann::json& model = root["model"];
  only_keys(f, model, "model", {"type", "vocab", "merges", "dropout", "unk_token", "continuing_subword_prefix",
                                "end_of_word_suffix", "fuse_unk", "byte_fallback", "ignore_merges"});
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"] != 0)
    refuse(f, "model.dropout", model["dropout"], "BPE dropout makes the ids random");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(k) && !model[k].is_null() && model[k] != "")
      refuse(f, std::string("model.") + k, model[k], "only an empty affix is implemented");
  if (flag(f, model, "model", "byte_fallback", false))
    refuse(f, "model.byte_fallback", model["byte_fallback"], "byte fallback goes with a non-byte-level vocabulary");
  p.ignore_merges = flag(f, model, "model", "ignore_merges", false);

  for (size_t i = 0; i < added_ids.size(); ++i) {
    const nlohmann::json& t = root["added_tokens"][i];
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    only_keys(f, t, where, {"id", "content", "special", "single_word", "lstrip", "rstrip", "normalized"});
    AddedToken a;
    a.content = t["content"].get<std::string>();
    a.id = added_ids[i];
    a.single_word = flag(f, t, where, "single_word", false);
    a.lstrip = flag(f, t, where, "lstrip", false);
    a.rstrip = flag(f, t, where, "rstrip", false);
    a.normalized = flag(f, t, where, "normalized", !flag(f, t, where, "special", false));
    if (a.id < 0) continue;  // an empty content: tokenizers ignores it
    std::string n;
    if (a.normalized)
      for (NormalForm form : p.normalizers)
        if (normalize_unicode(form, a.content, &n)) a.content = n;
    (a.normalized ? p.added_normalized : p.added_raw).push_back(std::move(a));
  }
  // Longest first: the first token found at the smallest position is then the longest there.
  for (auto* list : {&p.added_raw, &p.added_normalized})
    std::stable_sort(list->begin(), list->end(), [](const auto& x, const auto& y) { return x.content.size() > y.content.size(); });

  // The model works on bytes, so exactly one ByteLevel step, the last one (a Split after it would see
  // ByteLevel's characters, not the text).
  const auto byte_levels = std::count_if(p.steps.begin(), p.steps.end(), [](const auto& st) { return st.byte_level; });
  if (byte_levels != 1 || !p.steps.back().byte_level)
    refuse(f, "pre_tokenizer", pre, "the vocabulary is byte-level: exactly one ByteLevel step, the last, is implemented");

  // GPT-2's pipeline (what the fingerprint has always covered implicitly) or the settings in full.
  // Without a normalizer, tokens matched in one pass (all raw or all "normalized") are literal matches.
  auto plain = [](const std::vector<AddedToken>& list) {
    return std::all_of(list.begin(), list.end(), [](const AddedToken& a) { return !a.single_word && !a.lstrip && !a.rstrip; });
  };
  const bool gpt2 = p.normalizers.empty() && p.steps.size() == 1 && p.steps[0].regex && !p.steps[0].add_prefix_space &&
                    p.prefix.empty() && p.suffix.empty() && !p.ignore_merges && plain(p.added_raw) &&
                    plain(p.added_normalized) && (p.added_raw.empty() || p.added_normalized.empty());
  if (!gpt2) {
    nlohmann::json d = {{"normalizer", root.value("normalizer", nlohmann::json())}, {"pre_tokenizer", pre},
                        {"post_processor", root.value("post_processor", nlohmann::json())},
                        {"ignore_merges", p.ignore_merges}, {"added_tokens", root.value("added_tokens", nlohmann::json())}};
    p.description = d.dump();
  }
  return p;
}

}  // namespace bpe

Tokenizer Tokenizer::from_hf_json(const std::string& tokenizer_json) {
  return from_hf_json_bytes(tokenizer_json, read_json_text(tokenizer_json));
}

Tokenizer Tokenizer::from_hf_json_bytes(const std::string& tokenizer_json, std::string_view bytes) {
  const std::string& f = tokenizer_json;
  const nlohmann::json root = parse_json_file_bytes(f, bytes);  // bounded (core/json.h)
  bpe::RawVocab raw;
  raw.file = f;
  if (!root.is_object() || !root.contains("model") || !root["model"].is_object())
    XT_FAIL(f << ": no \"model\" object (not a Hugging Face tokenizer.json?)");
  const auto& model = root["model"];
  if (model.contains("type") && model["type"] != "BPE")
    XT_FAIL(f << ": model.type is " << json_echo(model["type"]) << ", expected \"BPE\"");
  if (!model.contains("vocab") || !model.contains("merges") || !model["merges"].is_array())
    XT_FAIL(f << ": model needs \"vocab\" and a \"merges\" array");
  const std::vector<int32_t> added_ids = bpe::added_token_ids(root, f);
  raw.specials = bpe::hf_added_specials(root, added_ids);
  auto pipeline = std::make_unique<bpe::HfPipeline>(bpe::read_hf_pipeline(root, f, added_ids));
  pipeline->source = bpe::hf_pipeline_source(root).dump();
  pipeline->added_ids = added_ids;
  bpe::read_vocab_object(model["vocab"], f, "model.vocab", &raw);
  const auto& merges = model["merges"];
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& m = merges[i];
    const std::string where = f + ": model.merges[" + std::to_string(i) + "]";
    if (m.is_string()) {  // "left right" (tokenizers < 0.20)
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        XT_FAIL(where << " \"" << echo_value(s) << "\" is not \"left right\"");
      raw.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["left", "right"]
      raw.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      XT_FAIL(where << " is neither \"left right\" nor [left, right]: " << json_echo(m));
    }
    raw.merge_where.push_back(where);
  }
  raw.rule = bpe::PairRule::kListed;  // tokenizers' BPE model
  raw.whole_piece_first = pipeline->ignore_merges;
  raw.pipeline = pipeline->description;
  std::vector<int32_t> template_ids = pipeline->prefix;
  template_ids.insert(template_ids.end(), pipeline->suffix.begin(), pipeline->suffix.end());
  Tokenizer tok = from_raw(raw, std::move(pipeline));
  for (int32_t id : template_ids)  // the template's ids go into every encoding: each must be a token
    if (id >= tok.vocab_size())
      XT_FAIL(f << ": post_processor: TemplateProcessing's id " << id << " is outside the vocabulary [0, "
                << tok.vocab_size() << ")");
  return tok;
}

}  // namespace xtrain
