#pragma once
// Logging: readable lines on stderr (spdlog) and a JSON-lines event log (events.jsonl) in the
// campaign directory. Diagnostics go to the logger; things that happened to a campaign are events.

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace npuopt::log {

/// Level names accepted by --log-level, in increasing severity.
inline constexpr std::string_view k_level_names[] = {"trace", "debug", "info", "warn", "error", "off"};

/// Parse a --log-level value; nullopt when it is not one of k_level_names.
std::optional<spdlog::level::level_enum> parse_level(std::string_view name);

/// Route spdlog's default logger to stderr ("npuopt: [warn] message") at `level`.
void init_stderr(spdlog::level::level_enum level);

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
