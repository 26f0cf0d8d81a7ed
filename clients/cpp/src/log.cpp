#include "gym_remote/log.hpp"

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace gym_remote {

namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kWarning)};
std::mutex g_mutex;
LogSink g_sink = nullptr;  // guarded by g_mutex
void* g_sink_user = nullptr;

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kError: return "ERROR";
  }
  return "?";
}

}  // namespace

void SetLogSink(LogSink sink, void* user) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_sink = sink;
  g_sink_user = user;
}

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }

bool ParseLogLevel(const std::string& text, LogLevel* level) {
  std::string upper;
  for (char c : text) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (LogLevel candidate : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarning, LogLevel::kError}) {
    if (upper == LevelName(candidate)) {
      *level = candidate;
      return true;
    }
  }
  return false;
}

void Log(LogLevel level, const std::string& message) {
  if (static_cast<int>(level) < g_level.load()) return;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_sink != nullptr) {
      g_sink(g_sink_user, level, message.c_str());
      return;
    }
  }
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm local{};
  localtime_r(&seconds, &local);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &local);
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "%s,%03d gym_remote.cpp %s %s\n", stamp, static_cast<int>(millis), LevelName(level),
               message.c_str());
  std::fflush(stderr);
}

}  // namespace gym_remote
