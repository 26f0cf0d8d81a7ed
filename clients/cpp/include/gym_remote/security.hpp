// CURVE keys (PROTOCOL.md §12): zmq.auth certificate files, Z85 text, keys derived from a shared secret.
#pragma once

#include <string>
#include <string_view>

#include "gym_remote/status.hpp"

namespace gym_remote {

// A CURVE key pair as Z85 text (40 characters each); `secret` is empty for someone else's public key.
struct KeyPair {
  std::string public_key;
  std::string secret_key;
};

// A public key from a certificate file (NAME.key or NAME.key_secret: its `public-key = "..."` line),
// or given as 40 characters of Z85 text.
Status LoadPublicKey(const std::string& source, std::string* public_key);
// A key pair from a NAME.key_secret file (its `public-key` and `secret-key` lines), or a secret key
// given as Z85 text (the public key is then computed). Warns on stderr if the file is readable by others.
Status LoadKeyPair(const std::string& source, KeyPair* pair);
// The shared secret in a file: its text without surrounding whitespace. Fails for an empty file.
Status ReadSecretFile(const std::string& path, std::string* secret);
// The server's and the clients' key pairs derived from a shared secret, as PROTOCOL.md §12.2 says:
// scrypt(secret, salt "gym_remote/curve-keys-from-secret/v1", N=16384, r=8, p=1, 64 bytes), the
// server's secret key the first 32 bytes, the clients' the last 32, public keys by zmq_curve_public.
Status KeysFromSecret(std::string_view secret, KeyPair* server, KeyPair* clients);
// The public key of a Z85 secret key.
Status PublicKeyOf(const std::string& secret_key, std::string* public_key);

// Whether `endpoint` is a ZeroMQ address this client can connect to ("tcp://HOST:PORT", "ipc://PATH").
Status CheckEndpoint(const std::string& endpoint);
// Whether only this machine can reach `endpoint` (ipc://, inproc://, loopback tcp://).
bool IsLocalEndpoint(const std::string& endpoint);

}  // namespace gym_remote
