#include "transport.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <poll.h>
#include <sched.h>

#include "gym_remote/log.hpp"
#include "gym_remote/protocol.hpp"

namespace gym_remote {

namespace {

constexpr int kSendHighWaterMark = 16;  // messages queued for the server at most (as the Python client)
constexpr int kReconnectIntervalMaxMs = 5000;
constexpr int kHeartbeatIntervalMs = 1000;
constexpr int kMaxHeartbeatTtlMs = 6553500;  // libzmq keeps the TTL in deciseconds, 16 bits

constexpr int kMonitoredEvents = ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;

Status ZmqError(const std::string& what, const zmq::error_t& error) {
  return Status::Error(StatusCode::kInternal, what + ": " + error.what());
}

}  // namespace

Status Connection::Open(const ConnectionOptions& options) {
  Close(0);
  try {
    auto socket = std::make_unique<zmq::socket_t>(*context_, zmq::socket_type::dealer);
    const int liveness_ms = std::max(1, static_cast<int>(std::min(options.liveness_timeout * 1000.0, 2.0e9)));
    socket->set(zmq::sockopt::linger, 0);
    socket->set(zmq::sockopt::routing_id, options.routing_id);
    socket->set(zmq::sockopt::sndtimeo, liveness_ms);
    socket->set(zmq::sockopt::sndhwm, kSendHighWaterMark);
    socket->set(zmq::sockopt::rcvhwm, 0);  // libzmq keeps reading whatever the envs do (PROTOCOL.md §8.1)
    socket->set(zmq::sockopt::reconnect_ivl_max, kReconnectIntervalMaxMs);
    // ZMTP heartbeats (PROTOCOL.md §8.1): IVL = min(1 s, L/4), TIMEOUT = TTL = L.
    socket->set(zmq::sockopt::heartbeat_ivl, std::min(kHeartbeatIntervalMs, std::max(1, liveness_ms / 4)));
    socket->set(zmq::sockopt::heartbeat_timeout, liveness_ms);
    socket->set(zmq::sockopt::heartbeat_ttl, std::min(liveness_ms, kMaxHeartbeatTtlMs));
    if (options.curve) {
      socket->set(zmq::sockopt::curve_serverkey, options.server_public_key);
      socket->set(zmq::sockopt::curve_publickey, options.client_keys.public_key);
      socket->set(zmq::sockopt::curve_secretkey, options.client_keys.secret_key);
    }
    const std::string monitor_address = "inproc://gym_remote-monitor-" + options.routing_id;
    if (zmq_socket_monitor(socket->handle(), monitor_address.c_str(), kMonitoredEvents) != 0) {
      return Status::Error(StatusCode::kInternal, std::string("zmq_socket_monitor failed: ") + zmq_strerror(zmq_errno()));
    }
    auto monitor = std::make_unique<zmq::socket_t>(*context_, zmq::socket_type::pair);
    monitor->set(zmq::sockopt::linger, 0);
    monitor->connect(monitor_address);
    try {
      socket->connect(options.endpoint);
    } catch (const zmq::error_t& error) {
      zmq_socket_monitor(socket->handle(), nullptr, 0);
      return Status::Error(StatusCode::kInvalidArgument,
                           "cannot connect to '" + options.endpoint + "': " + error.what());
    }
    socket_ = std::move(socket);
    monitor_ = std::move(monitor);
    liveness_ms_ = liveness_ms;
  } catch (const zmq::error_t& error) {
    return ZmqError("cannot open a ZeroMQ socket", error);
  }
  if (options.data_plane) {
    Status status = DataChannel::Connect(options.endpoint, options.liveness_timeout, &channel_);
    if (!status.ok()) Log(LogLevel::kDebug, "no data channel for " + options.endpoint + ": " + status.message());
  }
  return Status::Ok();
}

void Connection::TakeChannel(bool taken, std::uint64_t max_frame_bytes) {
  max_frame_bytes_ = max_frame_bytes;
  carrying_ = taken && channel_ != nullptr;
  if (!carrying_) channel_.reset();
}

void Connection::Close(int linger_ms) {
  try {
    if (socket_) {
      zmq_socket_monitor(socket_->handle(), nullptr, 0);
      socket_->set(zmq::sockopt::linger, linger_ms);
    }
    if (monitor_) monitor_->close();
    if (socket_) socket_->close();
  } catch (const zmq::error_t&) {  // closing must go on
  }
  monitor_.reset();
  socket_.reset();
  channel_.reset();
  carrying_ = false;
  channel_lost_ = false;
}

bool Connection::SpinForMessage(double seconds) {
  if (!on_channel()) return false;
  if (channel_->buffered()) return true;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                             std::chrono::duration<double>(seconds));
  pollfd item{channel_->fd(), POLLIN, 0};
  while (poll(&item, 1, 0) <= 0) {
    if (std::chrono::steady_clock::now() >= until) return false;
    sched_yield();
  }
  return true;
}

Status Connection::Poll(int timeout_ms, bool* message, bool* event) {
  *message = false;
  *event = false;
  if (!socket_) return Status::Error(StatusCode::kInternal, "the socket is closed");
  const bool channel = on_channel();
  if (channel && channel_->buffered()) {  // read already, so the descriptor may not be readable
    *message = true;
    return Status::Ok();
  }
  zmq::pollitem_t items[] = {{socket_->handle(), 0, ZMQ_POLLIN, 0},
                             {monitor_->handle(), 0, ZMQ_POLLIN, 0},
                             {nullptr, channel ? channel_->fd() : -1, ZMQ_POLLIN, 0}};
  try {
    zmq::poll(items, channel ? 3 : 2, std::chrono::milliseconds(timeout_ms));
  } catch (const zmq::error_t& error) {
    if (error.num() == EINTR) return Status::Ok();  // a signal: the caller checks whether to stop
    return ZmqError("zmq_poll failed", error);
  }
  *message = (items[0].revents & ZMQ_POLLIN) != 0 || (channel && (items[2].revents & (ZMQ_POLLIN | ZMQ_POLLERR)));
  *event = (items[1].revents & ZMQ_POLLIN) != 0;
  return Status::Ok();
}

Status Connection::Receive(std::vector<std::string>* frames, bool* got, bool* too_many) {
  frames->clear();
  *got = false;
  *too_many = false;
  if (!socket_) return Status::Error(StatusCode::kInternal, "the socket is closed");
  if (on_channel()) {
    Status status = channel_->Read(frames, got, max_frame_bytes_, liveness_ms_);
    if (!status.ok()) {
      Log(LogLevel::kWarning, status.message());
      channel_lost_ = true;  // the membership is over; the caller sees the connection dropped
      return Status::Ok();
    }
    if (*got) return Status::Ok();
  }
  try {
    zmq::message_t part;
    if (!socket_->recv(part, zmq::recv_flags::dontwait)) return Status::Ok();
    *got = true;
    frames->emplace_back(static_cast<const char*>(part.data()), part.size());
    while (part.more()) {  // the rest of a multipart message is there already
      if (!socket_->recv(part, zmq::recv_flags::none)) break;
      if (frames->size() < kMaxFrames) {
        frames->emplace_back(static_cast<const char*>(part.data()), part.size());
      } else {
        *too_many = true;
      }
    }
  } catch (const zmq::error_t& error) {
    if (error.num() == EINTR) return Status::Ok();
    return ZmqError("receiving failed", error);
  }
  return Status::Ok();
}

Status Connection::Send(const std::vector<std::string>& frames, bool dont_wait) {
  if (!socket_) return Status::Error(StatusCode::kInternal, "the socket is closed");
  if (carrying_) {
    if (channel_lost_) return Status::Error(StatusCode::kTimeout, "the data channel closed");
    Status status = channel_->Send(frames, dont_wait ? 0 : liveness_ms_);
    if (status.code() == StatusCode::kLost) {
      channel_lost_ = true;
      return Status::Error(StatusCode::kTimeout, status.message());
    }
    return status;
  }
  try {
    for (std::size_t i = 0; i < frames.size(); ++i) {
      zmq::send_flags flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      if (dont_wait) flags = flags | zmq::send_flags::dontwait;
      auto sent = socket_->send(zmq::buffer(frames[i].data(), frames[i].size()), flags);
      if (!sent) {
        if (i == 0) return Status::Error(StatusCode::kTimeout, "the server took no message from this client");
        // libzmq checks the queue's room at a message's first frame only: this does not happen.
        return Status::Error(StatusCode::kInternal, "a multipart message was cut short");
      }
    }
  } catch (const zmq::error_t& error) {
    return ZmqError("sending failed", error);
  }
  return Status::Ok();
}

bool Connection::NextEvent(MonitorEvent* event) {
  if (!monitor_) return false;
  try {
    zmq::message_t header;
    if (!monitor_->recv(header, zmq::recv_flags::dontwait)) return false;
    zmq::message_t address;
    if (header.more()) (void)monitor_->recv(address, zmq::recv_flags::none);
    if (header.size() < 6) return false;
    std::memcpy(&event->event, header.data(), 2);
    std::memcpy(&event->value, static_cast<const char*>(header.data()) + 2, 4);
    return true;
  } catch (const zmq::error_t&) {
    return false;
  }
}

}  // namespace gym_remote
