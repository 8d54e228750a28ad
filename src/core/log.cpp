#include "core/log.hpp"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "core/error.hpp"

namespace npuopt::log {

namespace {

spdlog::level::level_enum spdlog_level(Level level) {
    switch (level) {
        case Level::trace: return spdlog::level::trace;
        case Level::debug: return spdlog::level::debug;
        case Level::info: return spdlog::level::info;
        case Level::warn: return spdlog::level::warn;
        case Level::error: return spdlog::level::err;
        case Level::off: return spdlog::level::off;
    }
    return spdlog::level::info;
}

}  // namespace

std::optional<Level> parse_level(std::string_view name) {
    if (name == "trace") return Level::trace;
    if (name == "debug") return Level::debug;
    if (name == "info") return Level::info;
    if (name == "warn" || name == "warning") return Level::warn;
    if (name == "error") return Level::error;
    if (name == "off") return Level::off;
    return std::nullopt;
}

void init_stderr(Level level) {
    auto logger = spdlog::get("npuopt");
    if (!logger) logger = spdlog::stderr_color_mt("npuopt");
    logger->set_pattern("npuopt: [%^%l%$] %v");
    logger->set_level(spdlog_level(level));
    spdlog::set_default_logger(logger);
}

bool enabled(Level level) { return level != Level::off && spdlog::default_logger_raw()->should_log(spdlog_level(level)); }

void write(Level level, std::string_view message) { spdlog::default_logger_raw()->log(spdlog_level(level), message); }

std::string utc_timestamp() {
    auto now = std::chrono::system_clock::now();
    auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) % 1000;
    return fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:03d}Z", fmt::gmtime(std::chrono::system_clock::to_time_t(now)),
                       static_cast<int>(millis.count()));
}

struct EventLog::Impl {
    std::mutex mutex;
    std::ofstream stream;
};

EventLog::EventLog(std::filesystem::path path) : m_path(std::move(path)), m_impl(new Impl) {
    m_impl->stream.open(m_path, std::ios::app);
    if (!m_impl->stream) {
        delete m_impl;
        throw Error(ErrorKind::io, fmt::format("cannot open event log {} for appending", m_path.string()));
    }
}

EventLog::~EventLog() { delete m_impl; }

void EventLog::write(std::string_view event, const nlohmann::json& fields) {
    nlohmann::json line = {{"ts", utc_timestamp()}, {"event", std::string(event)}};
    if (fields.is_object()) {
        for (const auto& [key, value] : fields.items()) line[key] = value;
    } else if (!fields.is_null()) {
        throw Error(ErrorKind::internal, "event fields must be a JSON object");
    }
    std::lock_guard lock(m_impl->mutex);
    m_impl->stream << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    m_impl->stream.flush();
    if (!m_impl->stream) throw Error(ErrorKind::io, fmt::format("cannot write to event log {}", m_path.string()));
    spdlog::debug("event {} {}", event, fields.is_null() ? std::string() : fields.dump());
}

}  // namespace npuopt::log
