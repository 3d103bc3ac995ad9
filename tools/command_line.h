// Argument parsing for `sluice`, on Boost.Program_options.
//
// Every command and subcommand states its grammar: the options that take a value, the
// flags, and how many positional arguments it takes. Anything else (an unknown option,
// an abbreviation, a missing value, a stray argument) is refused: one line on stderr
// naming it, then the command's usage lines, and exit status 2. `--help` (or `-h`)
// prints the command's help on stdout and exits 0. Options are never guessed from a
// prefix: `--shard` is not `--shards`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sluice::cli {

// A command's help text. Its first paragraph (up to the first blank line) is the usage
// lines printed after a usage error.
struct Usage {
  std::string command;  // as typed: "stream", "group consume"
  const char* help;
};

// What a command accepts after its name (and subcommand).
struct Grammar {
  std::vector<std::string> values = {};  // --NAME VALUE or --NAME=VALUE
  std::vector<std::string> flags = {};   // --NAME
  std::size_t min_args = 0;         // positional arguments
  std::size_t max_args = 0;
};

// Prints "sluice <command>: <msg>" and the usage lines on stderr, exits 2.
[[noreturn]] void usage_error(const Usage& usage, const std::string& msg);
// The same without usage lines (for errors that are not about one command).
[[noreturn]] void usage_error(const std::string& who, const std::string& msg);

// The parsed words of one command. Construction exits on --help or a usage error.
class Args {
 public:
  Args(const Usage& usage, const std::vector<std::string>& words, const Grammar& grammar);

  const std::vector<std::string>& pos() const { return pos_; }
  bool has(const std::string& name) const { return opts_.count(name) > 0; }
  std::string get(const std::string& name, const std::string& def = "") const;
  // The option's value as a non-negative integer; a usage error otherwise.
  std::uint64_t get_u64(const std::string& name, std::uint64_t def) const;
  [[noreturn]] void error(const std::string& msg) const { usage_error(usage_, msg); }
  const Usage& usage() const { return usage_; }

 private:
  Usage usage_;
  std::vector<std::string> pos_;
  std::map<std::string, std::string> opts_;
};

// For a command with subcommands: returns words[0], the operation, after handling
// --help (exit 0), nothing at all, and an option where the operation belongs (exit 2).
std::string subcommand(const Usage& usage, const std::vector<std::string>& words);

// The words after words[0].
std::vector<std::string> rest(const std::vector<std::string>& words);

// A path segment (a name, a cache or counter key): anything but unreserved characters is
// percent-encoded so that '/', '?', '%' and '#' stay in it (the server checks it).
std::string encode_segment(const std::string& s);
// Percent-encodes a query parameter's value (unreserved characters stay); "." and ".."
// are fine here, unlike in a path segment.
std::string encode_query_value(const std::string& s);

// A non-negative integer, or a usage error naming `what`.
std::uint64_t parse_u64(const Usage& usage, const std::string& what, const std::string& s);

// TENANT/NAMESPACE/STREAM.
struct StreamPath {
  std::string tenant, ns, name;
  // Each name percent-encoded (encode_segment): a '?', '%' or space stays in the name, for
  // the server to judge, instead of changing which resource the request names.
  std::string ns_path() const { return "/v1/tenants/" + encode_segment(tenant) + "/namespaces/" + encode_segment(ns); }
  std::string path() const { return ns_path() + "/streams/" + encode_segment(name); }
};
StreamPath parse_stream(const Usage& usage, const std::string& s);

}  // namespace sluice::cli
