#include "search/scheduler.hpp"

#include <algorithm>
#include <cmath>
#include <random>

namespace npuopt::search {

Scheduler::Scheduler(std::vector<std::string> roles, SchedulerConfig config)
    : m_roles(std::move(roles)), m_config(std::move(config)) {
    for (const auto& role : m_roles) m_stats[role];
}

void Scheduler::set_stats(const std::string& role, const RoleStats& stats) {
    if (std::find(m_roles.begin(), m_roles.end(), role) == m_roles.end()) m_roles.push_back(role);
    m_stats[role] = stats;
}

std::map<std::string, double> Scheduler::scores(double age) const {
    age = std::clamp(age, 0.0, 1.0);
    double total_weight = 0.0;
    double best_rate = 0.0;
    for (const auto& [role, stats] : m_stats) {
        total_weight += stats.weight;
        if (stats.weight > 1e-9) best_rate = std::max(best_rate, stats.weighted_rate / stats.weight);
    }
    std::map<std::string, double> result;
    for (const auto& role : m_roles) {
        const RoleStats& stats = m_stats.at(role);
        auto role_age = m_config.role_age.find(role);
        double prior = role_age == m_config.role_age.end()
                           ? 0.0
                           : m_config.age_prior_weight * (1.0 - std::fabs(age - role_age->second));
        if (stats.pulls == 0 && stats.empty == 0) {
            // Unplayed roles come first, in the order the prior prefers at this age.
            result[role] = 10.0 + prior;
            continue;
        }
        double mean = stats.weight > 1e-9 && best_rate > 0.0 ? (stats.weighted_rate / stats.weight) / best_rate : 0.0;
        double bonus = m_config.exploration * std::sqrt(2.0 * std::log(std::max(total_weight, 1.0) + 1.0) /
                                                        std::max(stats.weight, 0.05));
        // A role that keeps coming back empty is worth less: scale by its share of useful pulls,
        // counted with one useful pull in hand, since emptiness depends on the champion of the
        // moment (one empty answer does not silence a role for the rest of the campaign).
        double pulls = static_cast<double>(stats.pulls + stats.empty) + 1.0;
        double useful = static_cast<double>(stats.pulls + 1) / pulls;
        result[role] = (mean + std::min(bonus, 1.0)) * useful + prior;
    }
    return result;
}

std::string Scheduler::pick(double age, std::uint64_t seed, const std::set<std::string>& unavailable) const {
    auto index = scores(age);
    std::mt19937_64 random(seed);
    std::uniform_real_distribution<double> jitter(0.0, 1e-9);
    std::string best;
    double best_score = -1e300;
    for (const auto& role : m_roles) {
        if (unavailable.count(role)) continue;
        double score = index[role] + jitter(random);
        if (score > best_score) {
            best = role;
            best_score = score;
        }
    }
    return best;
}

void Scheduler::record(const std::string& role, double log_speedup, double device_secs, bool accepted) {
    RoleStats& stats = m_stats[role];
    if (std::find(m_roles.begin(), m_roles.end(), role) == m_roles.end()) m_roles.push_back(role);
    double gain = accepted ? std::max(0.0, log_speedup) : 0.0;
    double cost = std::max(device_secs, m_config.min_device_secs);
    stats.pulls += 1;
    stats.accepts += accepted ? 1 : 0;
    stats.reward += gain;
    stats.device_secs += device_secs;
    stats.rate_sum += gain / cost;
    for (auto& [name, other] : m_stats) {
        other.weight *= m_config.discount;
        other.weighted_rate *= m_config.discount;
    }
    stats.weight += 1.0;
    stats.weighted_rate += gain / cost;
}

void Scheduler::record_empty(const std::string& role) {
    m_stats[role].empty += 1;
}

}  // namespace npuopt::search
