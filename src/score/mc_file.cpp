// Reading multiple-choice files (see include/xtrain/score/multiple_choice.h): HellaSwag's JSON lines as
// published and a generic form, plain or .zst; every refusal names the file, the line and the field.
#include <xtrain/score/multiple_choice.h>

#include <string>

#include "core/json.h"
#include <xtrain/core/error.h>
#include "data/jsonl.h"

namespace xtrain {

namespace {

// Line: one line's object and where it is, for messages "<path>:<line>: <field>: <cause>".
struct Line {
  const nlohmann::json& obj;
  const std::string& path;
  size_t no;
  [[noreturn]] void fail(const std::string& field, const std::string& cause) const {
    XT_FAIL(path << ":" << no << ": " << field << ": " << cause);
  }
  bool has(const char* field) const { return obj.contains(field); }
  std::string text(const std::string& field) const {
    if (!obj.contains(field)) fail(field, "missing");
    const nlohmann::json& v = obj.at(field);
    if (!v.is_string()) fail(field, "must be a string, got " + json_echo(v));
    return v.get<std::string>();
  }
  std::vector<std::string> texts(const std::string& field) const {
    if (!obj.contains(field)) fail(field, "missing");
    const nlohmann::json& v = obj.at(field);
    if (!v.is_array()) fail(field, "must be an array of strings, got " + json_echo(v));
    std::vector<std::string> out;
    for (size_t k = 0; k < v.size(); ++k) {
      if (!v[k].is_string()) fail(field + "[" + std::to_string(k) + "]", "must be a string, got " + json_echo(v[k]));
      out.push_back(v[k].get<std::string>());
    }
    return out;
  }
  // index: an integer, or (HellaSwag's Hugging Face copy) its decimal text.
  long long index(const std::string& field) const {
    if (!obj.contains(field)) fail(field, "missing");
    const nlohmann::json& v = obj.at(field);
    if (v.is_number_integer()) return v.get<long long>();
    if (v.is_string()) {
      const std::string s = v.get<std::string>();
      if (!s.empty() && s.size() <= 9 && s.find_first_not_of("0123456789") == std::string::npos) return std::stoll(s);
    }
    fail(field, "must be an integer index, got " + json_echo(v));
  }
};

McItem parse_item(const Line& l) {
  McItem it;
  it.line = l.no;
  const bool hellaswag = l.has("endings");
  const char* choices = hellaswag ? "endings" : "choices";
  const char* label = hellaswag ? "label" : "answer";
  const char* context = hellaswag ? "ctx" : "context";
  if (hellaswag && !l.has("ctx") && l.has("ctx_a")) {  // the dataset's own join of its two parts
    const std::string b = l.text("ctx_b");
    it.context = l.text("ctx_a") + (b.empty() ? "" : " " + b);
    context = "ctx_a";
  } else {
    if (!hellaswag && !l.has("choices")) l.fail("endings", "missing (neither HellaSwag's endings nor the generic form's choices)");
    it.context = l.text(context);
  }
  if (it.context.empty()) l.fail(context, "is empty (a choice needs a context to be scored after)");
  it.choices = l.texts(choices);
  if (it.choices.size() < 2) l.fail(choices, "needs at least 2 choices, got " + std::to_string(it.choices.size()));
  for (size_t k = 0; k < it.choices.size(); ++k)
    if (it.choices[k].empty()) l.fail(std::string(choices) + "[" + std::to_string(k) + "]", "is empty");
  const long long y = l.index(label);
  if (y < 0 || y >= static_cast<long long>(it.choices.size()))
    l.fail(label, std::to_string(y) + " is not an index of the " + std::to_string(it.choices.size()) + " " + choices);
  it.label = static_cast<int>(y);
  return it;
}

}  // namespace

std::vector<McItem> read_mc_file(const std::string& path) {
  std::vector<McItem> items;
  // the JSON lines reader of --data (data/jsonl.h): streamed, .zst decompressed, lines and size bounded
  for_each_jsonl_line(path, [&](std::string_view line, size_t no) {
    const std::string where = path + ":" + std::to_string(no);
    const nlohmann::json obj = parse_json(line, where);
    if (!obj.is_object()) XT_FAIL(where << ": the line must be a JSON object, got " << json_echo(obj));
    items.push_back(parse_item(Line{obj, path, no}));
  });
  if (items.empty()) XT_FAIL(path << ": no items (one JSON object a line)");
  return items;
}

}  // namespace xtrain
