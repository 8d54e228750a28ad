#pragma once
// One campaign, one writer at a time: `npuopt run` and `npuopt kb build|refresh` take an exclusive
// flock on <dir>/campaign.lock for the life of the object (the kernel releases it when the process
// dies, SIGKILL included); the holder's pid and command are written into the file, so the one
// refused can name it.

#include <filesystem>
#include <string>

namespace npuopt::campaign {

inline constexpr std::string_view k_lock_file_name = "campaign.lock";

class CampaignLock {
public:
    /// Take the lock for `command` (e.g. "npuopt run") or throw Error(invalid_input) naming the
    /// process and command that hold it.
    static CampaignLock acquire(const std::filesystem::path& campaign_dir, std::string_view command = "npuopt run");
    CampaignLock(CampaignLock&& other) noexcept;
    CampaignLock& operator=(CampaignLock&&) = delete;
    CampaignLock(const CampaignLock&) = delete;
    CampaignLock& operator=(const CampaignLock&) = delete;
    ~CampaignLock();

private:
    explicit CampaignLock(int fd) : m_fd(fd) {}
    int m_fd = -1;
};

/// Whether another process holds the lock of `campaign_dir` (for `npuopt status`).
bool campaign_locked(const std::filesystem::path& campaign_dir);

}  // namespace npuopt::campaign
