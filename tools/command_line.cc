#include "command_line.h"

#include <boost/program_options.hpp>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace po = boost::program_options;

namespace sluice::cli {
namespace {

std::string usage_lines(const char* help) {
  std::string h = help;
  auto end = h.find("\n\n");
  return end == std::string::npos ? h : h.substr(0, end);
}

}  // namespace

void usage_error(const Usage& usage, const std::string& msg) {
  std::string lines = usage_lines(usage.help);
  if (!lines.empty() && lines.back() != '\n') lines += '\n';
  std::fprintf(stderr, "sluice %s: %s\n%s", usage.command.c_str(), msg.c_str(), lines.c_str());
  std::exit(2);
}

void usage_error(const std::string& who, const std::string& msg) {
  std::fprintf(stderr, "%s: %s (see --help)\n", who.c_str(), msg.c_str());
  std::exit(2);
}

Args::Args(const Usage& usage, const std::vector<std::string>& words, const Grammar& grammar) : usage_(usage) {
  po::options_description desc;
  desc.add_options()("help,h", "");
  for (const auto& v : grammar.values) desc.add_options()(v.c_str(), po::value<std::string>(), "");
  for (const auto& f : grammar.flags) desc.add_options()(f.c_str(), "");
  desc.add_options()("positional-arguments", po::value<std::vector<std::string>>(), "");
  po::positional_options_description positional;
  positional.add("positional-arguments", -1);
  po::variables_map vm;
  try {
    // Exact long names only: no prefix guessing.
    constexpr int style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
    po::store(po::command_line_parser(words).options(desc).positional(positional).style(style).run(), vm);
  } catch (const po::unknown_option& e) {
    error("unknown option '" + e.get_option_name() + "'");
  } catch (const po::error& e) {
    error(e.what());
  }
  if (vm.count("help")) {
    std::fputs(usage_.help, stdout);
    if (*usage_.help && std::string(usage_.help).back() != '\n') std::fputc('\n', stdout);
    std::exit(0);
  }
  if (vm.count("positional-arguments")) pos_ = vm["positional-arguments"].as<std::vector<std::string>>();
  for (const auto& v : grammar.values)
    if (vm.count(v)) opts_[v] = vm[v].as<std::string>();
  for (const auto& f : grammar.flags)
    if (vm.count(f)) opts_[f] = "";
  if (pos_.size() > grammar.max_args) error("unexpected argument '" + pos_[grammar.max_args] + "'");
  if (pos_.size() < grammar.min_args) error("missing arguments");
}

std::string Args::get(const std::string& name, const std::string& def) const {
  auto it = opts_.find(name);
  return it == opts_.end() ? def : it->second;
}

std::uint64_t Args::get_u64(const std::string& name, std::uint64_t def) const {
  return has(name) ? parse_u64(usage_, "--" + name, get(name)) : def;
}

std::string subcommand(const Usage& usage, const std::vector<std::string>& words) {
  if (words.empty()) usage_error(usage, "missing operation");
  const std::string& op = words[0];
  if (op == "--help" || op == "-h") {
    std::fputs(usage.help, stdout);
    std::exit(0);
  }
  if (op.starts_with("-")) usage_error(usage, "unknown option '" + op + "' (the operation comes first)");
  return op;
}

std::vector<std::string> rest(const std::vector<std::string>& words) {
  return words.empty() ? words : std::vector<std::string>(words.begin() + 1, words.end());
}

std::uint64_t parse_u64(const Usage& usage, const std::string& what, const std::string& s) {
  try {
    std::size_t n = 0;
    if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) throw std::invalid_argument(s);
    auto v = std::stoull(s, &n);
    if (n != s.size()) throw std::invalid_argument(s);
    return v;
  } catch (...) {
    usage_error(usage, what + " must be a non-negative integer, got '" + s + "'");
  }
}

StreamPath parse_stream(const Usage& usage, const std::string& s) {
  StreamPath p;
  auto a = s.find('/');
  auto b = a == std::string::npos ? a : s.find('/', a + 1);
  if (a == std::string::npos || b == std::string::npos || s.find('/', b + 1) != std::string::npos)
    usage_error(usage, "a stream is TENANT/NAMESPACE/STREAM, got '" + s + "'");
  p.tenant = s.substr(0, a);
  p.ns = s.substr(a + 1, b - a - 1);
  p.name = s.substr(b + 1);
  return p;
}

std::string encode_query_value(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
        c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

std::string encode_segment(const std::string& s) {
  // A segment that is exactly "." or ".." is a dot segment (RFC 3986 5.2.4), which a proxy
  // that normalizes paths removes, with the segment before it: `cache delete t/n/c ..`
  // would reach the server as a delete of the whole cache (review finding). Refused here;
  // percent-encoding does not help (%2E is normalized to '.' too).
  if (s == "." || s == "..")
    usage_error("sluice", "'" + s + "' cannot be sent as a name or key: it is a URL dot segment, which "
                          "proxies remove from the path (with the segment before it)");
  return encode_query_value(s);
}

}  // namespace sluice::cli
