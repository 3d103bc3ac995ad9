// Authentication of raft members with a shared cluster secret (docs/security.md "Raft
// members"): the key material, the nonces and the proofs of the version-2 handshake
// (cluster_handshake.h). Pure apart from the random nonce: no sockets, no clock.
//
// A proof is HMAC-SHA256(secret, label | u32 len | cluster id | u64 connector server id |
// u32 len | connector address | u64 acceptor server id | u32 len | acceptor address | Nc |
// Na), with the label "sluice raft accept v2" for the acceptor's and "sluice raft connect
// v2" for the connector's. Both nonces are fresh per connection, so neither proof can be
// replayed on another connection; the labels keep one side's proof from being reflected as
// the other's; and naming both ends keeps a man in the middle from relaying a member's
// handshake to a third member (the connector names the server it dialled, the acceptor
// itself, so a relayed proof names the wrong acceptor).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "cluster_handshake.h"
#include "sluice/error.h"

namespace sluice::raft_meta {

inline constexpr std::size_t kMinClusterSecretBytes = 32;

// Reads `raft.cluster_secret_file`: its first line, without surrounding whitespace, of at
// least kMinClusterSecretBytes bytes. Refused when the file is readable by group or others
// (like ssh's keys). The error never contains the secret.
Result<std::string> load_cluster_secret(const std::string& path);

// False when the system has no randomness to give (never throws: called from libuv callbacks).
bool random_nonce(AuthNonce& out);

enum class ProofSide { acceptor, connector };
struct ProofInput {
  std::string_view cluster_id;
  std::uint64_t connector_id = 0;
  std::string_view connector_address;
  std::uint64_t acceptor_id = 0;
  std::string_view acceptor_address;
  const AuthNonce* nc = nullptr;
  const AuthNonce* na = nullptr;
};
// False if HMAC fails (never throws).
bool auth_proof(std::string_view secret, ProofSide side, const ProofInput& in, AuthProof& out);

// Constant time.
bool proof_equal(const AuthProof& a, const AuthProof& b);

}  // namespace sluice::raft_meta
