#include "gym_remote/client.hpp"

#include <sodium.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>

#include "gym_remote/codec.hpp"
#include "gym_remote/log.hpp"
#include "gym_remote/protocol.hpp"
#include "hosted_envs.hpp"
#include "text.hpp"
#include "transport.hpp"

namespace gym_remote {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kIdlePollMs = 200;        // how often an idle client checks whether it was asked to stop
// An unanswered HELLO is said again after 2 s, then twice as long each time up to 32 s (PROTOCOL.md §7): the
// learner drops a HELLO an interrupt of its call cut short.
constexpr double kHelloRepeatSeconds = 2.0;
constexpr double kMaxHelloRepeatSeconds = 32.0;
constexpr int kHandshakeFailures = 3;   // security handshakes cut off in a row before giving up
constexpr int kCloseLingerMs = 1000;    // how long a last BYE may still take to leave
constexpr int kNewSessionLingerMs = 0;  // nothing a closed session queued may reach the next server
constexpr double kNotNowWaitSeconds[2] = {0.5, 2.0};  // the random wait after a ZAP 500 (PROTOCOL.md §12.4)
constexpr std::uint64_t kUnlimitedFrameBytes = std::uint64_t{1} << 62;  // a WELCOME without max_message_bytes

// ClientOptions::data_plane: as given, else on unless GYM_REMOTE_DATA_PLANE says off (as the Python client).
bool DataPlaneWanted(const std::optional<bool>& choice) {
  if (choice) return *choice;
  const char* value = std::getenv("GYM_REMOTE_DATA_PLANE");
  std::string text = value == nullptr ? "" : value;
  text.erase(0, text.find_first_not_of(" \t\n"));
  text.erase(text.find_last_not_of(" \t\n") + 1);
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text != "0" && text != "off" && text != "false" && text != "no";
}

bool Forever(double seconds) { return !(seconds > 0) || std::isinf(seconds); }

std::string Seconds(double seconds) {  // Python's "%g"
  char text[32];
  std::snprintf(text, sizeof(text), "%g", seconds);
  return text;
}

class Deadline {
 public:
  static Deadline After(double seconds) {
    Deadline deadline;
    deadline.forever_ = Forever(seconds);
    if (!deadline.forever_) {
      deadline.at_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    }
    return deadline;
  }
  bool passed() const { return !forever_ && Clock::now() > at_; }

 private:
  bool forever_ = true;
  Clock::time_point at_;
};

std::string NewSession() {
  unsigned char bytes[16];
  randombytes_buf(bytes, sizeof(bytes));
  return Hex(std::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

std::string FormatSlots(const std::vector<std::int64_t>& slots) {
  if (slots.empty()) return "none";
  std::string out;
  std::size_t i = 0;
  while (i < slots.size()) {
    std::size_t j = i;
    while (j + 1 < slots.size() && slots[j + 1] == slots[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(slots[i]);
    if (j > i) out += "-" + std::to_string(slots[j]);
    i = j + 1;
  }
  return out;
}

bool NonEmptyDict(const Value& info) {
  return (info.kind() == Value::Kind::kDict && !info.entries().empty()) ||
         (info.kind() == Value::Kind::kPairDict && !info.pairs().empty());
}

// The reason of an EncodeValue failure whose `what` was "": its message less "cannot send PATH: ".
std::string EncodeReason(const Status& status, const std::vector<PathStep>& path) {
  std::size_t skip = std::string("cannot send ").size() + 2;
  for (const PathStep& step : path) skip += step.text.size();
  return skip <= status.message().size() ? status.message().substr(skip) : status.message();
}

Status Protocol(const std::string& message) { return Status::Error(StatusCode::kProtocolError, message); }

// The outcome of handling one command.
enum class Outcome { kContinue, kClosed, kEvicted };

// A received message: its header and frames, read in order.
struct Message {
  Header header;
  std::vector<std::string> frames;
  std::size_t next = 1;  // the next frame to read

  bool has_more() const { return next < frames.size(); }
};

}  // namespace

// -- security options -------------------------------------------------------------------------------

Status ConfigureSecurity(const std::string& server_key, const std::string& client_key, const std::string& secret,
                         ClientOptions* options) {
  if (!secret.empty()) {
    if (!server_key.empty() || !client_key.empty()) {
      return Status::Error(StatusCode::kInvalidArgument, "give secret, or server_key and client_key, not both");
    }
    KeyPair server, clients;
    GYM_REMOTE_RETURN_IF_ERROR(KeysFromSecret(secret, &server, &clients));
    options->server_public_key = server.public_key;
    options->client_keys = clients;
    return Status::Ok();
  }
  if (server_key.empty() && client_key.empty()) return Status::Ok();
  if (server_key.empty() || client_key.empty()) {
    return Status::Error(StatusCode::kInvalidArgument,
                         "a CURVE client needs both server_key (the server's NAME.key) and client_key (its own "
                         "NAME.key_secret)");
  }
  GYM_REMOTE_RETURN_IF_ERROR(LoadPublicKey(server_key, &options->server_public_key));
  return LoadKeyPair(client_key, &options->client_keys);
}

// -- the client -------------------------------------------------------------------------------------

struct Client::Impl {
  ClientOptions options;
  std::vector<Env*> envs;
  std::atomic<bool> stop{false};

  mutable std::mutex mutex;  // guards session, slots, rejoins for the accessors
  std::string session;
  std::vector<std::int64_t> slots;
  int rejoins = 0;

  std::unique_ptr<HostedEnvs> hosted;
  std::unique_ptr<zmq::context_t> context;
  std::unique_ptr<Connection> connection;
  bool secure = false;
  std::string previous_session;
  std::string welcomed_session;
  int cut_handshakes = 0;
  bool denied_for_now = false;
  std::optional<std::int64_t> max_message_bytes;
  std::string lost_reason;
  double join_timeout = 0;
  double typical_wait = 0;  // a moving average of the waits for a command over the data channel (seconds)
  bool learner_crowded = false;  // the latest command carried kFlagCrowded: no core to spare for a spin

  // Where the client stands between pumps.
  enum class Phase { kNew, kJoining, kServing, kDone };
  Phase phase = Phase::kNew;
  bool pumped = false;  // driven by Start/Pump (an env may answer a step later), not by Run
  Status final;         // once kDone
  // joining: until when, whether the HELLO still has to go (again), when to say it again
  Deadline join_deadline;
  bool in_line = false;
  bool hello_unsent = true;
  bool repeating = false;
  double repeat_after = kHelloRepeatSeconds;
  Deadline repeat;
  bool reopen_due = false;  // open a new socket (a new session) at reopen_at
  Clock::time_point reopen_at;
  double retry_delay = 0;   // a "not now" from the server's ZAP handler: wait this long before the next socket
  // A STEP held up by an env whose step() answered Status::Pending().
  struct PendingStep {
    std::uint64_t seq = 0;
    std::vector<std::size_t> indexes;
    std::vector<Value> actions, infos, finals;
    std::vector<std::optional<Status>> failures;
    bool each = false;
    std::size_t position = 0;  // of the env awaited
    bool completed = false;    // its result came (CompleteStep), for the next pump to go on with
    Status status;
    StepResult result;
  };
  std::optional<PendingStep> pending;

  std::string Prefix() const { return "client " + options.name + ": "; }

  Status Run();
  Status Start();
  Status Pump(double max_wait);
  Status Round(Clock::time_point until, bool* hold);
  void Finish(const Status& status);
  ClientState State() const;
  Status Validate();
  Status OpenSocket();
  void BeginJoin(double timeout);
  void ScheduleReopen();
  Status JoinRound(int poll_ms, bool* joined, bool* closed);
  Status TrySendHello();
  Value Hello();
  Status ReadWelcome(const Message& message);
  Status ConnectionDropped(bool* dropped);
  Status NoAnswer() const;
  Status ServeRound(int poll_ms, bool* lost, bool* closed);
  Status Served(const Status& status, Outcome outcome, bool* lost, bool* closed);
  Status Handle(Message* message, Outcome* outcome);
  Status ResumeStep();
  Status StepAnswered(std::uint64_t seq, const std::vector<std::size_t>& indexes, std::vector<Value> infos,
                      std::vector<Value> finals, CommandError* error, std::vector<std::optional<Status>>* failures);
  Status ReadIndexes(Message* message, std::vector<std::size_t>* indexes);
  Status ReadValue(Message* message, Value* value);
  std::string ReadText(Message* message, const char* key);
  Status ReadActions(Message* message, std::size_t count, std::vector<Value>* actions);
  Status SendResult(std::uint64_t seq, const std::vector<std::size_t>& indexes, std::vector<Value> infos,
                    std::vector<Value> finals, CommandError* error,
                    std::vector<std::optional<Status>>* failures = nullptr);
  Value ErrorReport(const Status& status) const;
  Status SendCallResult(std::uint64_t seq, const std::vector<std::size_t>& indexes, Value results);
  Status SendError(std::uint64_t seq, const CommandError& error, bool expected);
  Status CheckSizes(const std::vector<std::string>& frames) const;
  void SendBye(std::uint64_t seq, bool dont_wait);
};

Client::Client(ClientOptions options, std::vector<Env*> envs) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->envs = std::move(envs);
  if (impl_->options.name.empty()) impl_->options.name = HostName() + ":" + std::to_string(getpid());
}

Client::~Client() {
  try {  // a client dropped while it runs leaves (BYE) and closes its envs, as a stopped one
    if (impl_->phase == Impl::Phase::kJoining || impl_->phase == Impl::Phase::kServing) {
      impl_->SendBye(0, true);
      impl_->Finish(Status::Error(StatusCode::kStopped, impl_->Prefix() + "stopped"));
    }
  } catch (const std::exception&) {  // nothing leaves a destructor
  }
}

void Client::RequestStop() { impl_->stop.store(true); }

std::string Client::session() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->session;
}

int Client::rejoins() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->rejoins;
}

std::vector<std::int64_t> Client::slots() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->slots;
}

Status Client::Run() { return impl_->Run(); }

Status Client::Start() {
  impl_->pumped = true;
  return impl_->Start();
}

Status Client::Pump(double max_wait_seconds) { return impl_->Pump(max_wait_seconds); }

ClientState Client::state() const { return impl_->State(); }

Status Client::final_status() const { return impl_->phase == Impl::Phase::kDone ? impl_->final : Status::Ok(); }

std::int64_t Client::pending_env() const {
  const auto& pending = impl_->pending;
  if (!pending || pending->completed) return -1;
  return static_cast<std::int64_t>(pending->indexes[pending->position]);
}

Status Client::CompleteStep(std::size_t env, Status status, StepResult result) {
  auto& pending = impl_->pending;
  if (!pending || pending->completed) {
    return Status::Error(StatusCode::kInvalidArgument, "CompleteStep(env " + std::to_string(env) +
                                                           "): no step is pending (" +
                                                           (pending ? "it was completed already" : "none was") + ")");
  }
  const std::size_t awaited = pending->indexes[pending->position];
  if (env != awaited) {
    return Status::Error(StatusCode::kInvalidArgument, "CompleteStep(env " + std::to_string(env) +
                                                           "): the step pending is env " + std::to_string(awaited) +
                                                           "'s");
  }
  if (status.code() == StatusCode::kPending) {
    return Status::Error(StatusCode::kInvalidArgument, "CompleteStep: a completed step cannot be pending again");
  }
  pending->status = std::move(status);
  pending->result = std::move(result);
  pending->completed = true;
  return Status::Ok();
}

Status Client::Impl::Validate() {
  if (envs.empty()) return Status::Error(StatusCode::kInvalidArgument, "the client needs at least one env");
  if (envs.size() > kMaxEnvsPerClient) {
    return Status::Error(StatusCode::kInvalidArgument, "one client can host at most 65535 envs, got " +
                                                           std::to_string(envs.size()));
  }
  for (std::size_t i = 0; i < envs.size(); ++i) {
    if (envs[i] == nullptr) return Status::Error(StatusCode::kInvalidArgument, "env " + std::to_string(i) + " is null");
    for (std::size_t j = 0; j < i; ++j) {
      if (envs[j] == envs[i]) {
        return Status::Error(StatusCode::kInvalidArgument,
                             "envs " + std::to_string(j) + " and " + std::to_string(i) +
                                 " are the same env object: one env cannot serve several slots");
      }
    }
  }
  if (!(options.liveness_timeout > 0) || std::isinf(options.liveness_timeout)) {
    return Status::Error(StatusCode::kInvalidArgument, "liveness_timeout must be a positive number of seconds");
  }
  GYM_REMOTE_RETURN_IF_ERROR(CheckEndpoint(options.endpoint));
  const bool any = !options.server_public_key.empty() || !options.client_keys.public_key.empty() ||
                   !options.client_keys.secret_key.empty();
  secure = !options.server_public_key.empty() && !options.client_keys.public_key.empty() &&
           !options.client_keys.secret_key.empty();
  if (any && !secure) {
    return Status::Error(StatusCode::kInvalidArgument,
                         "CURVE needs the server's public key and this client's public and secret keys");
  }
  if (!secure && !IsLocalEndpoint(options.endpoint)) {
    Log(LogLevel::kWarning, Prefix() + "connecting to " + options.endpoint +
                                " without authentication or encryption; anyone on the network path can read and "
                                "change the traffic (see --server-key/--client-key or --secret-file)");
  }
  return Status::Ok();
}

Status Client::Impl::Run() {
  GYM_REMOTE_RETURN_IF_ERROR(Start());
  while (phase != Phase::kDone) Pump(1.0);
  return final;
}

Status Client::Impl::Start() {
  if (phase != Phase::kNew) return Status::Error(StatusCode::kInvalidArgument, Prefix() + "started already");
  Status status = Validate();
  if (status.ok() && sodium_init() < 0) status = Status::Error(StatusCode::kInternal, "libsodium failed to initialize");
  if (!status.ok()) {
    Finish(status);
    return status;
  }
  hosted = std::make_unique<HostedEnvs>(envs);
  try {
    context = std::make_unique<zmq::context_t>();
    connection = std::make_unique<Connection>(context.get());
    status = OpenSocket();
  } catch (const zmq::error_t& error) {
    status = Status::Error(StatusCode::kInternal, Prefix() + "ZeroMQ failed: " + error.what());
  }
  if (!status.ok()) {
    Finish(status);
    return status;
  }
  BeginJoin(options.connect_timeout);
  return Status::Ok();
}

Status Client::Impl::Pump(double max_wait) {
  if (phase == Phase::kNew) return Status::Error(StatusCode::kInvalidArgument, Prefix() + "Pump() before Start()");
  if (phase == Phase::kDone) return final;
  const double wait = max_wait > 0 ? std::min(max_wait, 1e6) : 0.0;
  const Clock::time_point until =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait));
  try {
    while (true) {
      bool hold = false;
      Status status = Round(until, &hold);
      if (!status.ok()) Finish(status);
      if (phase == Phase::kDone) return final;
      if (hold || Clock::now() >= until) return Status::Ok();
    }
  } catch (const zmq::error_t& error) {
    Finish(Status::Error(StatusCode::kInternal, Prefix() + "ZeroMQ failed: " + error.what()));
  } catch (const std::exception& error) {  // nothing may cross the boundary (bad_alloc, a bug)
    Finish(Status::Error(StatusCode::kInternal, Prefix() + "internal error: " + error.what()));
  }
  return final;
}

// One round of protocol work, waiting at most until `until` (and kIdlePollMs) for something to do.
// `hold`: nothing can happen before the host acts (a pending step not completed yet).
Status Client::Impl::Round(Clock::time_point until, bool* hold) {
  if (pending && !pending->completed && !stop.load()) {
    *hold = true;
    return Status::Ok();
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
  const int poll_ms = static_cast<int>(std::clamp<std::int64_t>(left, 0, kIdlePollMs));
  bool closed = false;
  if (phase == Phase::kJoining) {
    bool joined = false;
    GYM_REMOTE_RETURN_IF_ERROR(JoinRound(poll_ms, &joined, &closed));
    if (closed) Finish(Status::Ok());
    if (joined) phase = Phase::kServing;
    return Status::Ok();
  }
  bool lost = false;
  GYM_REMOTE_RETURN_IF_ERROR(ServeRound(poll_ms, &lost, &closed));
  if (closed) Finish(Status::Ok());
  if (!lost) return Status::Ok();
  if (!options.reconnect) {
    return Status::Error(StatusCode::kLost, Prefix() + "lost the server at " + options.endpoint + lost_reason);
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    ++rejoins;
  }
  lost_reason.clear();
  Log(LogLevel::kWarning, Prefix() + "lost the server at " + options.endpoint + "; rejoining");
  pending.reset();  // a step held up when the server went: its answer has no one to go to
  BeginJoin(options.reconnect_timeout);
  ScheduleReopen();
  return Status::Ok();
}

// The end: the envs closed, a last BYE given its time to leave, and the final status kept.
void Client::Impl::Finish(const Status& status) {
  if (phase == Phase::kDone) return;
  phase = Phase::kDone;
  final = status;
  pending.reset();
  if (hosted) hosted->Close();
  try {
    if (connection) connection->Close(kCloseLingerMs);
    connection.reset();
    if (context) context->close();  // waits for the linger of the last socket (bounded)
    context.reset();
  } catch (const zmq::error_t& error) {
    Log(LogLevel::kWarning, Prefix() + "closing the connection failed: " + error.what());
  }
}

ClientState Client::Impl::State() const {
  switch (phase) {
    case Phase::kNew: return ClientState::kNew;
    case Phase::kJoining:
      if (in_line) return ClientState::kInLine;
      return rejoins > 0 ? ClientState::kRejoining : ClientState::kConnecting;
    case Phase::kServing: return ClientState::kMember;
    case Phase::kDone: break;
  }
  if (final.ok() || final.code() == StatusCode::kStopped) return ClientState::kClosed;
  return final.code() == StatusCode::kRefused ? ClientState::kRefused : ClientState::kFailed;
}

// -- connection -------------------------------------------------------------------------------------

Status Client::Impl::OpenSocket() {
  connection->Close(kNewSessionLingerMs);
  previous_session = welcomed_session;  // a membership the server may still hold
  ConnectionOptions open;
  open.endpoint = options.endpoint;
  open.routing_id = NewSession();
  open.liveness_timeout = options.liveness_timeout;
  open.curve = secure;
  open.server_public_key = options.server_public_key;
  open.client_keys = options.client_keys;
  open.data_plane = DataPlaneWanted(options.data_plane);
  {
    std::lock_guard<std::mutex> lock(mutex);
    session = open.routing_id;
  }
  Status status = connection->Open(open);
  if (!status.ok()) return status.With(Prefix());
  return Status::Ok();
}

Status Client::Impl::ConnectionDropped(bool* dropped) {
  *dropped = connection->channel_lost();  // the server closed the data channel, or died
  MonitorEvent event;
  while (connection->NextEvent(&event)) {
    switch (event.event) {
      case ZMQ_EVENT_DISCONNECTED: *dropped = true; break;
      case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
        cut_handshakes = 0;
        denied_for_now = false;
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        if (++cut_handshakes >= kHandshakeFailures) {
          const std::string hint = secure ? "is the server key the server's public key (or the secret the server's)?"
                                          : "the server probably requires authentication (--server-key and "
                                            "--client-key, or --secret-file)";
          return Status::Error(StatusCode::kHandshakeFailed,
                               Prefix() + "the server at " + options.endpoint + " cut off the ZeroMQ handshake " +
                                   std::to_string(cut_handshakes) + " times in a row: " + hint);
        }
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL: {
        std::string message;
        if (event.value != ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
          char code[16];
          std::snprintf(code, sizeof(code), "%#x", event.value);
          message = Prefix() + "the ZeroMQ handshake with " + options.endpoint + " failed (protocol error " + code + ")";
        } else if (secure) {
          message = Prefix() + "the server at " + options.endpoint +
                    " does not use CURVE, but this client was given keys or a secret";
        } else {
          message = Prefix() + "the server at " + options.endpoint +
                    " requires authentication: give --server-key and --client-key, or --secret-file";
        }
        return Status::Error(StatusCode::kHandshakeFailed, message);
      }
      case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH: {
        if (event.value != 300 && event.value != 500) {
          return Status::Error(StatusCode::kUnauthorized,
                               Prefix() + "the server at " + options.endpoint +
                                   " does not accept this client's key (ZAP status " + std::to_string(event.value) +
                                   "): key not authorized; is its public key among the server's authorized keys?");
        }
        denied_for_now = true;  // too many connections, or too many handshakes: try again later
        const double delay = kNotNowWaitSeconds[0] + (kNotNowWaitSeconds[1] - kNotNowWaitSeconds[0]) *
                                                     (randombytes_uniform(1000001) / 1000000.0);
        char text[16];
        std::snprintf(text, sizeof(text), "%.1f", delay);
        Log(LogLevel::kWarning, Prefix() + "the server at " + options.endpoint +
                                    " is refusing connections for now (too many, or too fast); trying again in " +
                                    text + " s");
        // Close the socket before the wait: libzmq would otherwise connect it again 0.1 s later and send the
        // HELLO queued in it, which is not waiting (PROTOCOL.md §11 step 6). The next socket waits (ScheduleReopen).
        connection->Close(0);
        retry_delay = delay;
        *dropped = true;
        return Status::Ok();
      }
      default: break;
    }
  }
  return Status::Ok();
}

Status Client::Impl::NoAnswer() const {
  if (denied_for_now) {
    return Status::Error(StatusCode::kTimeout,
                         Prefix() + "the server at " + options.endpoint +
                             " kept refusing new connections (too many open connections, or too many handshakes "
                             "from this address) until the connect timeout");
  }
  return Status::Error(StatusCode::kTimeout, Prefix() + "no answer from a server at " + options.endpoint +
                                                 " within " + Seconds(join_timeout) +
                                                 " s (is the address right, and is the server running?)");
}

// -- handshake --------------------------------------------------------------------------------------

Value Client::Impl::Hello() {
  // The distinct spaces of the envs, and each env's index into them.
  auto distinct = [this](bool observation, Value* descriptions, Value* index) {
    std::vector<Value> known;
    *descriptions = Value::List();
    *index = Value::List();
    for (Env* env : envs) {
      Value description = (observation ? env->observation_space() : env->action_space()).Describe();
      std::size_t position = 0;
      while (position < known.size() && known[position] != description) ++position;
      if (position == known.size()) {
        known.push_back(description);
        descriptions->Append(std::move(description));
      }
      index->Append(Value::Int(static_cast<std::int64_t>(position)));
    }
  };
  Value observation_spaces, observation_index, action_spaces, action_index;
  distinct(true, &observation_spaces, &observation_index);
  distinct(false, &action_spaces, &action_index);
  // env 0's metadata, the entries that can travel
  Value metadata = Value::Dict();
  const Value env_metadata = envs[0]->metadata();
  if (env_metadata.kind() == Value::Kind::kDict) {
    for (const auto& entry : env_metadata.entries()) {
      EncodedValue encoded;
      if (EncodeValue(Value::Dict({entry}), &encoded).ok()) {
        metadata.Set(entry.first, entry.second);
      } else {
        Log(LogLevel::kDebug, Prefix() + "metadata key '" + entry.first + "' cannot travel; left out");
      }
    }
  }
  const std::optional<std::string> render_mode = envs[0]->render_mode();
  Value dtypes = Value::List();
  for (DType dtype : AllDTypes()) dtypes.Append(Value::String(DTypeStr(dtype)));
  std::string current_session;
  int current_rejoins;
  {
    std::lock_guard<std::mutex> lock(mutex);
    current_session = session;
    current_rejoins = rejoins;
  }
  Value hello = Value::Dict();
  hello.Set("protocol", Value::Int(kProtocolVersion));
  hello.Set("name", Value::String(options.name));
  hello.Set("host", Value::String(HostName()));
  hello.Set("pid", Value::Int(getpid()));
  hello.Set("session", Value::String(current_session));
  hello.Set("previous_session", previous_session.empty() ? Value() : Value::String(previous_session));
  hello.Set("rejoins", Value::Int(current_rejoins));
  hello.Set("wait", Value::Bool(options.wait_for_slot));
  hello.Set("num_envs", Value::Int(static_cast<std::int64_t>(envs.size())));
  hello.Set("observation_spaces", std::move(observation_spaces));
  hello.Set("observation_space_index", std::move(observation_index));
  hello.Set("action_spaces", std::move(action_spaces));
  hello.Set("action_space_index", std::move(action_index));
  hello.Set("metadata", std::move(metadata));
  hello.Set("metadata_pickle", Value());
  hello.Set("render_mode", render_mode ? Value::String(*render_mode) : Value());
  hello.Set("allow_pickle", Value::Bool(false));
  hello.Set("launch", Value());
  const std::string token = connection->channel_token();  // PROTOCOL.md §13.2
  hello.Set("data_channel", token.empty() ? Value() : Value::Dict({{"token", Value::String(token)}}));
  hello.Set("dtypes", std::move(dtypes));  // the dtypes it accepts in a STEP's array frames
  return hello;
}

void Client::Impl::BeginJoin(double timeout) {
  phase = Phase::kJoining;
  join_timeout = timeout;
  join_deadline = Deadline::After(timeout);
  in_line = false;
  hello_unsent = true;
  repeating = false;
}

// A new socket (a new session) that says HELLO again, after the wait a "not now" asked for.
void Client::Impl::ScheduleReopen() {
  reopen_due = true;
  reopen_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(retry_delay));
  retry_delay = 0;
}

// Says HELLO if the socket can queue it now (once per socket: the HELLO names the socket's session);
// leaves hello_unsent set if not.
Status Client::Impl::TrySendHello() {
  EncodedValue encoded;
  const Value hello = Hello();
  Status status = EncodeValue(hello, &encoded, "HELLO");
  if (!status.ok()) return status.With(Prefix());
  std::vector<std::string> frames = {
      PackHeader(MessageKind::kHello, 0, static_cast<std::uint16_t>(envs.size()), kFlagValue), encoded.body};
  for (std::string_view buffer : encoded.buffers) frames.emplace_back(buffer);
  status = connection->Send(frames, true);
  if (status.ok()) {
    Log(LogLevel::kInfo, Prefix() + "connecting to " + options.endpoint + " with " + std::to_string(envs.size()) +
                             " envs");
    hello_unsent = false;
    repeat_after = repeating ? std::min(2 * repeat_after, kMaxHelloRepeatSeconds) : kHelloRepeatSeconds;
    repeating = false;
    repeat = Deadline::After(repeat_after);
    return Status::Ok();
  }
  if (status.code() != StatusCode::kTimeout) return status.With(Prefix());
  // The socket cannot queue it: its connection was turned down (for good: an error; for now: reopen).
  bool reopen = false;
  GYM_REMOTE_RETURN_IF_ERROR(ConnectionDropped(&reopen));
  if (join_deadline.passed()) return NoAnswer();
  if (reopen) ScheduleReopen();  // libzmq gave up on the old socket's connection
  return Status::Ok();
}

Status Client::Impl::JoinRound(int poll_ms, bool* joined, bool* closed) {
  if (stop.load()) {
    SendBye(0, true);  // leaves the line, if it is in one
    return Status::Error(StatusCode::kStopped, Prefix() + "stopped before it joined the server at " +
                                                   options.endpoint);
  }
  if (reopen_due) {
    const Clock::time_point now = Clock::now();
    if (now < reopen_at) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(reopen_at - now).count();
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min<std::int64_t>(left + 1, poll_ms)));
      return Status::Ok();
    }
    reopen_due = false;
    GYM_REMOTE_RETURN_IF_ERROR(OpenSocket());
    hello_unsent = true;
    repeating = false;
  }
  if (hello_unsent) {
    GYM_REMOTE_RETURN_IF_ERROR(TrySendHello());
    if (hello_unsent && !reopen_due) std::this_thread::sleep_for(std::chrono::milliseconds(std::min(50, poll_ms)));
    return Status::Ok();
  }
  if (!in_line && repeat.passed()) {  // unanswered: the learner may have dropped it
    Log(LogLevel::kInfo, Prefix() + "no answer to HELLO within " + Seconds(repeat_after) + " s; saying it again");
    hello_unsent = true;
    repeating = true;
    return Status::Ok();
  }
  Message message;
  bool ready = false, event = false, got = false, too_many = false;
  GYM_REMOTE_RETURN_IF_ERROR(connection->Poll(poll_ms, &ready, &event));
  if (ready) GYM_REMOTE_RETURN_IF_ERROR(connection->Receive(&message.frames, &got, &too_many));
  if (!got) {
    bool dropped = false;
    GYM_REMOTE_RETURN_IF_ERROR(ConnectionDropped(&dropped));
    if (dropped) {
      // The server went away before it welcomed us (or while we waited in line): the HELLO went to
      // the old server. Start over with a new socket.
      if (!denied_for_now) {
        Log(LogLevel::kWarning, Prefix() + "the connection dropped before a WELCOME (the server restarted, or "
                                           "the HELLO exceeds its message size limit); saying HELLO again");
      }
      if (join_deadline.passed() && !in_line) return NoAnswer();
      ScheduleReopen();
      return Status::Ok();
    }
    if (join_deadline.passed()) {
      if (in_line) {
        return Status::Error(StatusCode::kTimeout, Prefix() + "no slot of the server at " + options.endpoint +
                                                       " freed up within " + Seconds(options.slot_timeout) + " s");
      }
      return NoAnswer();
    }
    return Status::Ok();
  }
  Status parsed = ParseHeader(message.frames[0], &message.header);
  if (!parsed.ok()) {
    Log(LogLevel::kWarning, Prefix() + "ignoring a malformed message before WELCOME: " + parsed.message());
    return Status::Ok();
  }
  const std::uint8_t kind = message.header.kind;
  if (kind == static_cast<std::uint8_t>(MessageKind::kRefuse)) {
    Value answer;
    message.next = 1;
    Status read = ReadValue(&message, &answer);
    if (!read.ok() || !answer.is_dict()) {
      return Status::Error(StatusCode::kRefused, Prefix() + "the server at " + options.endpoint +
                                                     " refused this client with a malformed REFUSE: " +
                                                     read.message());
    }
    const Value* waiting = answer.Find("waiting");
    const Value* reason = answer.Find("reason");
    const std::string why = reason != nullptr && reason->kind() == Value::Kind::kString ? reason->text() : "?";
    if (waiting != nullptr && waiting->kind() == Value::Kind::kBool && waiting->as_bool() && options.wait_for_slot) {
      if (!in_line) {
        Log(LogLevel::kInfo, Prefix() + why);
        in_line = true;
        join_deadline = Deadline::After(options.slot_timeout);
      }
      return Status::Ok();
    }
    return Status::Error(StatusCode::kRefused,
                         "server at " + options.endpoint + " refused client " + options.name + ": " + why);
  }
  if (kind == static_cast<std::uint8_t>(MessageKind::kClose)) {
    Log(LogLevel::kInfo, Prefix() + "the server at " + options.endpoint + " closed before a slot freed up; exiting");
    *closed = true;
    return Status::Ok();
  }
  if (kind != static_cast<std::uint8_t>(MessageKind::kWelcome)) {
    if (kind != static_cast<std::uint8_t>(MessageKind::kPing)) {
      Log(LogLevel::kWarning, Prefix() + "ignoring " + KindName(kind) + " before WELCOME");
    }
    return Status::Ok();
  }
  GYM_REMOTE_RETURN_IF_ERROR(ReadWelcome(message));
  bool ignored = false;
  GYM_REMOTE_RETURN_IF_ERROR(ConnectionDropped(&ignored));  // forget events from before this session's WELCOME
  in_line = false;
  *joined = true;
  std::lock_guard<std::mutex> lock(mutex);
  welcomed_session = session;
  return Status::Ok();
}

Status Client::Impl::ReadWelcome(const Message& received) {
  Message message = received;
  message.next = 1;
  Value welcome;
  Status status = ReadValue(&message, &welcome);
  auto malformed = [this](const std::string& why) {
    return Status::Error(StatusCode::kProtocolError, Prefix() + "malformed WELCOME from " + options.endpoint + ": " + why);
  };
  if (!status.ok()) return malformed(status.message());
  if (welcome.kind() != Value::Kind::kDict) return malformed("not a dict");
  const Value* slot_list = welcome.Find("slots");
  if (slot_list == nullptr || slot_list->kind() != Value::Kind::kList || slot_list->items().size() != envs.size()) {
    return malformed("'slots' must list one slot per env");
  }
  std::vector<std::int64_t> new_slots;
  for (const Value& slot : slot_list->items()) {
    if (slot.kind() != Value::Kind::kInt) return malformed("a slot is not an int");
    new_slots.push_back(slot.as_int());
  }
  const Value* mode_field = welcome.Find("autoreset_mode");
  AutoresetMode mode;
  if (mode_field == nullptr || mode_field->kind() != Value::Kind::kString ||
      !ParseAutoresetMode(mode_field->text(), &mode)) {
    return malformed("unknown autoreset_mode");
  }
  Space observation_space, action_space;
  const Value* observation = welcome.Find("observation_space");
  const Value* action = welcome.Find("action_space");
  if (observation == nullptr || action == nullptr) return malformed("the spaces are missing");
  status = Space::FromDescription(*observation, &observation_space);
  if (status.ok()) status = Space::FromDescription(*action, &action_space);
  if (!status.ok()) return malformed(status.message());
  const Value* reset_first = welcome.Find("reset_first");
  const Value* limit = welcome.Find("max_message_bytes");
  max_message_bytes.reset();
  if (limit != nullptr && limit->kind() == Value::Kind::kInt) max_message_bytes = limit->as_int();
  const Value* channel = welcome.Find("data_channel");
  connection->TakeChannel(channel != nullptr && channel->kind() == Value::Kind::kBool && channel->as_bool(),
                          max_message_bytes ? static_cast<std::uint64_t>(*max_message_bytes) : kUnlimitedFrameBytes);
  const Value* pickle = welcome.Find("allow_pickle");
  if (pickle != nullptr && pickle->kind() == Value::Kind::kBool && pickle->as_bool()) {
    Log(LogLevel::kWarning, Prefix() + "the server turned the trusted (pickle) mode on, which this client does not "
                                       "have; values are exchanged without pickle");
  }
  hosted->Configure(observation_space, action_space, mode,
                    reset_first != nullptr && reset_first->kind() == Value::Kind::kBool && reset_first->as_bool());
  {
    std::lock_guard<std::mutex> lock(mutex);
    slots = new_slots;
  }
  const Value* server = welcome.Find("server");
  Log(LogLevel::kInfo, Prefix() + "serving slots " + FormatSlots(new_slots) + " of " +
                           (server != nullptr && server->kind() == Value::Kind::kString ? server->text() : "?"));
  return Status::Ok();
}

// -- serving ----------------------------------------------------------------------------------------

void Client::Impl::SendBye(std::uint64_t seq, bool dont_wait) {
  Status status = connection->Send({PackHeader(MessageKind::kBye, seq)}, dont_wait);
  if (status.ok()) {
    Log(LogLevel::kInfo, Prefix() + "leaving");
  } else {
    Log(LogLevel::kInfo, Prefix() + "the server took no BYE; leaving without it");
  }
}

Status Client::Impl::ServeRound(int poll_ms, bool* lost, bool* closed) {
  if (stop.load()) {
    Log(LogLevel::kInfo, Prefix() + "stopping");
    SendBye(0, true);
    return Status::Error(StatusCode::kStopped, Prefix() + "stopped");
  }
  if (pending) return Served(ResumeStep(), Outcome::kContinue, lost, closed);  // completed (Round checked)
  bool ready = false, event = false, got = false, too_many = false;
  const Clock::time_point since = Clock::now();
  if (options.spin > 0 && typical_wait < options.spin && !learner_crowded) {
    ready = connection->SpinForMessage(options.spin);
  }
  if (!ready) GYM_REMOTE_RETURN_IF_ERROR(connection->Poll(poll_ms, &ready, &event));
  Message message;
  if (ready) GYM_REMOTE_RETURN_IF_ERROR(connection->Receive(&message.frames, &got, &too_many));
  if (got && connection->carrying()) {  // slow commands turn the spin off until they come fast again
    // (each counting for at most twice the spin, as in gym_remote/spin.py: one late command alone does not)
    const double waited = std::chrono::duration<double>(Clock::now() - since).count();
    typical_wait += 0.25 * (std::min(waited, 2 * options.spin) - typical_wait);
  }
  if (!got) {
    bool dropped = false;
    GYM_REMOTE_RETURN_IF_ERROR(ConnectionDropped(&dropped));
    if (dropped) {
      lost_reason = connection->channel_lost() ? ": its data channel closed" : ": the connection dropped";
      *lost = true;
    }
    return Status::Ok();
  }
  Outcome outcome = Outcome::kContinue;
  Status status;
  if (too_many) {
    Header header;
    const bool parsed = ParseHeader(message.frames[0], &header).ok();
    status = SendError(parsed ? header.seq : 0, CommandError{kNoEnv, Protocol("a message of more than 65536 frames")},
                       false);
  } else {
    status = Handle(&message, &outcome);
  }
  return Served(status, outcome, lost, closed);
}

// What a handled command (or a completed pending step) means for the membership.
Status Client::Impl::Served(const Status& status, Outcome outcome, bool* lost, bool* closed) {
  if (!status.ok()) {
    if (status.code() == StatusCode::kTimeout) {  // the server took none of our messages: it is gone
      Log(LogLevel::kWarning, Prefix() + "the server at " + options.endpoint + " took no reply from this client " +
                                  "within " + Seconds(options.liveness_timeout) +
                                  " s (it stopped reading, or is gone); counting the server as gone");
      lost_reason = ": it took no reply within the liveness timeout";
      *lost = true;
      return Status::Ok();
    }
    return status;
  }
  if (outcome == Outcome::kClosed) *closed = true;
  if (outcome == Outcome::kEvicted) {
    lost_reason = ": it evicted this client";
    *lost = true;
  }
  return Status::Ok();
}

// Goes on with the pending STEP now that its awaited env's result came: the next envs, then the RESULT.
Status Client::Impl::ResumeStep() {
  PendingStep& step = *pending;
  std::size_t next = kNoEnv;
  CommandError error;
  std::vector<std::optional<Status>>* each = step.each ? &step.failures : nullptr;
  const bool ok = hosted->ResumeStep(step.position, std::move(step.status), std::move(step.result), step.indexes,
                                     step.actions, &step.infos, &step.finals, &error, each, &next);
  if (ok && next != kNoEnv) {
    step.position = next;
    step.completed = false;
    step.status = Status::Ok();
    step.result = StepResult();
    return Status::Ok();
  }
  PendingStep done = std::move(*pending);
  pending.reset();
  if (!ok) return SendError(done.seq, error, false);
  return StepAnswered(done.seq, done.indexes, std::move(done.infos), std::move(done.finals), &error,
                      done.each ? &done.failures : nullptr);
}

// The RESULT of a STEP whose envs all answered, its envs' errors logged first (FLAG_EACH).
Status Client::Impl::StepAnswered(std::uint64_t seq, const std::vector<std::size_t>& indexes,
                                  std::vector<Value> infos, std::vector<Value> finals, CommandError* error,
                                  std::vector<std::optional<Status>>* failures) {
  if (failures != nullptr) {
    for (std::size_t position = 0; position < failures->size(); ++position) {
      const std::optional<Status>& failure = (*failures)[position];
      if (failure) {
        Log(LogLevel::kError, Prefix() + ErrorReport(*failure).Find("type")->text() + ": " + failure->message() +
                                  " (env " + std::to_string(indexes[position]) + ")");
      }
    }
  }
  return SendResult(seq, indexes, std::move(infos), std::move(finals), error, failures);
}

Status Client::Impl::Handle(Message* message, Outcome* outcome) {
  *outcome = Outcome::kContinue;
  Header& header = message->header;
  Status parsed = ParseHeader(message->frames[0], &header);
  if (!parsed.ok()) return SendError(0, CommandError{kNoEnv, parsed}, false);
  learner_crowded = (header.flags & kFlagCrowded) != 0;
  const std::uint64_t seq = header.seq;
  if (header.version != kProtocolVersion) {
    return SendError(seq,
                     CommandError{kNoEnv, Protocol("server speaks protocol version " + std::to_string(header.version) +
                                                   ", this client 2")},
                     false);
  }
  CommandError error;
  std::vector<std::size_t> indexes;
  Value command;
  switch (static_cast<MessageKind>(header.kind)) {
    case MessageKind::kStep: {
      Status status = ReadIndexes(message, &indexes);
      std::vector<Value> actions;
      if (status.ok()) status = ReadActions(message, indexes.size(), &actions);
      if (!status.ok()) return SendError(seq, CommandError{kNoEnv, status}, false);
      std::vector<Value> infos, finals;
      std::vector<std::optional<Status>> failures;
      std::vector<std::optional<Status>>* each = (header.flags & kFlagEach) ? &failures : nullptr;
      std::size_t awaited = kNoEnv;
      if (!hosted->Step(indexes, actions, &infos, &finals, &error, each, pumped ? &awaited : nullptr)) {
        return SendError(seq, error, false);
      }
      if (awaited != kNoEnv) {  // an env answers later (CompleteStep): nothing more is answered until then
        pending.emplace();
        pending->seq = seq;
        pending->indexes = std::move(indexes);
        pending->actions = std::move(actions);
        pending->infos = std::move(infos);
        pending->finals = std::move(finals);
        pending->failures = std::move(failures);
        pending->each = each != nullptr;
        pending->position = awaited;
        return Status::Ok();
      }
      return StepAnswered(seq, indexes, std::move(infos), std::move(finals), &error, each);
    }
    case MessageKind::kReset: {
      Status status = ReadIndexes(message, &indexes);
      if (status.ok()) status = ReadValue(message, &command);
      const Value* seeds = command.Find("seeds");
      if (status.ok() && (!command.is_dict() || seeds == nullptr || seeds->kind() != Value::Kind::kList ||
                          seeds->items().size() != indexes.size())) {
        status = Protocol("RESET must carry a list of " + std::to_string(indexes.size()) + " seeds");
      }
      if (!status.ok()) return SendError(seq, CommandError{kNoEnv, status}, false);
      const Value* options_value = command.Find("options");  // absent: reset(seed=...) without the keyword
      std::vector<Value> infos;
      if (!hosted->Reset(indexes, seeds->items(), options_value, &infos, &error)) return SendError(seq, error, false);
      return SendResult(seq, indexes, infos, {}, &error);
    }
    case MessageKind::kCall: {
      Status status = ReadIndexes(message, &indexes);
      if (status.ok()) status = ReadValue(message, &command);
      const Value* name = command.Find("name");
      const Value* query = command.Find("query");
      if (status.ok() && !command.is_dict()) status = Protocol("CALL must carry a dict");
      if (status.ok() && (name == nullptr || name->kind() != Value::Kind::kString)) {
        status = Protocol(KindName(header.kind) + "'s name must be a string, not " +
                          (name != nullptr ? name->TypeName() : std::string("missing")));
      }
      std::string query_name;
      if (status.ok() && query != nullptr && !query->is_none()) {
        if (query->kind() != Value::Kind::kString || query->text() != "has_attr") {
          status = Protocol("unknown CALL query " + query->Repr() + ": expected 'has_attr' or none");
        } else {
          query_name = query->text();
        }
      }
      if (status.ok() && query_name.empty()) {  // a plain call carries args and kwargs (PROTOCOL.md §5.3)
        const Value* args = command.Find("args");
        const Value* kwargs = command.Find("kwargs");
        if (args == nullptr || (args->kind() != Value::Kind::kList && args->kind() != Value::Kind::kTuple) ||
            kwargs == nullptr || !kwargs->is_dict()) {
          status = Protocol("CALL must carry 'args' (a list) and 'kwargs' (a dict)");
        }
      }
      if (!status.ok()) return SendError(seq, CommandError{kNoEnv, status}, false);
      std::vector<Value> results;
      if (!hosted->Call(indexes, name->text(), query_name, &results, &error)) {
        return SendError(seq, error, error.status.type() == "AttributeError");
      }
      return SendCallResult(seq, indexes, Value::List(std::move(results)));
    }
    case MessageKind::kSetAttr: {
      Status status = ReadIndexes(message, &indexes);
      if (status.ok()) status = ReadValue(message, &command);
      const Value* name = command.Find("name");
      const Value* values = command.Find("values");
      const Value* outermost = command.Find("outermost");
      if (status.ok() && !command.is_dict()) status = Protocol("SET_ATTR must carry a dict");
      if (status.ok() && outermost != nullptr && outermost->kind() != Value::Kind::kBool) {
        status = Protocol("SET_ATTR's outermost must be true or false, got " + outermost->Repr());
      }
      if (status.ok() && (values == nullptr || values->kind() != Value::Kind::kList ||
                          values->items().size() != indexes.size())) {
        status = Protocol("SET_ATTR must carry a list of " + std::to_string(indexes.size()) + " values");
      }
      if (status.ok() && (name == nullptr || name->kind() != Value::Kind::kString)) {
        status = Protocol(KindName(header.kind) + "'s name must be a string, not " +
                          (name != nullptr ? name->TypeName() : std::string("missing")));
      }
      if (!status.ok()) return SendError(seq, CommandError{kNoEnv, status}, false);
      if (!hosted->SetAttr(indexes, name->text(), values->items(), &error)) return SendError(seq, error, false);
      return SendCallResult(seq, indexes, Value());
    }
    case MessageKind::kPing: return Status::Ok();  // a probe: the server checks that this connection routes
    case MessageKind::kWelcome: return Status::Ok();  // the answer to a repeated HELLO (the first came already)
    case MessageKind::kClose:
      SendBye(seq, false);
      Log(LogLevel::kInfo, Prefix() + "the server closed; exiting");
      *outcome = Outcome::kClosed;
      return Status::Ok();
    case MessageKind::kEvict:
      Log(LogLevel::kWarning, Prefix() + "the server ended this membership: " + ReadText(message, "reason"));
      *outcome = Outcome::kEvicted;
      return Status::Ok();
    case MessageKind::kError:
      Log(LogLevel::kWarning, Prefix() + "the server reports an error: " + ReadText(message, "message"));
      return Status::Ok();
    default:
      return SendError(seq, CommandError{kNoEnv, Protocol("unexpected " + KindName(header.kind) +
                                                           " message from the server")},
                       false);
  }
}

Status Client::Impl::ReadIndexes(Message* message, std::vector<std::size_t>* indexes) {
  const Header& header = message->header;
  if (!(header.flags & kFlagSubset)) {
    if (header.count != hosted->count()) {
      return Protocol(KindName(header.kind) + " for " + std::to_string(header.count) + " envs, this client hosts " +
                      std::to_string(hosted->count()));
    }
    *indexes = hosted->all();
    return Status::Ok();
  }
  if (!message->has_more()) return Protocol(KindName(header.kind) + " with FLAG_SUBSET lacks its index frame");
  return ParseIndexFrame(message->frames[message->next++], header.count, hosted->count(), indexes);
}

Status Client::Impl::ReadValue(Message* message, Value* value) {
  if (!(message->header.flags & kFlagValue)) {
    return Protocol(KindName(message->header.kind) + " message without its value section");
  }
  if (!message->has_more()) return Protocol("malformed message: the value section is missing");
  const std::string& body = message->frames[message->next];
  std::vector<std::string_view> buffers;
  for (std::size_t i = message->next + 1; i < message->frames.size(); ++i) buffers.emplace_back(message->frames[i]);
  message->next = message->frames.size();
  return DecodeValue(body, buffers, value);
}

// The string `key` of a message's value (EVICT's reason, a server ERROR's message), "?" if it has none.
std::string Client::Impl::ReadText(Message* message, const char* key) {
  Value value;
  if (!ReadValue(message, &value).ok()) return "?";
  const Value* text = value.Find(key);
  return text != nullptr && text->kind() == Value::Kind::kString ? text->text() : "?";
}

Status Client::Impl::ReadActions(Message* message, std::size_t count, std::vector<Value>* actions) {
  const Header& header = message->header;
  if (header.flags & kFlagValue) {
    Value command;
    GYM_REMOTE_RETURN_IF_ERROR(ReadValue(message, &command));
    const Value* list = command.Find("actions");
    if (list == nullptr || list->kind() != Value::Kind::kList || list->items().size() != count) {
      return Protocol("STEP must carry a list of " + std::to_string(count) + " actions");
    }
    *actions = list->items();
    return Status::Ok();
  }
  if (!hosted->action_has_layout()) {
    return Protocol("STEP without actions: this action space needs them in a value section");
  }
  const std::vector<Leaf>& leaves = hosted->action_leaves();
  std::vector<DType> dtypes;
  if (header.flags & kFlagDtypes) {
    GYM_REMOTE_RETURN_IF_ERROR(ParseStepDtypes(message->frames[0], leaves.size(), &dtypes));
  } else {
    for (const Leaf& leaf : leaves) dtypes.push_back(leaf.dtype);
  }
  std::vector<std::string_view> frames;
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    if (!message->has_more()) return Protocol("STEP: the message ended before all its array frames");
    const std::string& frame = message->frames[message->next++];
    std::size_t size = 0;
    ShapeSize(leaves[i].shape, &size);
    const std::size_t expected = count * size * ItemSize(dtypes[i]);
    if (frame.size() != expected) {
      return Protocol("STEP: an array frame of " + std::to_string(frame.size()) + " bytes, expected " +
                      std::to_string(expected));
    }
    frames.emplace_back(frame);
  }
  if (message->has_more()) return Protocol("STEP message has more frames than the action space needs");
  return hosted->SplitActions(frames, count, dtypes, actions);
}

// -- replies ----------------------------------------------------------------------------------------

Status Client::Impl::CheckSizes(const std::vector<std::string>& frames) const {
  if (!max_message_bytes) return Status::Ok();
  std::size_t largest = 0;
  for (const std::string& frame : frames) largest = std::max(largest, frame.size());
  if (largest > static_cast<std::uint64_t>(*max_message_bytes)) {
    return Protocol("a frame of " + std::to_string(largest) + " bytes exceeds the server's message size limit of " +
                    std::to_string(*max_message_bytes) +
                    " bytes (RemoteVectorEnv(max_message_bytes=...)); host fewer envs per client or raise the limit");
  }
  return Status::Ok();
}

Status Client::Impl::SendResult(std::uint64_t seq, const std::vector<std::size_t>& indexes, std::vector<Value> infos,
                                std::vector<Value> finals, CommandError* error,
                                std::vector<std::optional<Status>>* failures) {
  std::vector<Value> observations;
  if (!hosted->observation_has_layout()) observations = hosted->ObservationList(indexes).items();
  // With FLAG_EACH a value that cannot travel is the error of its env alone: its entries are blanked and the
  // value encoded again (each round blanks one more env); without, it is the error of the whole command.
  for (std::size_t round = 0; round <= indexes.size(); ++round) {
    Value extra = Value::Dict();
    if (!hosted->observation_has_layout()) extra.Set("obs", Value::List(observations));
    bool any_info = false;
    for (const Value& info : infos) any_info = any_info || NonEmptyDict(info);
    if (any_info) extra.Set("infos", Value::List(infos));
    if (!finals.empty()) extra.Set("final", Value::List(finals));
    bool any_failure = false;
    if (failures != nullptr) {
      Value::Items reports;
      for (const std::optional<Status>& failure : *failures) {
        reports.push_back(failure ? ErrorReport(*failure) : Value());
        any_failure = any_failure || failure.has_value();
      }
      if (any_failure) extra.Set("errors", Value::List(std::move(reports)));
    }
    const bool has_value = !extra.entries().empty();
    std::vector<std::string> frames;
    hosted->ResultFrames(seq, has_value ? kFlagValue : 0, indexes, &frames);
    if (has_value) {
      EncodedValue encoded;
      std::vector<PathStep> path;
      Status status = EncodeValue(extra, &encoded, "", &path);
      if (!status.ok()) {  // reported as the error of the env whose value cannot travel
        std::string label = "the result";
        std::size_t env = kNoEnv, position = indexes.size();
        if (path.size() >= 2 && path[1].is_index && path[1].index < indexes.size()) {
          position = path[1].index;
          env = indexes[position];
          const std::string slot = std::to_string(slots[env]);
          std::string rest;
          const bool final = path[0].key == "final";
          for (std::size_t i = final ? 3 : 2; i < path.size(); ++i) rest += path[i].text;
          if (final) {
            const bool observation = path.size() >= 3 && path[2].is_index && path[2].index == 0;
            label = std::string("the final ") + (observation ? "observation" : "info") + " of slot " + slot + rest;
          } else {
            label = std::string("the ") + (path[0].key == "obs" ? "observation" : "info") + " of slot " + slot + rest;
          }
        }
        const std::string reason = EncodeReason(status, path);
        *error = CommandError{env, Status::EnvError("EncodeError", "cannot send " + label + ": " + reason,
                                                    "gym_remote.errors")};
        if (failures == nullptr || position == indexes.size() || path[0].key == "errors") {
          return SendError(seq, *error, false);
        }
        Log(LogLevel::kError, Prefix() + "EncodeError: " + error->status.message());
        (*failures)[position] = error->status;
        infos[position] = Value::Dict();
        if (!finals.empty()) finals[position] = Value();
        if (!observations.empty()) observations[position] = Value();
        continue;
      }
      frames.push_back(std::move(encoded.body));
      for (std::string_view buffer : encoded.buffers) frames.emplace_back(buffer);
    }
    Status sizes = CheckSizes(frames);
    if (!sizes.ok()) return SendError(seq, CommandError{kNoEnv, sizes}, false);
    return connection->Send(frames);
  }
  return SendError(seq, *error, false);
}

Status Client::Impl::SendCallResult(std::uint64_t seq, const std::vector<std::size_t>& indexes, Value results) {
  Value reply = Value::Dict();
  reply.Set("results", std::move(results));
  EncodedValue encoded;
  std::vector<PathStep> path;
  Status status = EncodeValue(reply, &encoded, "", &path);
  if (!status.ok()) {
    std::string label = "the result";
    if (path.size() >= 2 && path[1].is_index && path[1].index < indexes.size()) {
      label += " of slot " + std::to_string(slots[indexes[path[1].index]]);
      for (std::size_t i = 2; i < path.size(); ++i) label += path[i].text;
    }
    const std::string reason = EncodeReason(status, path);
    return SendError(seq, CommandError{kNoEnv, Status::EnvError("EncodeError", "cannot send " + label + ": " + reason,
                                                                "gym_remote.errors")},
                     false);
  }
  std::vector<std::string> frames = {PackHeader(MessageKind::kCallResult, seq, 0, kFlagValue), encoded.body};
  for (std::string_view buffer : encoded.buffers) frames.emplace_back(buffer);
  Status sizes = CheckSizes(frames);
  if (!sizes.ok()) return SendError(seq, CommandError{kNoEnv, sizes}, false);
  return connection->Send(frames);
}

// What an ERROR (or a RESULT's `errors` entry) tells of a failure: {"type", "module", "message", "traceback"}.
Value Client::Impl::ErrorReport(const Status& status) const {
  std::string type = status.type(), module = status.module();
  if (status.code() != StatusCode::kEnvError) {
    const bool ours = status.code() == StatusCode::kProtocolError || status.code() == StatusCode::kEncodeError;
    type = status.code() == StatusCode::kEncodeError ? "EncodeError"
           : ours                                    ? "ProtocolError"
                                                     : "RuntimeError";
    module = ours ? "gym_remote.errors" : "builtins";
  }
  if (type.empty()) type = "RuntimeError";
  Value report = Value::Dict();
  report.Set("type", Value::String(type));
  report.Set("module", module.empty() ? Value() : Value::String(module));
  report.Set("message", Value::String(status.message()));
  report.Set("traceback", Value::String("Traceback: not available (raised in the C++ client " + options.name +
                                        ")\n" + type + ": " + status.message() + "\n"));
  return report;
}

Status Client::Impl::SendError(std::uint64_t seq, const CommandError& error, bool expected) {
  Value report = ErrorReport(error.status);
  const std::string type = report.Find("type")->text();
  report.Set("index", error.index == kNoEnv ? Value() : Value::Int(static_cast<std::int64_t>(error.index)));
  report.Set("name", Value::String(options.name));
  report.Set("launch", Value());
  Log(expected ? LogLevel::kDebug : LogLevel::kError, Prefix() + type + ": " + error.status.message());
  EncodedValue encoded;
  Status status = EncodeValue(report, &encoded, "ERROR");
  if (!status.ok()) {  // a message that is not UTF-8: say so instead
    report.Set("message", Value::String("(an error whose message is not valid UTF-8)"));
    report.Set("traceback", Value::String(""));
    GYM_REMOTE_RETURN_IF_ERROR(EncodeValue(report, &encoded, "ERROR"));
  }
  std::vector<std::string> frames = {PackHeader(MessageKind::kError, seq, 0, kFlagValue), encoded.body};
  return connection->Send(frames);
}

}  // namespace gym_remote
