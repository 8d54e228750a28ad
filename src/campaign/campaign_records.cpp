#include "campaign/campaign_records.hpp"

#include <algorithm>
#include <fstream>
#include <set>

#include <unistd.h>

#include <fmt/format.h>

#include "core/error.hpp"

namespace npuopt::campaign {
namespace {

nlohmann::json parse_or(const std::optional<std::string>& text, nlohmann::json fallback) {
    if (!text) return fallback;
    auto parsed = nlohmann::json::parse(*text, nullptr, false);
    return parsed.is_discarded() ? fallback : parsed;
}

/// A JSON object of numbers (a design's params, an edge's quantities) as a map; others skipped.
std::map<std::string, double> numbers_of(const std::string& text) {
    auto json = nlohmann::json::parse(text, nullptr, false);
    std::map<std::string, double> numbers;
    if (!json.is_object()) return numbers;
    for (const auto& [name, value] : json.items()) {
        if (value.is_number()) numbers[name] = value.get<double>();
    }
    return numbers;
}

}  // namespace

double Counters::wall_used() const {
    return wall_secs_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
}

double Counters::age(double wall_budget_secs, std::int64_t device_run_budget) const {
    const double wall = wall_budget_secs > 0 ? wall_used() / wall_budget_secs : 0.0;
    const double runs = device_run_budget > 0
                            ? static_cast<double>(device_runs) / static_cast<double>(device_run_budget)
                            : 0.0;
    return std::clamp(std::max(wall, runs), 0.0, 1.0);
}

CampaignRecords::CampaignRecords(store::CampaignStore& store, std::filesystem::path dir, std::string target)
    : m_store(&store), m_dir(std::move(dir)), m_target(std::move(target)) {}

void CampaignRecords::begin_run() {
    m_started_at = log::utc_timestamp();
    if (m_dir.empty()) return;
    std::filesystem::create_directories(m_dir);
    try {
        m_event_log = std::make_unique<log::EventLog>(m_dir / std::string(log::k_event_log_name));
    } catch (const Error&) {
        m_event_log.reset();
    }
}

void CampaignRecords::emit(const std::string& kind, const nlohmann::json& payload) {
    m_store->record_event(kind, payload.dump());
    if (m_listener) m_listener(kind, payload);
    if (m_event_log) {
        try {
            m_event_log->write(kind, payload);
        } catch (const std::exception&) {
        }
    }
}

Counters CampaignRecords::load_counters() {
    auto counters_json = parse_or(trees().state("counters"), nlohmann::json::object());
    Counters counters;
    counters.step = counters_json.value("step", std::int64_t{0});
    // The cascade counts every launch in the store as it starts (CampaignStore::count_device_launch):
    // the launches of a step killed in flight were never committed with its step, but are spent.
    counters.device_runs = std::max(counters_json.value("device_runs", std::int64_t{0}), m_store->device_launches());
    counters.device_secs = counters_json.value("device_secs", 0.0);
    counters.screen_calls = counters_json.value("screen_calls", std::int64_t{0});
    counters.screen_secs = counters_json.value("screen_secs", 0.0);
    counters.wall_secs_before = counters_json.value("wall_secs", 0.0);
    counters.run_start = std::chrono::steady_clock::now();
    return counters;
}

void CampaignRecords::save_counters(const Counters& counters) {
    auto tree = trees();
    tree.set_state("counters", nlohmann::json{{"step", counters.step},
                                              {"device_runs", counters.device_runs},
                                              {"device_secs", counters.device_secs},
                                              {"screen_calls", counters.screen_calls},
                                              {"screen_secs", counters.screen_secs},
                                              {"wall_secs", counters.wall_used()}}
                                   .dump());
    set_run_state("running");
}

void CampaignRecords::set_run_state(const std::string& state, const std::string& stop_reason) {
    nlohmann::json run{{"state", state},
                       {"pid", static_cast<std::int64_t>(::getpid())},
                       {"started_at", m_started_at},
                       {"heartbeat_at", log::utc_timestamp()}};
    if (state != "running" || !stop_reason.empty()) run["stop_reason"] = stop_reason;
    trees().set_state("run", run.dump());
}

void CampaignRecords::save_kernel(const KernelRuntime& kernel) {
    auto tree = trees();
    tree.set_state("kernel/" + kernel.name(), kernel.state_json().dump());
    nlohmann::json discounted = nlohmann::json::object();
    const auto& stats_by_role = kernel.search.scheduler().stats();
    for (const auto& [role, stats] : stats_by_role) {
        discounted[role] = {{"weight", stats.weight}, {"weighted_rate", stats.weighted_rate}};
    }
    tree.set_state("scheduler/" + kernel.name(), discounted.dump());
    tree.set_state("search/" + kernel.name(), kernel.search.learnt_state().dump());
    for (const auto& [role, stats] : stats_by_role) {
        store::RoleStatsRecord record;
        record.kernel = kernel.name();
        record.role = role;
        record.pulls = stats.pulls;
        record.accepts = stats.accepts;
        record.empty = stats.empty;
        record.reward = stats.reward;
        record.device_secs = stats.device_secs;
        record.rate_sum = stats.rate_sum;
        tree.save_role_stats(record);
    }
}

std::optional<search::Design> CampaignRecords::design_from_record(const KernelRuntime& kernel,
                                                                  const store::DesignRecord& record) {
    auto found = kernel.templates_by_name.find(record.template_name);
    if (found != kernel.templates_by_name.end()) {
        search::Assignment assignment = numbers_of(record.params_json);
        try {
            for (const bool rewrite : {true, false}) {  // as proposed now, or as recorded before a rewrite was learnt
                search::Design design = found->second->instantiate(assignment, rewrite);
                if (design.content_hash == record.content_hash) return design;
            }
        } catch (const Error&) {
        }
    }
    if (!record.source) return std::nullopt;
    search::Design design;
    design.target = record.target;
    design.kernel = record.kernel;
    design.template_name = record.template_name;
    design.family = record.template_name;
    design.shape_text = record.shape;
    design.source = *record.source;
    design.content_hash = record.content_hash;
    design.is_baseline = record.template_name == "baseline";
    design.from_source = !design.is_baseline;
    return design;
}

void CampaignRecords::restore_kernel(KernelRuntime& kernel) {
    auto tree = trees();
    auto state = parse_or(tree.state("kernel/" + kernel.name()), nlohmann::json::object());
    kernel.state = parse_kernel_state(state.value("status", std::string("active")));
    kernel.reason = state.value("reason", std::string());
    kernel.failure_kind = state.value("failure_kind", std::string());
    kernel.baseline_tried = state.value("baseline_tried", false);
    kernel.baseline_failure = state.value("baseline_failure", std::string());
    kernel.sol_cycles = state.value("sol_cycles", 0.0);
    kernel.steps_since_accept = state.value("steps_since_accept", std::int64_t{0});
    kernel.runs_since_accept = state.value("runs_since_accept", std::int64_t{0});
    kernel.accepts_since_revalidation = state.value("accepts_since_revalidation", std::int64_t{0});
    kernel.revalidate_pending = state.value("revalidate_pending", false);
    kernel.port_pending = state.value("port_pending", false);
    kernel.ported_from = state.value("ported_from", std::string());
    kernel.port_baseline_done = state.value("port_baseline_done", false);
    kernel.reopen_steps_left = state.value("reopen_steps_left", std::int64_t{0});
    kernel.reopened_terms.clear();
    if (state.contains("reopened_terms") && state["reopened_terms"].is_array()) {
        for (const auto& term : state["reopened_terms"]) {
            if (term.is_string()) kernel.reopened_terms.push_back(term.get<std::string>());
        }
    }
    kernel.port_before = state.value("port_before", nlohmann::json::object());
    kernel.restore_quantity_offsets(state.value("quantity_offsets", nlohmann::json::object()));
    kernel.search.restore_learnt_state(parse_or(tree.state("search/" + kernel.name()), nlohmann::json::object()));
    auto discounted = parse_or(tree.state("scheduler/" + kernel.name()), nlohmann::json::object());
    for (const auto& stats : tree.list_role_stats(kernel.name())) {
        search::RoleStats role_stats;
        if (discounted.contains(stats.role)) {
            role_stats.weight = discounted[stats.role].value("weight", 0.0);
            role_stats.weighted_rate = discounted[stats.role].value("weighted_rate", 0.0);
        }
        role_stats.pulls = stats.pulls;
        role_stats.accepts = stats.accepts;
        role_stats.empty = stats.empty;
        role_stats.reward = stats.reward;
        role_stats.device_secs = stats.device_secs;
        role_stats.rate_sum = stats.rate_sum;
        kernel.search.scheduler().set_stats(stats.role, role_stats);
    }
    for (const auto& edge : tree.list_edges(kernel.name())) {
        auto design = m_store->find_design(edge.design_id);
        if (!design) continue;
        const auto verdict = eval::parse_step_verdict(edge.verdict).value_or(eval::StepVerdict::error);
        kernel.search.replay(design->content_hash, kernel.family_of(design->template_name),
                             numbers_of(edge.quantities_json), numbers_of(design->params_json), edge.cycles, verdict);
    }
    if (kernel.reopen_steps_left > 0) mark_stale_designs(kernel);
    auto path = tree.champion_path(kernel.name());
    if (!path.empty()) {
        kernel.baseline_cycles = path.front().cycles;
        load_champion(kernel, path.back());
    }
}

void CampaignRecords::mark_stale_designs(KernelRuntime& kernel) {
    std::set<std::int64_t> seen;
    for (const auto& edge : trees().list_edges(kernel.name())) {
        if (!seen.insert(edge.design_id).second) continue;
        if (!m_store->list_evaluations(edge.design_id).empty()) continue;  // evaluated under this version
        if (auto design = m_store->find_design(edge.design_id)) kernel.search.mark_stale(design->content_hash);
    }
}

void CampaignRecords::load_champion(KernelRuntime& kernel, const store::ChampionRecord& link) {
    auto record = m_store->find_design(link.design_id);
    if (!record) throw Error(ErrorKind::store, fmt::format("champion design {} is missing", link.design_id));
    kernel.champion = design_from_record(kernel, *record);
    kernel.champion_design_id = link.design_id;
    kernel.champion_link_id = link.id;
    kernel.champion_cycles = link.cycles;
    if (!kernel.champion) {
        throw Error(ErrorKind::store,
                    fmt::format("champion design {} of kernel {} can be neither re-instantiated nor read back",
                                link.design_id, kernel.name()));
    }
}

std::filesystem::path CampaignRecords::source_file(const search::Design& design) {
    auto dir = m_dir / "designs";
    std::filesystem::create_directories(dir);
    auto file = dir / (design.kernel + "-" + design.content_hash.substr(0, 16) + design.source_extension);
    if (!std::filesystem::exists(file)) {
        auto temporary = file;
        temporary += ".tmp";
        {
            std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
            out << design.source;
            if (!out) throw Error(ErrorKind::io, fmt::format("{}: cannot write the design source", temporary.string()));
        }
        std::filesystem::rename(temporary, file);
    }
    return file;
}

std::int64_t CampaignRecords::record_design(const search::Design& design, std::optional<std::int64_t> parent) {
    store::DesignRecord record;
    record.content_hash = design.content_hash;
    record.target = design.target.empty() ? m_target : design.target;
    record.kernel = design.kernel;
    record.shape = design.shape_text;
    record.template_name = design.template_name;
    record.params_json = design.params_json().dump();
    record.source = design.source;
    record.parent_id = parent;
    return m_store->record_design(record);
}

eval::Candidate CampaignRecords::candidate_of(const search::Design& design, std::int64_t design_id,
                                              std::optional<double> predicted) {
    eval::Candidate candidate;
    candidate.design_id = design_id;
    candidate.content_hash = design.content_hash;
    candidate.kernel = design.kernel;
    candidate.family = design.family;
    candidate.source_file = source_file(design);
    candidate.quantities = design.quantities;
    candidate.features = design.features;
    candidate.predicted_cycles = predicted;
    return candidate;
}

}  // namespace npuopt::campaign
