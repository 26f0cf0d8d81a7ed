// Tests of the same-host data channel (PROTOCOL.md §13) over real Unix sockets: this program plays the
// server's side (an abstract listener) and checks the name, the greeting, records both ways (also when
// they arrive in pieces) and that a closed or misbehaving server ends the channel.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <sodium.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "channel.hpp"
#include "check.hpp"
#include "text.hpp"

using namespace gym_remote;

namespace {

constexpr std::uint64_t kLimit = 1 << 20;
constexpr int kWaitMs = 2000;

// The server's side: an abstract listener named for `endpoint`, and the connection it accepted.
class Listener {
 public:
  explicit Listener(const std::string& endpoint) {
    const std::string name = DataChannel::NameFor(endpoint);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, name.data(), name.size());
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
    ok_ = fd_ >= 0 && bind(fd_, reinterpret_cast<const sockaddr*>(&address), length) == 0 && listen(fd_, 4) == 0;
  }
  ~Listener() {
    if (peer_ >= 0) close(peer_);
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return ok_; }
  bool Accept() {
    timeval wait{2, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
    peer_ = accept(fd_, nullptr, nullptr);
    if (peer_ >= 0) setsockopt(peer_, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
    return peer_ >= 0;
  }
  std::string Receive(std::size_t size) {
    std::string data(size, '\0');
    std::size_t got = 0;
    while (got < size) {
      const ssize_t done = recv(peer_, &data[got], size - got, 0);
      if (done <= 0) break;
      got += static_cast<std::size_t>(done);
    }
    data.resize(got);
    return data;
  }
  void Send(const std::string& bytes) { (void)send(peer_, bytes.data(), bytes.size(), MSG_NOSIGNAL); }
  void ClosePeer() {
    close(peer_);
    peer_ = -1;
  }

 private:
  int fd_ = -1;
  int peer_ = -1;
  bool ok_ = false;
};

std::string Record(const std::vector<std::string>& frames) {
  std::string record;
  const auto count = static_cast<std::uint32_t>(frames.size());
  record.append(reinterpret_cast<const char*>(&count), 4);
  for (const std::string& frame : frames) {
    const auto size = static_cast<std::uint64_t>(frame.size());
    record.append(reinterpret_cast<const char*>(&size), 8);
  }
  for (const std::string& frame : frames) record += frame;
  return record;
}

// A record read whole, waiting for its first bytes.
Status ReadOne(DataChannel* channel, std::vector<std::string>* frames, bool* got) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
  Status status;
  do {
    status = channel->Read(frames, got, kLimit, kWaitMs);
    if (!status.ok() || *got) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  } while (std::chrono::steady_clock::now() < until);
  return status;
}

std::string UniqueEndpoint(const char* what) {
  return "ipc:///gym-remote-channel-test/" + std::string(what) + "-" + std::to_string(getpid());
}

void TestName() {
  // gym_remote.channel.address_for("tcp://127.0.0.1:5555") in Python
  const std::string expected = std::string(1, '\0') + "gym_remote/data/6ea0e7d97f6d1ecd2e70d7ea9708692b556c191c";
  CHECK(DataChannel::NameFor("tcp://127.0.0.1:5555") == expected);
}

void TestNoListener() {
  std::unique_ptr<DataChannel> channel;
  CHECK(!DataChannel::Connect(UniqueEndpoint("nobody"), 1.0, &channel).ok());
  CHECK(channel == nullptr);
}

void TestGreetingAndRecords() {
  const std::string endpoint = UniqueEndpoint("records");
  Listener listener(endpoint);
  CHECK(listener.ok());
  std::unique_ptr<DataChannel> channel;
  CHECK(DataChannel::Connect(endpoint, 1.0, &channel).ok());
  if (channel == nullptr || !listener.Accept()) {
    CHECK(false);
    return;
  }
  const std::string greeting = listener.Receive(24);
  CHECK(greeting.size() == 24 && greeting.compare(0, 8, "GR-DATA2") == 0);
  CHECK(channel->token_hex().size() == 32 && Hex(greeting.substr(8)) == channel->token_hex());

  std::vector<std::string> frames;
  bool got = true;
  CHECK(channel->Read(&frames, &got, kLimit, kWaitMs).ok() && !got);  // nothing yet: returns at once

  // Two records in one write, then one in pieces (its header split too), with an empty frame and a large one.
  const std::vector<std::string> first = {"GR-header", "x"};
  const std::vector<std::string> second = {"a"};
  const std::vector<std::string> third = {"head", "", std::string(300000, '\x7f')};
  listener.Send(Record(first) + Record(second));
  CHECK(ReadOne(channel.get(), &frames, &got).ok() && got && frames == first);
  CHECK(channel->buffered());
  CHECK(channel->Read(&frames, &got, kLimit, kWaitMs).ok() && got && frames == second);
  CHECK(!channel->buffered());
  const std::string record = Record(third);
  std::thread writer([&listener, &record] {
    listener.Send(record.substr(0, 6));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    listener.Send(record.substr(6, 100000));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    listener.Send(record.substr(100006));
  });
  CHECK(ReadOne(channel.get(), &frames, &got).ok() && got && frames == third);
  writer.join();

  // The client's records.
  const std::vector<std::string> reply = {"GR-reply", std::string(200000, 'r'), ""};
  CHECK(channel->Send(reply, kWaitMs).ok());
  CHECK(listener.Receive(Record(reply).size()) == Record(reply));

  // The server closes: end of file ends the channel.
  listener.ClosePeer();
  Status status = ReadOne(channel.get(), &frames, &got);
  CHECK(!status.ok() && status.code() == StatusCode::kLost && !got);
  CHECK(channel->Send({"late"}, kWaitMs).code() == StatusCode::kLost);
}

// A record that is not one ends the channel: a frame count of 0 or above 65536, a frame above the limit,
// or a record cut short.
void TestMalformed() {
  const std::uint32_t zero = 0, too_many = 65537, one = 1;
  const std::uint64_t huge = kLimit + 1;
  const std::string cases[] = {
      std::string(reinterpret_cast<const char*>(&zero), 4),
      std::string(reinterpret_cast<const char*>(&too_many), 4),
      std::string(reinterpret_cast<const char*>(&one), 4) + std::string(reinterpret_cast<const char*>(&huge), 8),
      Record({"complete"}).substr(0, 14),  // then the server closes
  };
  int index = 0;
  for (const std::string& bytes : cases) {
    const std::string endpoint = UniqueEndpoint("malformed") + "-" + std::to_string(index++);
    Listener listener(endpoint);
    std::unique_ptr<DataChannel> channel;
    if (!listener.ok() || !DataChannel::Connect(endpoint, 1.0, &channel).ok() || !listener.Accept()) {
      CHECK(false);
      continue;
    }
    listener.Receive(24);
    listener.Send(bytes);
    if (index == 4) listener.ClosePeer();
    std::vector<std::string> frames;
    bool got = false;
    Status status = ReadOne(channel.get(), &frames, &got);
    CHECK(status.code() == StatusCode::kLost && !got);
    if (status.ok()) std::fprintf(stderr, "case %d was read as a record\n", index);
  }
}

}  // namespace

int main() {
  if (sodium_init() < 0) return 1;
  TestName();
  TestNoListener();
  TestGreetingAndRecords();
  TestMalformed();
  return check::CheckSummary();
}
