#pragma once
// Logging: readable lines on stderr and a JSON-lines event log (events.jsonl) in the campaign
// directory. Diagnostics go to the logger (log::warn(...) and friends; spdlog behind them, in
// log.cpp only); things that happened to a campaign are events.

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace npuopt::log {

/// Level names accepted by --log-level, in increasing severity.
inline constexpr std::string_view k_level_names[] = {"trace", "debug", "info", "warn", "error", "off"};

/// Severity of a log line, in increasing order.
enum class Level { trace, debug, info, warn, error, off };

/// Parse a --log-level value; nullopt when it is not one of k_level_names.
std::optional<Level> parse_level(std::string_view name);

/// Log lines go to stderr ("npuopt: [warn] message") from `level` up.
void init_stderr(Level level);

/// Whether a line at `level` would be written.
bool enabled(Level level);
/// Write one line at `level`.
void write(Level level, std::string_view message);

template <typename... Args>
void trace(fmt::format_string<Args...> format, Args&&... args) {
    if (enabled(Level::trace)) write(Level::trace, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void debug(fmt::format_string<Args...> format, Args&&... args) {
    if (enabled(Level::debug)) write(Level::debug, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> format, Args&&... args) {
    if (enabled(Level::info)) write(Level::info, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> format, Args&&... args) {
    if (enabled(Level::warn)) write(Level::warn, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> format, Args&&... args) {
    if (enabled(Level::error)) write(Level::error, fmt::format(format, std::forward<Args>(args)...));
}

/// Append-only JSON-lines event log: one object per line {"ts","event",...fields}. Thread-safe.
class EventLog {
public:
    /// Opens (creating) `path` for appending; throws Error(io) when it cannot.
    explicit EventLog(std::filesystem::path path);
    ~EventLog();
    EventLog(const EventLog&) = delete;
    EventLog& operator=(const EventLog&) = delete;

    /// Write one event line and flush; `fields` must be a JSON object (or null).
    void write(std::string_view event, const nlohmann::json& fields = nullptr);

    const std::filesystem::path& path() const { return m_path; }

private:
    struct Impl;
    std::filesystem::path m_path;
    Impl* m_impl;
};

/// File name of the event log inside a campaign directory.
inline constexpr std::string_view k_event_log_name = "events.jsonl";

/// Current UTC time as ISO-8601 with milliseconds, e.g. 2026-11-29T21:07:25.123Z.
std::string utc_timestamp();

}  // namespace npuopt::log
