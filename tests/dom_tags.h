// Test helper: the start tags of a serialized HTML document (e.g. Chromium's --dump-dom), each
// with its attributes (entities decoded), the text right after it (up to the next tag) and
// the attributes of the <section> elements enclosing it (innermost last). Enough to read the
// data- attributes a page puts on the numbers it renders; not a general HTML parser (quoted
// attribute values only; <script> and <style> contents are skipped).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace strata::testing {

struct DomTag {
  std::string name;                            // lower case as serialized, e.g. "td"
  std::map<std::string, std::string> attrs;
  std::string text;                            // the text up to the next tag
  std::vector<std::map<std::string, std::string>> sections;  // enclosing <section>s' attrs

  bool has(const std::string& k, const std::string& v) const {
    auto it = attrs.find(k);
    return it != attrs.end() && it->second == v;
  }
  std::string attr(const std::string& k) const {
    auto it = attrs.find(k);
    return it == attrs.end() ? "" : it->second;
  }
  // The value of attribute `k` on the nearest enclosing section that has it ("" if none).
  std::string section_attr(const std::string& k) const {
    for (auto it = sections.rbegin(); it != sections.rend(); ++it)
      if (auto a = it->find(k); a != it->end()) return a->second;
    return "";
  }
};

inline std::string decode_entities(const std::string& s) {
  static const std::pair<const char*, const char*> kEnt[] = {
      {"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&#39;", "'"}, {"&nbsp;", " "}};
  std::string out;
  for (size_t i = 0; i < s.size();) {
    bool hit = false;
    if (s[i] == '&')
      for (const auto& [e, c] : kEnt)
        if (s.compare(i, std::char_traits<char>::length(e), e) == 0) {
          out += c;
          i += std::char_traits<char>::length(e);
          hit = true;
          break;
        }
    if (!hit) out += s[i++];
  }
  return out;
}

inline std::vector<DomTag> parse_dom_tags(const std::string& html) {
  std::vector<DomTag> tags;
  std::vector<std::map<std::string, std::string>> open_sections;
  auto space = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '/'; };
  size_t i = 0;
  while ((i = html.find('<', i)) != std::string::npos) {
    if (html.compare(i, 4, "<!--") == 0) {
      i = html.find("-->", i);
      if (i == std::string::npos) break;
      continue;
    }
    if (html.compare(i, 10, "</section>") == 0 && !open_sections.empty()) open_sections.pop_back();
    if (i + 1 >= html.size() || html[i + 1] == '/' || html[i + 1] == '!') {
      ++i;
      continue;
    }
    DomTag t;
    size_t j = i + 1;
    while (j < html.size() && !space(html[j]) && html[j] != '>') t.name += html[j++];
    while (j < html.size() && html[j] != '>') {
      while (j < html.size() && space(html[j])) ++j;
      std::string key;
      while (j < html.size() && !space(html[j]) && html[j] != '=' && html[j] != '>') key += html[j++];
      std::string value;
      if (j < html.size() && html[j] == '=' && j + 1 < html.size() && html[j + 1] == '"') {
        const size_t end = html.find('"', j + 2);
        if (end == std::string::npos) return tags;
        value = decode_entities(html.substr(j + 2, end - j - 2));
        j = end + 1;
      } else if (j < html.size() && html[j] == '=') {
        ++j;  // an unquoted value: not read
      }
      if (!key.empty()) t.attrs[key] = value;
    }
    const size_t next = html.find('<', j);
    t.text = decode_entities(html.substr(j + 1, (next == std::string::npos ? html.size() : next) - j - 1));
    if (t.name == "script" || t.name == "style") {  // raw text: skip to its end tag
      const size_t end = html.find("</" + t.name, j);
      if (end == std::string::npos) break;
      t.text.clear();
      j = end - 1;
    }
    t.sections = open_sections;
    if (t.name == "section") open_sections.push_back(t.attrs);
    tags.push_back(std::move(t));
    i = j;
  }
  return tags;
}

}  // namespace strata::testing
