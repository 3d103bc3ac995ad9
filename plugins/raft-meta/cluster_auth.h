// Authentication of raft members with a shared cluster secret (docs/security.md "Raft
// members"): the key material, the nonces and the proofs of the version-2 handshake
// (cluster_handshake.h). Pure apart from the random nonce: no sockets, no clock.
//
// A proof is HMAC-SHA256(secret, label | u32 len | cluster id | u64 connector server id |
// u32 len | connector address | Nc | Na), with the label "sluice raft accept v2" for the
// acceptor's and "sluice raft connect v2" for the connector's. Both nonces are fresh per
// connection, so neither proof can be replayed on another connection, and the labels keep
// one side's proof from being reflected as the other's.
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

AuthNonce random_nonce();

enum class ProofSide { acceptor, connector };
AuthProof auth_proof(std::string_view secret, ProofSide side, std::string_view cluster_id,
                     std::uint64_t connector_id, std::string_view connector_address,
                     const AuthNonce& nc, const AuthNonce& na);

// Constant time.
bool proof_equal(const AuthProof& a, const AuthProof& b);

}  // namespace sluice::raft_meta
