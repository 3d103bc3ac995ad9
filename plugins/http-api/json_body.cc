// The JSON body helpers declared in handlers.h: Beast-free and Node-free, so the publish
// parser (publish_parse.cc) and its fuzz target link them without the router.
#include <algorithm>
#include <cctype>
#include <deque>
#include <memory>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/value_stack.hpp>

#include "codec.h"
#include "sluice/catalog_json.h"
#include "handlers.h"

namespace sluice::http_api {

namespace json = boost::json;

namespace {

// Boost.JSON's own value-building handler (boost/json/detail/handler.hpp), plus one check:
// an object that names a key twice is refused. json::parse keeps the last of duplicates, so
// {"records":[a],"records":[b]} would publish b and answer 200, dropping a without a word.
// Keys are compared after unescaping ("a" and "\u0061" are the same key); an object with
// many keys switches from a linear scan to a hash set, so no body costs quadratic time.
class Handler {
 public:
  static constexpr std::size_t max_object_size = json::object::max_size();
  static constexpr std::size_t max_array_size = json::array::max_size();
  static constexpr std::size_t max_key_size = json::string::max_size();
  static constexpr std::size_t max_string_size = json::string::max_size();

  json::value_stack st;
  static constexpr std::size_t kMaxFields = 10000;  // per object: keeps the key index bounded
  bool has_duplicate = false;
  bool too_many = false;
  std::string duplicate;  // the key named twice, once found

  bool on_document_begin(boost::system::error_code&) { return true; }
  bool on_document_end(boost::system::error_code&) { return true; }
  bool on_object_begin(boost::system::error_code&) {
    levels_.push_back(Level{keys_.size(), nullptr});
    return true;
  }
  bool on_object_end(std::size_t n, boost::system::error_code&) {
    keys_.resize(levels_.back().start);
    levels_.pop_back();
    st.push_object(n);
    return true;
  }
  bool on_array_begin(boost::system::error_code&) { return true; }
  bool on_array_end(std::size_t n, boost::system::error_code&) {
    st.push_array(n);
    return true;
  }
  bool on_key_part(json::string_view s, std::size_t, boost::system::error_code&) {
    st.push_chars(s);
    key_.append(s.data(), s.size());
    return true;
  }
  bool on_key(json::string_view s, std::size_t, boost::system::error_code& ec) {
    key_.append(s.data(), s.size());
    if (keys_.size() - levels_.back().start >= kMaxFields) {
      too_many = true;
      ec = make_error_code(boost::system::errc::invalid_argument);
      return false;
    }
    if (!admit_key()) {
      has_duplicate = true;
      duplicate = std::move(key_);
      ec = make_error_code(boost::system::errc::invalid_argument);
      return false;
    }
    key_.clear();
    st.push_key(s);
    return true;
  }
  bool on_string_part(json::string_view s, std::size_t, boost::system::error_code&) {
    st.push_chars(s);
    return true;
  }
  bool on_string(json::string_view s, std::size_t, boost::system::error_code&) {
    st.push_string(s);
    return true;
  }
  bool on_number_part(json::string_view, boost::system::error_code&) { return true; }
  bool on_int64(std::int64_t i, json::string_view, boost::system::error_code&) {
    st.push_int64(i);
    return true;
  }
  bool on_uint64(std::uint64_t u, json::string_view, boost::system::error_code&) {
    st.push_uint64(u);
    return true;
  }
  bool on_double(double d, json::string_view, boost::system::error_code&) {
    st.push_double(d);
    return true;
  }
  bool on_bool(bool b, boost::system::error_code&) {
    st.push_bool(b);
    return true;
  }
  bool on_null(boost::system::error_code&) {
    st.push_null();
    return true;
  }
  bool on_comment_part(json::string_view, boost::system::error_code&) { return true; }
  bool on_comment(json::string_view, boost::system::error_code&) { return true; }

 private:
  static constexpr std::size_t kLinearKeys = 16;
  struct Level {
    std::size_t start;  // its first key in keys_
    std::unique_ptr<std::unordered_set<std::string_view>> set;  // past kLinearKeys keys
  };
  // False if key_ is already a key of the innermost object; else records it there.
  bool admit_key() {
    Level& l = levels_.back();
    const std::size_t count = keys_.size() - l.start;
    if (!l.set && count >= kLinearKeys) {
      l.set = std::make_unique<std::unordered_set<std::string_view>>();
      for (std::size_t i = l.start; i < keys_.size(); ++i) l.set->insert(keys_[i]);
    }
    if (l.set) {
      if (l.set->count(key_)) return false;
      keys_.push_back(key_);
      l.set->insert(keys_.back());  // a deque never moves its elements on push_back
      return true;
    }
    for (std::size_t i = l.start; i < keys_.size(); ++i)
      if (keys_[i] == key_) return false;
    keys_.push_back(key_);
    return true;
  }

  std::string key_;               // the key being read (its parts so far)
  std::deque<std::string> keys_;  // the keys of every open object, outermost first
  std::vector<Level> levels_;
};

}  // namespace

Result<void> parse_json_object(std::string_view body, json::value& out) {
  boost::system::error_code ec;
  // Same storage as `out`, so the result moves instead of copying out of the arena.
  json::basic_parser<Handler> p{json::parse_options{}};
  p.handler().st.reset(out.storage());
  const std::size_t used = p.write_some(false, body.data(), body.size(), ec);
  if (p.handler().too_many)
    return Error(Errc::malformed_body, "request body has an object with more than " +
                                           std::to_string(Handler::kMaxFields) + " fields");
  if (p.handler().has_duplicate) {
    const std::string& k = p.handler().duplicate;
    return Error(Errc::malformed_body, "request body names field \"" +
                                           (valid_utf8(k) ? k : std::string("(non-UTF-8 name)")) +
                                           "\" twice in one object");
  }
  if (!ec && used < body.size()) ec = json::error::extra_data;
  if (ec) return Error(Errc::malformed_body, "request body is not valid JSON: " + ec.message());
  out = p.handler().st.release();
  if (!out.is_object()) return Error(Errc::invalid_argument, "request body must be a JSON object");
  if (!json_numbers_finite(out))
    return Error(Errc::malformed_body, "request body holds a number out of range");
  return {};
}

Result<void> check_fields(const json::object& o, std::initializer_list<std::string_view> allowed,
                          std::string_view where) {
  for (auto& kv : o) {
    const std::string_view k(kv.key().data(), kv.key().size());
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
      std::string shown = valid_utf8(k) ? std::string(k) : "(non-UTF-8 name)";
      return Error(Errc::unknown_field,
                   "unknown field \"" + std::string(where) + shown + "\"");
    }
  }
  return {};
}

Result<json::value> only_field(std::string_view body, std::string_view name) {
  json::monotonic_resource mr;
  json::value out(json::storage_ptr{&mr});
  if (auto r = parse_json_object(body, out); !r) return r.error();
  const auto& o = out.get_object();
  if (auto r = check_fields(o, {name}, ""); !r) return r.error();
  const auto* v = o.if_contains(name);
  if (!v) return Error(Errc::invalid_argument, "field \"" + std::string(name) + "\" is required");
  return json::value(*v, json::storage_ptr{});
}

std::string media_type(std::string_view ct) {
  if (auto semi = ct.find(';'); semi != std::string_view::npos) ct = ct.substr(0, semi);
  while (!ct.empty() && (ct.front() == ' ' || ct.front() == '\t')) ct.remove_prefix(1);
  while (!ct.empty() && (ct.back() == ' ' || ct.back() == '\t')) ct.remove_suffix(1);
  std::string out(ct);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace sluice::http_api
