// The client's side of the same-host data plane (PROTOCOL.md §13): a Unix stream socket in Linux's
// abstract namespace, named after the endpoint, that carries the membership's messages as records
// (u32 frame count, u64 frame lengths, the frames). Every call is bounded in time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gym_remote/status.hpp"

namespace gym_remote {

class DataChannel {
 public:
  // Connects to the data channel of the server at `endpoint` (as the client was given it), checks
  // that its listener runs as this process's user, and greets it with a new token. Fails (and
  // nothing is left open) where no server of this host listens there: then the client uses ZeroMQ.
  static Status Connect(const std::string& endpoint, double timeout, std::unique_ptr<DataChannel>* out);
  // The abstract socket name (a NUL, then text) of the channel of the server at `endpoint`.
  static std::string NameFor(const std::string& endpoint);
  ~DataChannel();
  DataChannel(const DataChannel&) = delete;
  DataChannel& operator=(const DataChannel&) = delete;

  int fd() const { return fd_; }
  const std::string& token_hex() const { return token_hex_; }  // 32 lowercase hex digits
  bool buffered() const { return start_ < buffer_.size(); }     // bytes read but not yet taken

  // One message as a record; waits at most `timeout_ms` for room (then kTimeout). A closed peer: kLost.
  Status Send(const std::vector<std::string>& frames, int timeout_ms);
  // The next record, if one has begun to arrive (`got`); a record begun is read to its end, waiting at
  // most `timeout_ms`. End of file, or bytes that are not a record (a frame above `max_frame_bytes`):
  // kLost, the membership is over.
  Status Read(std::vector<std::string>* frames, bool* got, std::uint64_t max_frame_bytes, int timeout_ms);

 private:
  explicit DataChannel(int fd) : fd_(fd) {}
  // Reads what is there (waiting up to `timeout_ms` if `wait`); false at end of file or on an error.
  bool Fill(bool wait, int timeout_ms, bool* would_block);
  // The size of the complete record at the start of the buffer, 0 if incomplete; kLost if malformed.
  Status Complete(std::uint64_t max_frame_bytes, std::size_t* size) const;

  int fd_ = -1;
  std::string token_hex_;
  std::string buffer_;  // bytes received; those before start_ are taken
  std::size_t start_ = 0;
  std::string outgoing_;
};

}  // namespace gym_remote
