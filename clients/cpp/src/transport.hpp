// One session's ZeroMQ connection to the server: a DEALER socket with the options of PROTOCOL.md
// §1, §8.1 and §12, and a socket monitor (a PAIR socket on an inproc address) that reports the
// connection's events. Every call is bounded in time; no exception leaves this class.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <zmq.hpp>

#include "gym_remote/security.hpp"
#include "gym_remote/status.hpp"

namespace gym_remote {

struct ConnectionOptions {
  std::string endpoint;
  std::string routing_id;           // the session: 32 lowercase hex characters
  double liveness_timeout = 10.0;   // seconds (heartbeats; sends wait at most this long)
  bool curve = false;               // CURVE client with the keys below
  std::string server_public_key;    // Z85
  KeyPair client_keys;              // Z85
};

struct MonitorEvent {
  std::uint16_t event = 0;
  std::uint32_t value = 0;
};

class Connection {
 public:
  explicit Connection(zmq::context_t* context) : context_(context) {}
  ~Connection() { Close(0); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  Status Open(const ConnectionOptions& options);
  // Closes the socket; `linger_ms` bounds how long queued messages (a BYE) may still go out.
  void Close(int linger_ms);
  bool is_open() const { return socket_ != nullptr; }

  // Waits up to `timeout_ms` for a message (or a monitor event). A signal ends the wait early.
  Status Poll(int timeout_ms, bool* message, bool* event);
  // Receives the waiting message, all its frames (more than kMaxFrames: the rest is dropped and
  // `too_many` set). `got` false if none was waiting.
  Status Receive(std::vector<std::string>* frames, bool* got, bool* too_many);
  // Sends one message. Blocking sends wait at most the liveness timeout for room in the queue (then
  // kTimeout: the server stopped taking messages); `dont_wait` returns kTimeout at once instead.
  Status Send(const std::vector<std::string>& frames, bool dont_wait = false);
  // The next monitor event, if one is waiting.
  bool NextEvent(MonitorEvent* event);

 private:
  zmq::context_t* context_;
  std::unique_ptr<zmq::socket_t> socket_;
  std::unique_ptr<zmq::socket_t> monitor_;
};

}  // namespace gym_remote
