// The client: serves C++ envs to a gym_remote RemoteVectorEnv (the server) until it closes.
//
//   std::vector<gym_remote::Env*> envs = {&env0, &env1};
//   gym_remote::ClientOptions options;
//   options.endpoint = "tcp://10.0.0.5:5555";
//   gym_remote::Client client(options, envs);
//   gym_remote::Status status = client.Run();   // returns when the server closes (ok), or fails
//
// It connects a DEALER socket, introduces the envs with HELLO, answers the server's commands with
// Gymnasium's autoreset semantics, and rejoins (as a new session) a server that went away without
// closing. See docs/PROTOCOL.md.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gym_remote/env.hpp"
#include "gym_remote/security.hpp"
#include "gym_remote/status.hpp"

namespace gym_remote {

// Durations in seconds; a value <= 0 or infinite means "forever" (not for liveness_timeout).
struct ClientOptions {
  std::string endpoint;             // the server's address, "tcp://HOST:PORT" or "ipc://PATH"
  std::string name;                 // for logs and the server's client table (default: host:pid)
  double connect_timeout = 120.0;   // wait this long for the server's answer to the first HELLO
  bool wait_for_slot = true;        // no free slot: wait in line (true) or fail (false)
  double slot_timeout = 3600.0;     // wait in line at most this long
  bool reconnect = true;            // rejoin a server that went away (true), or fail (false)
  double reconnect_timeout = 300.0; // try to rejoin for this long
  double liveness_timeout = 10.0;   // silence on the connection after which the server counts as gone
  // The same-host data plane (PROTOCOL.md §13): a server on this host carries the steps over a Unix
  // socket. Unset: on unless the environment variable GYM_REMOTE_DATA_PLANE is 0, off, false or no.
  std::optional<bool> data_plane;
  // Over the data plane, seconds to busy-check for the next command after answering one, while
  // commands have lately come within that time and do not say the learner's process has no core to
  // spare (0: never). It saves a wake-up per step but takes a core; the Python client's local
  // processes spin 200e-6 s when their learner spins.
  double spin = 0.0;
  // CURVE (PROTOCOL.md §12), as Z85 text: all empty (a plain connection), or all set.
  std::string server_public_key;
  KeyPair client_keys;
};

// Fills the CURVE fields of `options` as `gym-remote client` does from --server-key PATH and
// --client-key PATH (key files, or keys as Z85 text), or from a shared secret. Give server_key and
// client_key, or secret, or none of them.
Status ConfigureSecurity(const std::string& server_key, const std::string& client_key, const std::string& secret,
                         ClientOptions* options);

class Client {
 public:
  // `envs` are not owned: they must outlive Run(). One env per slot the client serves (at most 65535).
  Client(ClientOptions options, std::vector<Env*> envs);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Connects and serves until the server sends CLOSE (ok), RequestStop() is called (kStopped, after
  // a BYE), or the client fails: refused (kRefused), key not authorized (kUnauthorized), security
  // handshakes failing (kHandshakeFailed), no server or no slot in time (kTimeout), the server gone
  // with reconnecting off or given up (kLost, kTimeout), bad options (kInvalidArgument).
  // Calls every env's close() before it returns.
  Status Run();

  // Asks Run() to leave (BYE) and return kStopped, within about 0.2 s when idle, else after the
  // command it is handling. Safe to call from a signal handler or another thread.
  void RequestStop();

  // The current session (routing id), the number of rejoins so far, and the slots served.
  std::string session() const;
  int rejoins() const;
  std::vector<std::int64_t> slots() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gym_remote
