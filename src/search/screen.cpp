#include "search/screen.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "numerics/robust.hpp"

namespace npuopt::search {
namespace {

constexpr std::size_t k_spread_points = 3;  ///< log errors needed before a spread is trusted
constexpr double k_spread_floor = 0.02;     ///< no predictor is trusted to better than 2 %

double spread_about(const std::vector<double>& values, double centre) {
    double sum = 0.0;
    for (double value : values) sum += (value - centre) * (value - centre);
    return std::sqrt(sum / static_cast<double>(std::max<std::size_t>(values.size() - 1, 1)));
}

double root_mean_square(const std::vector<double>& values) {
    double sum = 0.0;
    for (double value : values) sum += value * value;
    return std::sqrt(sum / static_cast<double>(std::max<std::size_t>(values.size(), 1)));
}

bool screenable(const Proposal& proposal) {
    return !proposal.design.is_baseline && !proposal.design.from_source && !proposal.design.template_name.empty();
}

}  // namespace

ScreenFit ScheduleScreen::fit(const std::string& family) const {
    Errors pooled;
    for (const auto& [name, errors] : m_errors) {
        pooled.schedule.insert(pooled.schedule.end(), errors.schedule.begin(), errors.schedule.end());
        pooled.model.insert(pooled.model.end(), errors.model.begin(), errors.model.end());
    }
    const auto own = m_errors.find(family);
    const Errors none;
    const Errors& mine = own == m_errors.end() ? none : own->second;

    ScreenFit fit;
    // the bias from the family's own designs as soon as it has one: families differ most in it
    const std::vector<double>& bias_from = !mine.schedule.empty() ? mine.schedule : pooled.schedule;
    fit.schedule_points = bias_from.size();
    if (!bias_from.empty()) fit.schedule_bias = numerics::median(bias_from);
    const std::vector<double>& schedule_from = mine.schedule.size() >= k_spread_points ? mine.schedule : pooled.schedule;
    const std::vector<double>& model_from = mine.model.size() >= k_spread_points ? mine.model : pooled.model;
    const bool schedule_known = schedule_from.size() >= k_spread_points;
    const bool model_known = model_from.size() >= k_spread_points;
    if (schedule_known) fit.schedule_spread = spread_about(schedule_from, numerics::median(schedule_from));
    if (model_known) {
        fit.model_points = model_from.size();
        fit.model_spread = root_mean_square(model_from);
    }
    if (schedule_known && model_known) {
        const double schedule_weight = 1.0 / std::pow(std::max(fit.schedule_spread, k_spread_floor), 2);
        const double model_weight = 1.0 / std::pow(std::max(fit.model_spread, k_spread_floor), 2);
        fit.schedule_weight = schedule_weight / (schedule_weight + model_weight);
    }
    return fit;
}

bool ScheduleScreen::blind() const { return m_answers == 0 && m_calls >= k_blind_after; }

void ScheduleScreen::rank(std::vector<Proposal>& proposals, std::size_t width, const ScreenFn& estimate) {
    if (!estimate || width < 2 || blind()) return;
    std::size_t count = 0;
    while (count < proposals.size() && count < width && screenable(proposals[count])) ++count;
    if (count < 2) return;

    struct Scored {
        Proposal proposal;
        double score = std::numeric_limits<double>::infinity();
        std::optional<double> schedule;
        std::optional<double> corrected;
        ScreenFit fit;
        std::size_t model_rank = 0;
    };
    std::vector<Scored> scored;
    std::map<std::string, ScreenFit> fits;  // one fit per family in this ranking
    const ScreenEstimate none;              // for a design asked of a screen that went blind mid-window
    bool informed = false;                  // some estimate in the window said anything
    bool spent = false;                     // the campaign's screen budget ran out in this window
    for (std::size_t idx = 0; idx < count; ++idx) {
        Scored item;
        item.proposal = std::move(proposals[idx]);
        item.model_rank = idx;
        const std::string& hash = item.proposal.design.content_hash;
        auto cached = m_estimates.find(hash);
        if (cached == m_estimates.end() && !blind() && !spent) {
            ScreenEstimate answer = estimate(item.proposal);
            if (answer.unasked) {
                spent = true;  // the budget does not come back within a window: ask no more here
            } else {
                ++m_calls;
                cached = m_estimates.emplace(hash, std::move(answer)).first;
                if (cached->second.cycles || cached->second.illegal) ++m_answers;
            }
        }
        if (cached == m_estimates.end() && spent) ++m_unasked;
        const ScreenEstimate& seen = cached == m_estimates.end() ? none : cached->second;
        const std::string& family = item.proposal.design.family;
        auto known_fit = fits.find(family);
        if (known_fit == fits.end()) known_fit = fits.emplace(family, fit(family)).first;
        item.fit = known_fit->second;
        const auto& model = item.proposal.predicted_cycles;
        if (seen.illegal) {
            informed = true;
            item.score = std::numeric_limits<double>::max();  // last, but before those with no estimate at all
        } else if (seen.cycles && *seen.cycles > 0.0) {
            informed = true;
            item.schedule = seen.cycles;
            item.corrected = *seen.cycles * std::exp(item.fit.schedule_bias);
            item.score = model && *model > 0.0 ? std::exp(item.fit.schedule_weight * std::log(*item.corrected) +
                                                          (1.0 - item.fit.schedule_weight) * std::log(*model))
                                               : *item.corrected;
        } else if (model && *model > 0.0) {
            item.score = *model;
        }
        scored.push_back(std::move(item));
    }
    // A toolchain without a schedule (or one that answered nothing here) has told the screen
    // nothing: the role's own order, with its exploration credit, stands.
    if (!informed) {
        ++m_uninformed;
        for (std::size_t idx = 0; idx < count; ++idx) proposals[idx] = std::move(scored[idx].proposal);
        return;
    }
    std::stable_sort(scored.begin(), scored.end(),
                     [](const Scored& lhs, const Scored& rhs) { return lhs.score < rhs.score; });
    Scored& first = scored.front();
    if (first.schedule) {
        first.proposal.reason += fmt::format(
            "; static schedule screen of {} candidates: schedule {:.0f} cycles × learnt bias {:.2f} ({} measured) = "
            "{:.0f}, weighed {:.0f} % against the model's {}: {:.0f}{}",
            count, *first.schedule, std::exp(first.fit.schedule_bias), first.fit.schedule_points, *first.corrected,
            100.0 * first.fit.schedule_weight,
            first.proposal.predicted_cycles ? fmt::format("{:.0f}", *first.proposal.predicted_cycles) : std::string("none"),
            first.score,
            first.model_rank == 0 ? std::string("; also the model's first")
                                  : fmt::format("; the model ranked it #{}", first.model_rank + 1));
    }
    for (std::size_t idx = 0; idx < count; ++idx) proposals[idx] = std::move(scored[idx].proposal);
}

void ScheduleScreen::observe(const Proposal& proposal, double measured_cycles) {
    if (measured_cycles <= 0.0) return;
    auto seen = m_estimates.find(proposal.design.content_hash);
    if (seen == m_estimates.end() || !seen->second.cycles || *seen->second.cycles <= 0.0) return;
    Errors& errors = m_errors[proposal.design.family];
    errors.schedule.push_back(std::log(measured_cycles / *seen->second.cycles));
    if (proposal.predicted_cycles && *proposal.predicted_cycles > 0.0) {
        errors.model.push_back(std::log(measured_cycles / *proposal.predicted_cycles));
    }
}

}  // namespace npuopt::search
