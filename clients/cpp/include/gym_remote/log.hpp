// The client's log: lines on stderr, as Python's logging.basicConfig writes them
// ("2024-05-01 12:00:00,123 gym_remote.client WARNING message").
#pragma once

#include <string>

namespace gym_remote {

enum class LogLevel { kDebug = 10, kInfo = 20, kWarning = 30, kError = 40 };

// Messages below `level` are dropped (default: kWarning). Thread-safe.
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// "DEBUG", "INFO", "WARNING", "ERROR" (any case).
bool ParseLogLevel(const std::string& text, LogLevel* level);
void Log(LogLevel level, const std::string& message);

// Where log lines go instead of stderr (a game engine's console): `sink(user, level, message)` is called
// under a lock, from whichever thread logs. nullptr: stderr again.
using LogSink = void (*)(void* user, LogLevel level, const char* message);
void SetLogSink(LogSink sink, void* user);

}  // namespace gym_remote
