// One session's connection to the server: a DEALER socket with the options of PROTOCOL.md §1, §8.1
// and §12, a socket monitor (a PAIR socket on an inproc address) that reports the connection's
// events, and, to a server on this host, the data channel of §13 that carries the membership's
// messages once the WELCOME took it. Every call is bounded in time; no exception leaves this class.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <zmq.hpp>

#include "channel.hpp"
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
  bool data_plane = true;           // offer a data channel (PROTOCOL.md §13) if the server's host is this one
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

  // The token of the data channel to name in HELLO's data_channel, empty without one.
  std::string channel_token() const { return channel_ ? channel_->token_hex() : std::string(); }
  // After the WELCOME: its data_channel says whether the server took the channel. Taken, every message
  // of the membership travels on it; not taken, it is closed. `max_frame_bytes` bounds what it reads.
  void TakeChannel(bool taken, std::uint64_t max_frame_bytes);
  bool carrying() const { return carrying_; }
  // Whether the channel that carried the membership closed (or broke): the server is gone.
  bool channel_lost() const { return channel_lost_; }

  // Busy-checks the data channel for a message for up to `seconds`, yielding the core between checks;
  // true once one has begun to arrive (false at once without a channel that carries the membership).
  bool SpinForMessage(double seconds);
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
  // Whether the membership's messages travel on the channel now (taken by the WELCOME, still open).
  bool on_channel() const { return carrying_ && !channel_lost_; }

  std::unique_ptr<DataChannel> channel_;
  bool carrying_ = false;
  bool channel_lost_ = false;
  std::uint64_t max_frame_bytes_ = 0;
  int liveness_ms_ = 10000;
};

}  // namespace gym_remote
