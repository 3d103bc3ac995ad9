// sluice token hash: the tokens-file line for a bearer token (docs/security.md). Offline:
// it talks to no node, and the node only ever sees the token's SHA-256.
#include <openssl/rand.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "auth.h"
#include "command_line.h"
#include "commands.h"

namespace sluice::cli {
namespace {

const Usage kToken{"token", R"(Usage: sluice token hash --roles ROLE[:SCOPE][,ROLE[:SCOPE]...] [--name NAME] [TOKEN | -]

Prints the line to add to the node's auth.tokens_file (then send the node SIGHUP):
  sha256:<SHA-256 of TOKEN in hex> NAME ROLE[:SCOPE] ...
Without TOKEN a random 256-bit token is generated and printed once, on the line before;
the node keeps only its hash, so store it now. '-' reads TOKEN from the first line of
standard input (a command line is visible to other users of the machine).
Roles: admin, metrics, tenant-admin:TENANT, produce:SCOPE, consume:SCOPE, where SCOPE is
TENANT, TENANT/NAMESPACE or TENANT/NAMESPACE/STREAM. NAME (default token-<8 hex digits
of the hash>) names the token in the node's logs. See docs/security.md.
)"};

std::string random_token() {
  unsigned char b[32];
  if (RAND_bytes(b, sizeof b) != 1) {
    std::fprintf(stderr, "sluice token: the system's random generator failed\n");
    std::exit(1);
  }
  static constexpr char digits[] = "0123456789abcdef";
  std::string t;
  for (unsigned char c : b) {
    t.push_back(digits[c >> 4]);
    t.push_back(digits[c & 15]);
  }
  return t;
}

}  // namespace

int cmd_token(const Words& words) {
  const std::string op = subcommand(kToken, words);
  if (op != "hash") usage_error(kToken, "unknown operation '" + op + "'");
  Args a(kToken, rest(words), {.values = {"roles", "name"}, .min_args = 0, .max_args = 1});
  if (!a.has("roles")) a.error("--roles is required (e.g. --roles produce:acme/orders)");
  std::string token;
  const bool generated = a.pos().empty();
  if (generated) {
    token = random_token();
  } else if (a.pos()[0] == "-") {
    std::getline(std::cin, token);
    if (!token.empty() && token.back() == '\r') token.pop_back();
  } else {
    token = a.pos()[0];
  }
  const std::string header = "Bearer " + token;
  if (auto t = http_api::bearer_token(header); !t || *t != token)
    a.error("a token is 1 to 4096 printable ASCII characters without spaces");
  const std::string hash = http_api::to_hex(http_api::sha256(token));
  std::string roles = a.get("roles");
  for (auto& c : roles)
    if (c == ',') c = ' ';
  const std::string line = "sha256:" + hash + " " + a.get("name", "token-" + hash.substr(0, 8)) + " " + roles;
  // The same parser the node uses: never print a line the node would refuse.
  if (auto r = http_api::TokenTable::parse(line); !r) a.error(r.error().message.substr(8));  // drop "line 1: "
  if (generated) std::printf("%s\n", token.c_str());
  std::printf("%s\n", line.c_str());
  if (generated)
    std::fprintf(stderr, "sluice token: the first line is the token; it is not shown again (the node keeps only "
                         "its hash). Add the second line to auth.tokens_file and send sluiced SIGHUP.\n");
  return 0;
}

}  // namespace sluice::cli
