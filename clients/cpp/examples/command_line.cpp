#include "command_line.hpp"

#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gym_remote/log.hpp"
#include "gym_remote/security.hpp"

namespace command_line {

namespace {

const char* g_program = "gym_remote_client";
std::atomic<gym_remote::Client*> g_client{nullptr};
volatile sig_atomic_t g_signal = 0;

void OnSignal(int number) {
  g_signal = number;
  gym_remote::Client* client = g_client.load();
  if (client != nullptr) client->RequestStop();  // an atomic store: async-signal-safe
}

void Usage(FILE* out) {
  std::fprintf(out,
               "usage: %s [-h] [--num-envs K] [--name NAME] [--liveness-timeout SECONDS]\n"
               "       [--connect-timeout SECONDS] [--slot-timeout SECONDS] [--reconnect-timeout SECONDS]\n"
               "       [--no-reconnect] [--exit-if-full] [--no-data-plane] [--spin SECONDS] [--server-key PATH]\n"
               "       [--client-key PATH] [--secret-file PATH] [--log-level {DEBUG,INFO,WARNING,ERROR}] ENDPOINT\n",
               g_program);
}

int UsageError(const std::string& message) {
  Usage(stderr);
  std::fprintf(stderr, "%s: error: %s\n", g_program, message.c_str());
  return kExitUsage;
}

bool ParseSeconds(const std::string& text, double* seconds, std::string* why) {
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end == nullptr || *end != '\0' || errno == ERANGE || std::isnan(value)) {
    *why = "invalid _seconds value: '" + text + "'";
    return false;
  }
  if (value <= 0) {
    *why = "must be positive, got " + text;
    return false;
  }
  *seconds = value;  // inf: forever
  return true;
}

}  // namespace

int Parse(int argc, char** argv, const char* description, Arguments* arguments) {
  if (argc > 0 && argv[0] != nullptr) {
    const char* slash = std::strrchr(argv[0], '/');
    g_program = slash != nullptr ? slash + 1 : argv[0];
  }
  gym_remote::ClientOptions& options = arguments->options;
  std::string endpoint, server_key, client_key, secret_file;
  bool have_endpoint = false;
  gym_remote::LogLevel level = gym_remote::LogLevel::kWarning;
  for (int i = 1; i < argc; ++i) {
    std::string argument = argv[i];
    std::string value;
    bool inline_value = false;
    if (argument.rfind("--", 0) == 0 && argument.find('=') != std::string::npos) {
      value = argument.substr(argument.find('=') + 1);
      argument = argument.substr(0, argument.find('='));
      inline_value = true;
    }
    auto take = [&](std::string* out) {
      if (inline_value) {
        *out = value;
        return true;
      }
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    auto seconds = [&](double* out) -> int {
      std::string text, why;
      if (!take(&text)) return UsageError("argument " + argument + ": expected one argument");
      if (!ParseSeconds(text, out, &why)) return UsageError("argument " + argument + ": " + why);
      return -1;
    };
    int failed = -1;
    if (argument == "-h" || argument == "--help") {
      Usage(stdout);
      std::printf("\n%s\n\nExit statuses: 0 after the server closed, 1 failed (refused, key not authorized, gave "
                  "up reconnecting),\n2 bad usage, 130 interrupted (SIGINT), 143 terminated (SIGTERM).\n",
                  description);
      return kExitOk;
    } else if (argument == "--num-envs") {
      std::string text;
      if (!take(&text)) return UsageError("argument --num-envs: expected one argument");
      char* end = nullptr;
      errno = 0;
      const long long number = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || errno == ERANGE) {
        return UsageError("argument --num-envs: invalid _positive_int value: '" + text + "'");
      }
      if (number < 1) return UsageError("argument --num-envs: must be at least 1, got " + text);
      if (number > 65535) return UsageError("argument --num-envs: one client can host at most 65535 envs");
      arguments->num_envs = static_cast<std::size_t>(number);
    } else if (argument == "--name") {
      if (!take(&options.name)) return UsageError("argument --name: expected one argument");
    } else if (argument == "--liveness-timeout") {
      failed = seconds(&options.liveness_timeout);
      if (failed < 0 && std::isinf(options.liveness_timeout)) {
        return UsageError("argument --liveness-timeout: must be finite");
      }
    } else if (argument == "--connect-timeout") {
      failed = seconds(&options.connect_timeout);
    } else if (argument == "--slot-timeout") {
      failed = seconds(&options.slot_timeout);
    } else if (argument == "--reconnect-timeout") {
      failed = seconds(&options.reconnect_timeout);
    } else if (argument == "--no-reconnect" && !inline_value) {
      options.reconnect = false;
    } else if (argument == "--exit-if-full" && !inline_value) {
      options.wait_for_slot = false;
    } else if (argument == "--no-data-plane" && !inline_value) {
      options.data_plane = false;
    } else if (argument == "--spin") {
      std::string text;
      if (!take(&text)) return UsageError("argument --spin: expected one argument");
      errno = 0;
      char* end = nullptr;
      options.spin = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || errno == ERANGE || !(options.spin >= 0) || std::isinf(options.spin)) {
        return UsageError("argument --spin: must be a duration in seconds >= 0, got '" + text + "'");
      }
    } else if (argument == "--server-key") {
      if (!take(&server_key)) return UsageError("argument --server-key: expected one argument");
    } else if (argument == "--client-key") {
      if (!take(&client_key)) return UsageError("argument --client-key: expected one argument");
    } else if (argument == "--secret-file") {
      if (!take(&secret_file)) return UsageError("argument --secret-file: expected one argument");
    } else if (argument == "--log-level") {
      std::string text;
      if (!take(&text)) return UsageError("argument --log-level: expected one argument");
      if (!gym_remote::ParseLogLevel(text, &level)) {
        return UsageError("argument --log-level: invalid choice: '" + text +
                          "' (choose from 'DEBUG', 'INFO', 'WARNING', 'ERROR')");
      }
    } else if (argument.size() > 1 && argument[0] == '-') {
      return UsageError("unrecognized arguments: " + std::string(argv[i]));
    } else if (!have_endpoint) {
      endpoint = argument;
      have_endpoint = true;
    } else {
      return UsageError("unrecognized arguments: " + argument);
    }
    if (failed >= 0) return failed;
  }
  if (!have_endpoint) return UsageError("the following arguments are required: ENDPOINT");
  gym_remote::SetLogLevel(level);
  options.endpoint = endpoint;
  gym_remote::Status status = gym_remote::CheckEndpoint(endpoint);
  if (!status.ok()) return UsageError(status.message());
  std::string secret;
  if (!secret_file.empty()) {
    status = gym_remote::ReadSecretFile(secret_file, &secret);
    if (!status.ok()) return UsageError(status.message());
  }
  status = gym_remote::ConfigureSecurity(server_key, client_key, secret, &options);
  if (!status.ok()) return UsageError(status.message());
  return -1;
}

int Run(const Arguments& arguments, const std::vector<gym_remote::Env*>& envs) {
  gym_remote::Client client(arguments.options, envs);
  g_client.store(&client);
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a wait ends early and the client sees the request
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  if (g_signal != 0) client.RequestStop();  // a signal before the handler knew the client
  const gym_remote::Status status = client.Run();
  signal(SIGTERM, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  g_client.store(nullptr);
  if (status.ok()) return kExitOk;
  if (status.code() == gym_remote::StatusCode::kStopped) {
    if (g_signal == SIGINT) {
      std::fprintf(stderr, "interrupted\n");
      return kExitInterrupted;
    }
    return kExitTerminated;
  }
  std::fprintf(stderr, "%s: error: %s\n", g_program, status.message().c_str());
  return status.code() == gym_remote::StatusCode::kInvalidArgument ? kExitUsage : kExitFailed;
}

}  // namespace command_line
