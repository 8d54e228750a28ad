#include "campaign/lock.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/log.hpp"

namespace npuopt::campaign {

CampaignLock CampaignLock::acquire(const std::filesystem::path& campaign_dir, std::string_view command) {
    auto file = campaign_dir / k_lock_file_name;
    int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        throw Error(ErrorKind::io, fmt::format("{}: cannot open the campaign lock: {}", file.string(), std::strerror(errno)));
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int saved = errno;
        std::string holder;
        char buffer[256] = {};
        ssize_t got = ::pread(fd, buffer, sizeof(buffer) - 1, 0);
        if (got > 0) holder = std::string(buffer, static_cast<std::size_t>(got));
        while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
        ::close(fd);
        if (saved == EWOULDBLOCK) {
            throw Error(ErrorKind::invalid_input,
                        fmt::format("campaign {} is busy: {} holds {}; `{}` cannot run beside it — wait for it to "
                                    "finish or stop it (SIGINT/SIGTERM) first",
                                    campaign_dir.string(), holder.empty() ? "another process" : holder, file.string(),
                                    command));
        }
        throw Error(ErrorKind::io, fmt::format("{}: cannot lock: {}", file.string(), std::strerror(saved)));
    }
    std::string text = fmt::format("pid {} ({}) since {}\n", ::getpid(), command, log::utc_timestamp());
    if (::ftruncate(fd, 0) == 0) {
        ssize_t written = ::pwrite(fd, text.data(), text.size(), 0);
        (void)written;
    }
    return CampaignLock(fd);
}

CampaignLock::CampaignLock(CampaignLock&& other) noexcept : m_fd(other.m_fd) { other.m_fd = -1; }

CampaignLock::~CampaignLock() {
    if (m_fd >= 0) {
        ::flock(m_fd, LOCK_UN);
        ::close(m_fd);
    }
}

bool campaign_locked(const std::filesystem::path& campaign_dir) {
    auto file = campaign_dir / k_lock_file_name;
    int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    bool locked = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    if (!locked) ::flock(fd, LOCK_UN);
    ::close(fd);
    return locked;
}

}  // namespace npuopt::campaign
