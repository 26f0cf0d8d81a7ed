#include "channel.hpp"

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <string_view>

#include <fcntl.h>
#include <poll.h>
#include <sodium.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "gym_remote/protocol.hpp"
#include "text.hpp"

namespace gym_remote {

namespace {

constexpr char kGreetingMagic[] = "GR-DATA2";  // 8 bytes, then the 16-byte token (PROTOCOL.md §13.2)
constexpr std::size_t kTokenBytes = 16;
constexpr std::size_t kReadChunk = 1 << 16;

using Clock = std::chrono::steady_clock;

int MillisecondsLeft(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

Status Lost(const std::string& why) { return Status::Error(StatusCode::kLost, "the data channel " + why); }

}  // namespace

std::string DataChannel::NameFor(const std::string& endpoint) {
  unsigned char digest[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(digest, reinterpret_cast<const unsigned char*>(endpoint.data()), endpoint.size());
  const std::string_view bytes(reinterpret_cast<const char*>(digest), sizeof(digest));
  return std::string(1, '\0') + "gym_remote/data/" + Hex(bytes).substr(0, 40);
}

Status DataChannel::Connect(const std::string& endpoint, double timeout, std::unique_ptr<DataChannel>* out) {
  const std::string name = NameFor(endpoint);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, name.data(), name.size());
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());

  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Error(StatusCode::kInternal, std::string("socket(AF_UNIX) failed: ") + strerror(errno));
  std::unique_ptr<DataChannel> channel(new DataChannel(fd));
  timeval wait{};
  wait.tv_sec = static_cast<time_t>(timeout);
  wait.tv_usec = static_cast<suseconds_t>((timeout - static_cast<double>(wait.tv_sec)) * 1e6);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &wait, sizeof(wait));  // bounds connect() and the greeting
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    return Status::Error(StatusCode::kInternal, std::string("nothing listens for it: ") + strerror(errno));
  }
  ucred peer{};
  socklen_t peer_size = sizeof(peer);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &peer_size) != 0 || peer.uid != getuid()) {
    return Status::Error(StatusCode::kInternal, "its listener runs as uid " + std::to_string(peer.uid) +
                                                       ", not this process's " + std::to_string(getuid()));
  }
  std::string token(kTokenBytes, '\0');
  randombytes_buf(token.data(), token.size());
  const std::string greeting = std::string(kGreetingMagic, 8) + token;
  if (send(fd, greeting.data(), greeting.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(greeting.size())) {
    return Status::Error(StatusCode::kInternal, std::string("the greeting failed: ") + strerror(errno));
  }
  if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
    return Status::Error(StatusCode::kInternal, std::string("fcntl(O_NONBLOCK) failed: ") + strerror(errno));
  }
  channel->token_hex_ = Hex(token);
  *out = std::move(channel);
  return Status::Ok();
}

DataChannel::~DataChannel() {
  if (fd_ >= 0) close(fd_);
}

Status DataChannel::Send(const std::vector<std::string>& frames, int timeout_ms) {
  outgoing_.clear();
  const auto count = static_cast<std::uint32_t>(frames.size());
  outgoing_.append(reinterpret_cast<const char*>(&count), 4);  // little-endian, as every host this builds for
  for (const std::string& frame : frames) {
    const auto size = static_cast<std::uint64_t>(frame.size());
    outgoing_.append(reinterpret_cast<const char*>(&size), 8);
  }
  for (const std::string& frame : frames) outgoing_ += frame;
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::size_t sent = 0;
  while (sent < outgoing_.size()) {
    const ssize_t done = send(fd_, outgoing_.data() + sent, outgoing_.size() - sent, MSG_NOSIGNAL);
    if (done > 0) {
      sent += static_cast<std::size_t>(done);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Lost(std::string("closed: ") + strerror(errno));
    pollfd item{fd_, POLLOUT, 0};
    if (poll(&item, 1, MillisecondsLeft(deadline)) == 0) {
      return Status::Error(StatusCode::kTimeout, "the server took no message from this client");
    }
  }
  return Status::Ok();
}

bool DataChannel::Fill(bool wait, int timeout_ms, bool* would_block) {
  *would_block = false;
  if (wait) {
    pollfd item{fd_, POLLIN, 0};
    const int ready = poll(&item, 1, timeout_ms);
    if (ready == 0 || (ready < 0 && errno == EINTR)) {
      *would_block = true;
      return true;
    }
  }
  if (start_ == buffer_.size()) {
    buffer_.clear();
    start_ = 0;
  } else if (start_ >= kReadChunk) {
    buffer_.erase(0, start_);
    start_ = 0;
  }
  const std::size_t old_size = buffer_.size();
  buffer_.resize(old_size + kReadChunk);
  const ssize_t done = recv(fd_, &buffer_[old_size], kReadChunk, 0);
  buffer_.resize(old_size + (done > 0 ? static_cast<std::size_t>(done) : 0));
  if (done > 0) return true;
  if (done < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    *would_block = true;
    return true;
  }
  return false;
}

Status DataChannel::Complete(std::uint64_t max_frame_bytes, std::size_t* size) const {
  *size = 0;
  const std::size_t available = buffer_.size() - start_;
  const char* record = buffer_.data() + start_;
  if (available < 4) return Status::Ok();
  std::uint32_t count = 0;
  std::memcpy(&count, record, 4);
  if (count == 0 || count > kMaxFrames) return Lost("sent a record of " + std::to_string(count) + " frames");
  const std::size_t header = 4 + 8 * static_cast<std::size_t>(count);
  if (available < header) return Status::Ok();
  std::uint64_t total = header;
  for (std::uint32_t i = 0; i < count; ++i) {
    std::uint64_t length = 0;
    std::memcpy(&length, record + 4 + 8 * i, 8);
    if (length > max_frame_bytes) {
      return Lost("sent a frame of " + std::to_string(length) + " bytes, above the limit of " +
                  std::to_string(max_frame_bytes));
    }
    total += length;
  }
  if (available >= total) *size = static_cast<std::size_t>(total);
  return Status::Ok();
}

Status DataChannel::Read(std::vector<std::string>* frames, bool* got, std::uint64_t max_frame_bytes, int timeout_ms) {
  frames->clear();
  *got = false;
  bool would_block = false;
  if (!buffered()) {
    if (!Fill(false, 0, &would_block)) return Lost("closed");
    if (would_block) return Status::Ok();  // nothing has begun to arrive
  }
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::size_t size = 0;
  while (true) {
    Status complete = Complete(max_frame_bytes, &size);
    if (!complete.ok()) return complete;
    if (size > 0) break;
    if (Clock::now() >= deadline) {
      return Lost("delivered part of a record and then nothing for " + std::to_string(timeout_ms) + " ms");
    }
    if (!Fill(true, MillisecondsLeft(deadline), &would_block)) return Lost("closed in the middle of a record");
  }
  const char* record = buffer_.data() + start_;
  std::uint32_t count = 0;
  std::memcpy(&count, record, 4);
  std::size_t offset = 4 + 8 * static_cast<std::size_t>(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    std::uint64_t length = 0;
    std::memcpy(&length, record + 4 + 8 * i, 8);
    frames->emplace_back(record + offset, static_cast<std::size_t>(length));
    offset += static_cast<std::size_t>(length);
  }
  start_ += size;
  *got = true;
  return Status::Ok();
}

}  // namespace gym_remote
