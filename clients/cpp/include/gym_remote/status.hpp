// The result of every public function of the library: no exception crosses its boundary.
#pragma once

#include <string>
#include <utility>

namespace gym_remote {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // a bad option, key file, endpoint: the caller's mistake (exit status 2)
  kProtocolError,    // a malformed message or value
  kEnvError,         // an env "raised": error_type names the exception class (e.g. "ValueError")
  kEncodeError,      // a value that cannot travel without pickle
  kRefused,          // the server refused the HELLO for good (REFUSE, waiting false)
  kUnauthorized,     // the server does not accept this client's key (ZAP status 400)
  kHandshakeFailed,  // the security handshake keeps failing (wrong server key or secret, mechanism mismatch)
  kTimeout,          // no server answered in time, no slot freed up in time
  kLost,             // the server went away and reconnecting is off (or gave up)
  kStopped,          // Client::request_stop() was called (a signal): the client said BYE and left
  kInternal,         // a bug, or a resource failure (libzmq, memory)
  kPending,          // Env::step only: the result comes later, through Client::CompleteStep (a pumped client)
};

// What a call did: ok, or what went wrong. For env errors (kEnvError), `type` and `module` name the
// Python exception class the server should raise, e.g. {"ValueError", "builtins"}, as PROTOCOL.md §8
// reports errors; other codes leave them empty (the client fills in "ProtocolError" and so on).
class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status Error(StatusCode code, std::string message) { return Status(code, std::move(message)); }
  // An env error of the Python class `module.type`.
  static Status EnvError(std::string type, std::string message, std::string module = "builtins") {
    Status status(StatusCode::kEnvError, std::move(message));
    status.type_ = std::move(type);
    status.module_ = std::move(module);
    return status;
  }

  // What Env::step answers to give its result later (Client::CompleteStep); only a client driven by
  // Start/Pump can wait for it.
  static Status Pending() { return Status(StatusCode::kPending, "step pending"); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  const std::string& type() const { return type_; }
  const std::string& module() const { return module_; }

  // The same status with `prefix` in front of its message.
  Status With(const std::string& prefix) const {
    Status status = *this;
    status.message_ = prefix + message_;
    return status;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  std::string type_;
  std::string module_;
};

// Common env errors, named as Python's built-in exception classes.
inline Status ValueError(std::string message) { return Status::EnvError("ValueError", std::move(message)); }
inline Status TypeError(std::string message) { return Status::EnvError("TypeError", std::move(message)); }
inline Status AttributeError(std::string message) {
  return Status::EnvError("AttributeError", std::move(message));
}
inline Status AssertionError(std::string message) {
  return Status::EnvError("AssertionError", std::move(message));
}

}  // namespace gym_remote

#define GYM_REMOTE_RETURN_IF_ERROR(expression)        \
  do {                                                \
    ::gym_remote::Status _gr_status = (expression);   \
    if (!_gr_status.ok()) return _gr_status;          \
  } while (false)
