// The command line shared by gym_remote_probe_client and gym_remote_cartpole_client: the options of
// `gym-remote client` (gym_remote/cli.py) and its exit statuses.
#pragma once

#include <cstddef>
#include <vector>

#include "gym_remote/client.hpp"
#include "gym_remote/env.hpp"

namespace command_line {

// Exit statuses, as gym-remote's: done, failed at run time, bad usage, Ctrl-C, SIGTERM.
constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitInterrupted = 130;
constexpr int kExitTerminated = 143;

struct Arguments {
  gym_remote::ClientOptions options;
  std::size_t num_envs = 1;
};

// Parses `ENDPOINT [--num-envs K] [--name NAME] [--liveness-timeout S] [--connect-timeout S]
// [--slot-timeout S] [--reconnect-timeout S] [--no-reconnect] [--exit-if-full] [--server-key PATH]
// [--client-key PATH] [--secret-file PATH] [--log-level LEVEL]`, reads the key files or the secret,
// and sets the log level. Returns -1 to go on, else the status to exit with (0 after --help, 2 for
// bad usage, with the error printed on stderr).
int Parse(int argc, char** argv, const char* description, Arguments* arguments);

// Runs a client for `envs` until it ends, leaving cleanly (BYE) on SIGTERM and SIGINT; returns the
// exit status, with a one-line error on stderr if it failed.
int Run(const Arguments& arguments, const std::vector<gym_remote::Env*>& envs);

}  // namespace command_line
