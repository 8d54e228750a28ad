#pragma once
// The role scheduler: a bandit (discounted UCB1) over roles, paid in accepted log-speedup per device-second,
// with an age prior that moves it from exploration (architect) to refinement (tuner) as the
// campaign ages. Deterministic given its state and the seed it is handed; its state is plain
// numbers (persisted by the campaign as role_stats rows).

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace npuopt::search {

/// What the scheduler knows about one role.
struct RoleStats {
    std::int64_t pulls = 0;      ///< times the role acted
    std::int64_t accepts = 0;    ///< proposals of the role that became champion
    std::int64_t empty = 0;      ///< times it had nothing to propose
    double reward = 0.0;         ///< sum of accepted log-speedups
    double device_secs = 0.0;    ///< device time its proposals cost
    double rate_sum = 0.0;       ///< sum over pulls of log-speedup / device-second
    double weight = 0.0;         ///< discounted pull count (every pull of any role discounts all)
    double weighted_rate = 0.0;  ///< discounted sum of log-speedup / device-second
};

struct SchedulerConfig {
    double exploration = 0.5;        ///< UCB1 exploration constant
    double age_prior_weight = 0.6;   ///< strength of the exploration → refinement prior
    double min_device_secs = 1.0;    ///< floor on a pull's cost, so free pulls do not divide by 0
    double discount = 0.97;          ///< discounted UCB: old rewards fade (roles' payoffs drift as the campaign ages)
    /// Age at which the prior favours each role: 0 = early (explore), 1 = late (refine).
    std::map<std::string, double> role_age = {{"architect", 0.0}, {"analyst", 0.5}, {"tuner", 1.0}};
};

class Scheduler {
public:
    explicit Scheduler(std::vector<std::string> roles, SchedulerConfig config = {});

    /// The role to act next at campaign age `age` (0..1), skipping `unavailable`; "" when none is left.
    /// Ties are broken by `seed`.
    std::string pick(double age, std::uint64_t seed, const std::set<std::string>& unavailable = {}) const;
    /// The UCB index of each role at `age` (for display and tests).
    std::map<std::string, double> scores(double age) const;

    /// Pay `role` for one pull: the log-speedup it won (0 when nothing was accepted) and its device time.
    void record(const std::string& role, double log_speedup, double device_secs, bool accepted);
    /// The role had nothing to propose.
    void record_empty(const std::string& role);

    const std::map<std::string, RoleStats>& stats() const { return m_stats; }
    void set_stats(const std::string& role, const RoleStats& stats);
    const std::vector<std::string>& roles() const { return m_roles; }

private:
    std::vector<std::string> m_roles;
    SchedulerConfig m_config;
    std::map<std::string, RoleStats> m_stats;
};

}  // namespace npuopt::search
