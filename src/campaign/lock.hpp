#pragma once
// One campaign, one running `npuopt run`: an exclusive flock on <dir>/campaign.lock, held for the
// life of the object (the kernel releases it when the process dies, SIGKILL included).

#include <filesystem>
#include <string>

namespace npuopt::campaign {

inline constexpr std::string_view k_lock_file_name = "campaign.lock";

class CampaignLock {
public:
    /// Take the lock or throw Error(invalid_input) saying which process holds it.
    static CampaignLock acquire(const std::filesystem::path& campaign_dir);
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
