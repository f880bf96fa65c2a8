// The one JSON reading path (see core/json.h).
#include "core/json.h"

#include "core/echo.h"
#include <xtrain/core/error.h>
#include "core/io.h"

namespace xtrain {

namespace {
// TooDeep: thrown out of the parser callback; caught below and turned into Error.
struct TooDeep {};
}  // namespace

nlohmann::json parse_json(std::string_view text, const std::string& what, const JsonEvent& on_event) {
  using json = nlohmann::json;
  // depth: how many arrays/objects enclose the one being opened (0 for the top level), nlohmann's
  // json_sax_dom_callback_parser passes ref_stack.size().
  auto cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if ((ev == json::parse_event_t::object_start || ev == json::parse_event_t::array_start) && depth >= kJsonMaxDepth)
      throw TooDeep{};
    if (on_event) on_event(depth, ev, parsed);
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), cb);
  } catch (const TooDeep&) {
    XT_FAIL(what << ": not valid JSON (nested deeper than " << kJsonMaxDepth << " arrays/objects)");
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number overflow
    XT_FAIL(what << ": not valid JSON (" << echo_value(e.what(), 240) << ")");
  }
}

nlohmann::json read_json_file(const std::string& path, size_t max_bytes) {
  return parse_json_file_bytes(path, read_json_text(path, max_bytes), max_bytes);
}

std::string read_json_text(const std::string& path, size_t max_bytes) {
  std::string text;
  {
    RegularFile f = open_regular_file(path, "cannot read " + path);
    if (static_cast<unsigned long long>(f.st.st_size) > max_bytes)
      XT_FAIL(path << ": " << f.st.st_size << " bytes is over the " << max_bytes << " byte limit of a JSON file");
  }
  text = read_file(path);
  if (text.size() > max_bytes)  // grown since the check
    XT_FAIL(path << ": " << text.size() << " bytes is over the " << max_bytes << " byte limit of a JSON file");
  return text;
}

nlohmann::json parse_json_file_bytes(const std::string& path, std::string_view text, size_t max_bytes) {
  if (text.size() > max_bytes)
    XT_FAIL(path << ": " << text.size() << " bytes is over the " << max_bytes << " byte limit of a JSON file");
  return parse_json(text, path);
}

std::string json_echo(const nlohmann::json& v) {
  if (v.is_string()) return "\"" + echo_value(v.get_ref<const std::string&>()) + "\"";
  if (v.is_array()) return "an array of " + std::to_string(v.size()) + (v.size() == 1 ? " element" : " elements");
  if (v.is_object()) return "an object of " + std::to_string(v.size()) + (v.size() == 1 ? " key" : " keys");
  if (v.is_number() || v.is_boolean() || v.is_null()) return v.dump();
  return v.type_name();  // binary, discarded
}

}  // namespace xtrain
