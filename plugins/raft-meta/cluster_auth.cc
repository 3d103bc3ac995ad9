#include "cluster_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace sluice::raft_meta {

Result<std::string> load_cluster_secret(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0)
    return Error(Errc::invalid_argument,
                 "raft.cluster_secret_file " + path + ": " + std::strerror(errno));
  if ((st.st_mode & 077) != 0)
    return Error(Errc::invalid_argument,
                 "raft.cluster_secret_file " + path +
                     " is readable or writable by group or others; chmod 600 it");
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line))
    return Error(Errc::invalid_argument, "raft.cluster_secret_file " + path + " cannot be read");
  const auto first = line.find_first_not_of(" \t\r");
  const auto last = line.find_last_not_of(" \t\r");
  std::string secret = first == std::string::npos ? "" : line.substr(first, last - first + 1);
  if (secret.size() < kMinClusterSecretBytes)
    return Error(Errc::invalid_argument,
                 "raft.cluster_secret_file " + path + ": the secret (its first line) has " +
                     std::to_string(secret.size()) + " bytes; it needs at least " +
                     std::to_string(kMinClusterSecretBytes) +
                     " (e.g. `openssl rand -hex 32`)");
  return secret;
}

bool random_nonce(AuthNonce& out) {
  return RAND_bytes(out.data(), static_cast<int>(out.size())) == 1;
}

namespace {
void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; i++) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; i++) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
}  // namespace

bool auth_proof(std::string_view secret, ProofSide side, const ProofInput& in, AuthProof& out) {
  if (!in.nc || !in.na) return false;
  std::string msg(side == ProofSide::acceptor ? "sluice raft accept v2" : "sluice raft connect v2");
  put_u32(msg, static_cast<std::uint32_t>(in.cluster_id.size()));
  msg.append(in.cluster_id);
  put_u64(msg, in.connector_id);
  put_u32(msg, static_cast<std::uint32_t>(in.connector_address.size()));
  msg.append(in.connector_address);
  put_u64(msg, in.acceptor_id);
  put_u32(msg, static_cast<std::uint32_t>(in.acceptor_address.size()));
  msg.append(in.acceptor_address);
  msg.append(reinterpret_cast<const char*>(in.nc->data()), in.nc->size());
  msg.append(reinterpret_cast<const char*>(in.na->data()), in.na->size());
  unsigned int len = 0;
  return HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
              reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out.data(),
              &len) != nullptr &&
         len == out.size();
}

bool proof_equal(const AuthProof& a, const AuthProof& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace sluice::raft_meta
