#include "report/campaign_series.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <regex>

#include "campaign/driver.hpp"
#include "store/tree_store.hpp"

namespace npuopt::report {

std::optional<double> parse_utc_timestamp(const std::string& text) {
    int year = 0, month = 0, day = 0, hour = 0, minute = 0;
    double second = 0.0;
    char zone = 0;
    if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%lf%c", &year, &month, &day, &hour, &minute, &second, &zone) !=
            7 ||
        zone != 'Z') {
        return std::nullopt;
    }
    std::tm parts{};
    parts.tm_year = year - 1900;
    parts.tm_mon = month - 1;
    parts.tm_mday = day;
    parts.tm_hour = hour;
    parts.tm_min = minute;
    parts.tm_sec = 0;
    const std::time_t epoch_secs = timegm(&parts);
    if (epoch_secs == static_cast<std::time_t>(-1)) return std::nullopt;
    return static_cast<double>(epoch_secs) + second;
}

std::optional<RacePoint> parse_race_reason(const std::string& reason) {
    // The cascade's race summary (eval/stages.cpp, eval/cascade.cpp for re-validations):
    // "accept after 8 pairs (16 launches, …): speedup 1.2345 [1.1000, 1.3000], …".
    static const std::regex k_interval(
        R"(speedup ([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?) \[([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?), )"
        R"(([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)\])");
    std::smatch match;
    if (!std::regex_search(reason, match, k_interval)) return std::nullopt;
    RacePoint race;
    race.speedup = std::stod(match[1].str());
    race.lower = std::stod(match[2].str());
    race.upper = std::stod(match[3].str());
    if (!(race.speedup > 0.0) || !(race.lower > 0.0) || !(race.upper >= race.lower)) return std::nullopt;
    race.revalidation = reason.rfind("re-validation", 0) == 0;
    return race;
}

CampaignSeries load_campaign_series(store::CampaignStore& store) {
    store::TreeStore trees(store.database());
    const campaign::CampaignStatus status = campaign::campaign_status(store);
    CampaignSeries series;
    series.steps = status.steps;

    struct StepRow {
        store::TreeEdgeRecord edge;
        std::optional<double> epoch_secs;
    };
    std::vector<StepRow> rows;
    for (const auto& kernel : status.kernels) {
        for (auto& edge : trees.list_edges(kernel.kernel)) {
            auto epoch_secs = parse_utc_timestamp(edge.created_at);
            rows.push_back({std::move(edge), epoch_secs});
        }
    }
    std::stable_sort(rows.begin(), rows.end(), [](const StepRow& a, const StepRow& b) {
        return a.edge.step != b.edge.step ? a.edge.step < b.edge.step : a.edge.id < b.edge.id;
    });
    series.has_wall_times = !rows.empty() && std::all_of(rows.begin(), rows.end(),
                                                         [](const StepRow& row) { return row.epoch_secs.has_value(); });
    const double first_epoch = series.has_wall_times ? *rows.front().epoch_secs : 0.0;
    double last_epoch = first_epoch;

    std::map<std::string, std::size_t> kernel_idx;
    for (const auto& kernel : status.kernels) {
        KernelSeries kernel_series;
        kernel_series.kernel = kernel.kernel;
        kernel_series.minimum_cycles = kernel.sol_cycles;
        kernel_series.reference_cycles = kernel.baseline_cycles;
        kernel_idx[kernel.kernel] = series.kernels.size();
        series.kernels.push_back(std::move(kernel_series));
    }
    std::map<std::string, std::vector<store::ChampionRecord>> paths;
    for (const auto& kernel : status.kernels)
        paths[kernel.kernel] = trees.champion_path(kernel.kernel);

    std::int64_t device_runs = 0;
    std::map<std::int64_t, std::int64_t> step_of_design;
    for (const auto& row : rows) {
        const auto& edge = row.edge;
        device_runs += edge.device_runs;
        series.role_steps.push_back({edge.step, edge.role});
        step_of_design[edge.design_id] = edge.step;
        KernelSeries& kernel = series.kernels[kernel_idx.at(edge.kernel)];
        std::optional<double> best;
        for (const auto& link : paths[edge.kernel]) {
            if (link.step > edge.step || !(link.cycles > 0.0)) continue;
            best = best ? std::min(*best, link.cycles) : link.cycles;
        }
        if (!best) continue;
        ProgressPoint point;
        point.step = edge.step;
        point.device_runs = device_runs;
        if (series.has_wall_times) {
            // A timestamp earlier than the one before (a clock set back) holds the time still.
            last_epoch = std::max(last_epoch, *row.epoch_secs);
            point.wall_secs = last_epoch - first_epoch;
        }
        point.best_cycles = *best;
        point.role = edge.role;
        point.verdict = edge.verdict;
        kernel.progress.push_back(point);
    }

    for (auto& kernel : series.kernels) {
        std::vector<store::EvaluationRecord> races;
        for (const auto& edge : trees.list_edges(kernel.kernel)) {
            for (auto& evaluation : store.list_evaluations(edge.design_id, true)) {
                if (evaluation.stage == "race" && evaluation.verdict != "champion")
                    races.push_back(std::move(evaluation));
            }
        }
        std::sort(races.begin(), races.end(),
                  [](const store::EvaluationRecord& a, const store::EvaluationRecord& b) { return a.id < b.id; });
        races.erase(std::unique(races.begin(), races.end(),
                                [](const store::EvaluationRecord& a, const store::EvaluationRecord& b) {
                                    return a.id == b.id;
                                }),
                    races.end());
        for (const auto& evaluation : races) {
            auto race = parse_race_reason(evaluation.reason);
            if (!race) {
                kernel.races_without_interval += 1;
                continue;
            }
            race->evaluation_id = evaluation.id;
            race->design_id = evaluation.design_id;
            race->verdict = evaluation.verdict;
            auto step = step_of_design.find(evaluation.design_id);
            if (step != step_of_design.end()) race->step = step->second;
            kernel.races.push_back(*race);
        }
    }
    return series;
}

}  // namespace npuopt::report
