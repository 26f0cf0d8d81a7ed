// gym_remote_probe_client: hosts K conformance probe envs (docs/CONFORMANCE.md) for a RemoteVectorEnv.
//
//   gym_remote_probe_client tcp://127.0.0.1:5555 --num-envs 3
#include <memory>
#include <vector>

#include "command_line.hpp"
#include "probe_env.hpp"

int main(int argc, char** argv) {
  command_line::Arguments arguments;
  const int parsed = command_line::Parse(
      argc, argv, "Serve K gym_remote/Probe-v0 envs (the conformance probe) to the RemoteVectorEnv at ENDPOINT.",
      &arguments);
  if (parsed >= 0) return parsed;
  std::vector<std::unique_ptr<probe::ProbeEnv>> envs;
  std::vector<gym_remote::Env*> pointers;
  for (std::size_t i = 0; i < arguments.num_envs; ++i) {
    envs.push_back(std::make_unique<probe::ProbeEnv>());
    pointers.push_back(envs.back().get());
  }
  return command_line::Run(arguments, pointers);
}
