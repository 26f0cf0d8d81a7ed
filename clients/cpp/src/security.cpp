#include "gym_remote/security.hpp"

#include <sodium.h>
#include <sys/stat.h>
#include <zmq.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "gym_remote/log.hpp"
#include "text.hpp"

namespace gym_remote {

namespace {

constexpr std::size_t kKeyLength = 40;
constexpr char kSecretSalt[] = "gym_remote/curve-keys-from-secret/v1";

Status Invalid(const std::string& message) { return Status::Error(StatusCode::kInvalidArgument, message); }

bool FileExists(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0;
}

bool ValidZ85Key(const std::string& text) {
  if (text.size() != kKeyLength) return false;
  std::uint8_t decoded[32];
  return zmq_z85_decode(decoded, text.c_str()) != nullptr;
}

// A key written out rather than a file's path (as gym_remote.security._is_key_text decides).
bool IsKeyText(const std::string& source) {
  if (source.size() != kKeyLength || FileExists(source)) return false;
  auto ends_with = [&](const std::string& suffix) {
    return source.size() >= suffix.size() && source.compare(source.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return !ends_with(".key") && !ends_with(".key_secret");
}

std::string Strip(const std::string& text, const char* characters) {
  const std::size_t first = text.find_first_not_of(characters);
  if (first == std::string::npos) return "";
  const std::size_t last = text.find_last_not_of(characters);
  return text.substr(first, last - first + 1);
}

// zmq.auth.load_certificate: the `public-key = "..."` and `secret-key = "..."` lines of a certificate.
Status ReadCertificate(const std::string& path, const std::string& what, std::string* public_key,
                       std::string* secret_key) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return Invalid(what + ": cannot read the key file '" + path + "'");
  std::string line;
  while (std::getline(file, line)) {
    line = Strip(line, " \t\r\n\v\f");
    if (line.empty() || line[0] == '#') continue;
    const std::size_t equals = line.find('=');
    if (equals == std::string::npos) continue;
    const std::string value = Strip(line.substr(equals + 1), " \t'\"");
    if (line.rfind("public-key", 0) == 0) *public_key = value;
    if (line.rfind("secret-key", 0) == 0) *secret_key = value;
  }
  if (public_key->empty()) {
    return Invalid(what + ": cannot read the key file '" + path + "': no public key found in it");
  }
  if (!ValidZ85Key(*public_key) || (!secret_key->empty() && !ValidZ85Key(*secret_key))) {
    return Invalid(what + ": the key file '" + path + "' does not hold 40-character Z85 keys");
  }
  return Status::Ok();
}

void WarnIfReadableByOthers(const std::string& path, const std::string& what) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) return;
  if (info.st_mode & (S_IRWXG | S_IRWXO)) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%o", static_cast<unsigned>(info.st_mode & 0777));
    Log(LogLevel::kWarning, what + " " + path + " can be read by other users (mode " + mode + "); chmod 600 it");
  }
}

}  // namespace

Status PublicKeyOf(const std::string& secret_key, std::string* public_key) {
  char computed[kKeyLength + 1];
  if (!ValidZ85Key(secret_key) || zmq_curve_public(computed, secret_key.c_str()) != 0) {
    return Invalid("cannot compute the public key of a CURVE secret key (is libzmq built with CURVE?)");
  }
  *public_key = computed;
  return Status::Ok();
}

Status LoadPublicKey(const std::string& source, std::string* public_key) {
  if (IsKeyText(source)) {
    if (!ValidZ85Key(source)) return Invalid("server_key: '" + source + "' is neither a key file nor a Z85 key");
    *public_key = source;
    return Status::Ok();
  }
  std::string secret_key;
  return ReadCertificate(source, "server_key", public_key, &secret_key);
}

Status LoadKeyPair(const std::string& source, KeyPair* pair) {
  if (IsKeyText(source)) {
    if (!ValidZ85Key(source)) return Invalid("client_key: '" + source + "' is neither a key file nor a Z85 key");
    pair->secret_key = source;
    return PublicKeyOf(source, &pair->public_key);
  }
  KeyPair loaded;
  GYM_REMOTE_RETURN_IF_ERROR(ReadCertificate(source, "client_key", &loaded.public_key, &loaded.secret_key));
  if (loaded.secret_key.empty()) {
    return Invalid("client_key: '" + source + "' holds only a public key; give the NAME.key_secret file");
  }
  WarnIfReadableByOthers(source, "client_key");
  *pair = loaded;
  return Status::Ok();
}

Status ReadSecretFile(const std::string& path, std::string* secret) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return Invalid("cannot read the secret file '" + path + "'");
  std::ostringstream text;
  text << file.rdbuf();
  // PROTOCOL.md §12.2: one leading byte-order mark, then the ASCII whitespace at both ends, and nothing else.
  std::string content = text.str();
  if (content.rfind("\xEF\xBB\xBF", 0) == 0) content.erase(0, 3);
  *secret = Strip(content, " \t\r\n\v\f");
  if (secret->empty()) return Invalid("the secret file " + path + " is empty");
  if (!ValidUtf8(*secret)) return Invalid("the secret file " + path + " is not UTF-8 text");
  WarnIfReadableByOthers(path, "secret file");
  return Status::Ok();
}

Status KeysFromSecret(std::string_view secret, KeyPair* server, KeyPair* clients) {
  if (secret.empty()) return Invalid("the shared secret is empty");
  if (sodium_init() < 0) return Status::Error(StatusCode::kInternal, "libsodium failed to initialize");
  if (secret.size() < 16) {
    Log(LogLevel::kWarning, "the shared secret has only " + std::to_string(secret.size()) +
                                " characters; use a long random one");
  }
  std::uint8_t derived[64];
  if (crypto_pwhash_scryptsalsa208sha256_ll(reinterpret_cast<const std::uint8_t*>(secret.data()), secret.size(),
                                            reinterpret_cast<const std::uint8_t*>(kSecretSalt),
                                            sizeof(kSecretSalt) - 1, 16384, 8, 1, derived, sizeof(derived)) != 0) {
    return Status::Error(StatusCode::kInternal, "scrypt failed (out of memory?)");
  }
  char z85[2][kKeyLength + 1];
  zmq_z85_encode(z85[0], derived, 32);
  zmq_z85_encode(z85[1], derived + 32, 32);
  sodium_memzero(derived, sizeof(derived));
  server->secret_key = z85[0];
  clients->secret_key = z85[1];
  GYM_REMOTE_RETURN_IF_ERROR(PublicKeyOf(server->secret_key, &server->public_key));
  return PublicKeyOf(clients->secret_key, &clients->public_key);
}

Status CheckEndpoint(const std::string& endpoint) {
  const std::size_t separator = endpoint.find("://");
  if (separator == std::string::npos) {
    return Invalid("address='" + endpoint + "' has no transport scheme: write tcp://HOST:PORT or ipc://PATH");
  }
  const std::string scheme = endpoint.substr(0, separator);
  const std::string rest = endpoint.substr(separator + 3);
  static const char* const schemes[] = {"tcp", "ipc", "inproc", "tipc", "vmci", "ws", "wss"};
  bool known = false;
  for (const char* name : schemes) known = known || scheme == name;
  if (!known) {
    return Invalid("address='" + endpoint + "' has an unknown transport scheme '" + scheme +
                   "://': use tcp://HOST:PORT or ipc://PATH");
  }
  if (rest.empty()) return Invalid("address='" + endpoint + "' has no address after " + scheme + "://");
  if (scheme == "tcp") {
    const std::size_t colon = rest.rfind(':');
    const std::string host = colon == std::string::npos ? "" : rest.substr(0, colon);
    const std::string port = colon == std::string::npos ? "" : rest.substr(colon + 1);
    bool digits = !port.empty() && port.size() <= 5 && port.find_first_not_of("0123456789") == std::string::npos;
    if (host.empty() || !digits || std::stoi(port) > 65535) {
      return Invalid("address='" + endpoint + "' has no valid port: write tcp://HOST:PORT (up to 65535)");
    }
    if (host == "*") {
      return Invalid("address='" + endpoint + "': * is for binding; connect to the server's host name or address");
    }
  }
  return Status::Ok();
}

bool IsLocalEndpoint(const std::string& endpoint) {
  const std::size_t separator = endpoint.find("://");
  if (separator == std::string::npos) return false;
  const std::string scheme = endpoint.substr(0, separator);
  if (scheme == "ipc" || scheme == "inproc") return true;
  if (scheme != "tcp") return false;
  std::string host = endpoint.substr(separator + 3);
  host = host.substr(0, host.rfind(':'));
  if (!host.empty() && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace gym_remote
