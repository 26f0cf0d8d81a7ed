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

// Where a client stands (Client::state()).
enum class ClientState {
  kNew,         // not started
  kConnecting,  // saying HELLO to the server, waiting for its WELCOME
  kInLine,      // the server is full: waiting in line for a slot
  kMember,      // serving slots
  kRejoining,   // the server went away: joining it again as a new session
  kClosed,      // ended: the server closed, or the client was stopped (the final status says which)
  kRefused,     // ended: the server refused this client
  kFailed,      // ended: any other failure (the final status says what)
};

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
  // Calls every env's close() before it returns. The same as Start() and Pump() until the end.
  Status Run();

  // The same client driven from the caller's own loop (a game's main loop): Start() checks the options
  // and opens the connection without waiting for anything; each Pump(max_wait) then does the protocol
  // work that is ready (connecting, handshake, commands, liveness, rejoining), calling the envs on the
  // calling thread, and returns within about max_wait seconds (0: only what is ready now; the end of
  // the client, which lets a last BYE leave, may take up to 1 s more). Pump returns ok while the
  // client goes on, and its final status (as Run's) once it ended; state() says which. Call Start,
  // Pump and CompleteStep from one thread.
  Status Start();
  Status Pump(double max_wait_seconds);
  ClientState state() const;
  // The final status once the client ended (state() kClosed, kRefused or kFailed), else ok.
  Status final_status() const;

  // A step an env answered with Status::Pending(): while one is pending the client answers nothing
  // (replies stay in order) and Pump returns at once; CompleteStep gives env `env`'s result (its
  // index among the client's envs), and the next Pump goes on with the command. pending_env() is the
  // env whose step is awaited, or -1.
  std::int64_t pending_env() const;
  Status CompleteStep(std::size_t env, Status status, StepResult result);

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
