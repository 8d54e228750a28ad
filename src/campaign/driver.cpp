#include "campaign/driver.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include <unistd.h>

#include <fmt/format.h>

#include "campaign/lock.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/interrupt.hpp"
#include "core/log.hpp"
#include "store/tree_store.hpp"

namespace npuopt::campaign {

namespace {

using Clock = std::chrono::steady_clock;

std::uint64_t mix_seed(std::uint64_t seed, const std::string& kernel, std::int64_t step, std::uint64_t salt = 0) {
    std::string hash = content_hash(fmt::format("{}|{}|{}|{}", seed, kernel, step, salt));
    return std::stoull(hash.substr(0, 15), nullptr, 16);
}

nlohmann::json parse_or(const std::optional<std::string>& text, nlohmann::json fallback) {
    if (!text) return fallback;
    auto json = nlohmann::json::parse(*text, nullptr, false);
    return json.is_discarded() ? fallback : json;
}

/// The numeric members of a JSON object text (design params, declared quantities); {} otherwise.
std::map<std::string, double> numbers_of(const std::string& text) {
    std::map<std::string, double> numbers;
    auto json = nlohmann::json::parse(text, nullptr, false);
    if (!json.is_object()) return numbers;
    for (const auto& [name, value] : json.items()) {
        if (value.is_number()) numbers[name] = value.get<double>();
    }
    return numbers;
}

/// The tree's verdict for a cascade outcome: accepted, or the last stage's verdict in words.
std::string edge_verdict(const eval::Outcome& outcome) {
    if (outcome.accepted) return "accepted";
    if (outcome.stages.empty()) return "error";
    const std::string& verdict = outcome.stages.back().verdict;
    if (verdict == "fail") return "failed";
    if (verdict == "reject") return "rejected";
    if (verdict == "skip") return "skipped";
    if (verdict == "pass") return "rejected";
    return verdict;  // error | inconclusive | suspect
}

std::string last_stage(const eval::Outcome& outcome) {
    return outcome.stages.empty() ? "" : eval::stage_name(outcome.stages.back().stage);
}

std::string final_reason(const eval::Outcome& outcome) {
    if (!outcome.final_reason.empty()) return outcome.final_reason;
    return outcome.stages.empty() ? "" : outcome.stages.back().reason;
}

}  // namespace

std::string stop_reason_name(StopReason reason) {
    switch (reason) {
        case StopReason::finished: return "finished";
        case StopReason::wall_budget: return "wall_budget";
        case StopReason::device_budget: return "device_budget";
        case StopReason::interrupted: return "interrupted";
        case StopReason::step_limit: return "step_limit";
        case StopReason::all_failed: return "all_failed";
    }
    return "unknown";
}

std::vector<KernelSetup> prepare_kernels(const config::KernelsConfig& kernels, const std::vector<std::string>& selected,
                                         const std::filesystem::path& templates_dir, const std::string& target) {
    std::vector<std::string> dir_errors;
    std::vector<config::TemplateSpec> specs;
    try {
        specs = config::load_template_dir(templates_dir, &dir_errors);
    } catch (const Error& error) {
        dir_errors.push_back(error.what());
    }
    std::vector<KernelSetup> result;
    for (const auto& spec : kernels.kernels) {
        if (!selected.empty() && std::find(selected.begin(), selected.end(), spec.name) == selected.end()) continue;
        KernelSetup setup;
        setup.spec = spec;
        setup.context.spec = spec;
        setup.context.shape = spec.shape;
        for (const auto& error : dir_errors) {
            // A template file that does not parse cannot say its kernel: every kernel hears of it.
            setup.template_errors.push_back(error);
        }
        setup.templates = search::load_kernel_templates(specs, spec, target, setup.template_errors);
        result.push_back(std::move(setup));
    }
    return result;
}

struct KernelRuntime {
    KernelSetup setup;
    std::map<std::string, std::shared_ptr<search::Template>> templates_by_name;
    std::vector<std::unique_ptr<search::Role>> roles;
    search::Scheduler scheduler{{}};
    search::CostModel cost_model;
    std::optional<search::Design> champion;
    std::int64_t champion_design_id = 0;
    std::int64_t champion_link_id = 0;
    double champion_cycles = 0.0;
    std::optional<double> baseline_cycles;
    double sol_cycles = 0.0;
    std::string status = "active";
    std::string reason;
    std::string failure_kind;
    std::set<std::string> known_hashes;
    std::map<std::string, std::int64_t> family_designs;  ///< measured designs per family
    std::map<std::string, std::int64_t> family_failed;   ///< designs per family that ended without a measurement
    std::int64_t steps_since_accept = 0;
    std::int64_t runs_since_accept = 0;  ///< device runs spent on the kernel since its last accept
    std::int64_t accepts_since_revalidation = 0;
    std::int64_t designs = 0;
    bool revalidate_pending = false;

    const std::string& name() const { return setup.spec.name; }
    nlohmann::json state_json() const {
        return {{"status", status},
                {"reason", reason},
                {"failure_kind", failure_kind},
                {"sol_cycles", sol_cycles},
                {"steps_since_accept", steps_since_accept},
                {"runs_since_accept", runs_since_accept},
                {"accepts_since_revalidation", accepts_since_revalidation},
                {"revalidate_pending", revalidate_pending}};
    }
};

struct CampaignDriver::Impl {
    store::CampaignStore* store;
    Evaluator* evaluator;
    CampaignOptions options;
    std::optional<knowledge::HardwareModel> model;
    search::RuleCheck rule_check;
    RoleFactory role_factory;
    std::vector<std::unique_ptr<KernelRuntime>> kernels;
    std::unique_ptr<log::EventLog> event_log;

    std::int64_t step = 0;
    std::int64_t device_runs = 0;
    double device_secs = 0.0;
    double wall_secs_before = 0.0;
    Clock::time_point run_start;
    std::int64_t steps_this_run = 0;
    bool strict_phase = false;           ///< the evaluator runs its strict preset (campaign age ≥ strict_after)
    std::int64_t device_runs_this_run = 0;
    std::string toolchain_version;

    store::TreeStore trees() { return store::TreeStore(store->database()); }

    double wall_used() const {
        return wall_secs_before + std::chrono::duration<double>(Clock::now() - run_start).count();
    }
    double age() const {
        double wall = options.wall_budget_secs > 0 ? wall_used() / options.wall_budget_secs : 0.0;
        double runs = options.device_run_budget > 0
                          ? static_cast<double>(device_runs) / static_cast<double>(options.device_run_budget)
                          : 0.0;
        return std::clamp(std::max(wall, runs), 0.0, 1.0);
    }

    void emit(const std::string& kind, const nlohmann::json& payload) {
        store->record_event(kind, payload.dump());
        if (event_log) {
            try {
                event_log->write(kind, payload);
            } catch (const std::exception&) {
            }
        }
    }

    void save_counters() {
        auto tree = trees();
        tree.set_state("counters", nlohmann::json{{"step", step},
                                                  {"device_runs", device_runs},
                                                  {"device_secs", device_secs},
                                                  {"wall_secs", wall_used()}}
                                       .dump());
        tree.set_state("run", nlohmann::json{{"state", "running"},
                                             {"pid", static_cast<std::int64_t>(::getpid())},
                                             {"started_at", m_started_at},
                                             {"heartbeat_at", log::utc_timestamp()}}
                                  .dump());
    }

    void save_kernel(KernelRuntime& kernel) {
        auto tree = trees();
        tree.set_state("kernel/" + kernel.name(), kernel.state_json().dump());
        nlohmann::json discounted = nlohmann::json::object();
        for (const auto& [role, stats] : kernel.scheduler.stats()) {
            discounted[role] = {{"weight", stats.weight}, {"weighted_rate", stats.weighted_rate}};
        }
        tree.set_state("scheduler/" + kernel.name(), discounted.dump());
        for (const auto& [role, stats] : kernel.scheduler.stats()) {
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

    std::string m_started_at;

    // ---- restore ---------------------------------------------------------------------------

    std::optional<search::Design> design_from_record(KernelRuntime& kernel, const store::DesignRecord& record) {
        auto found = kernel.templates_by_name.find(record.template_name);
        if (found != kernel.templates_by_name.end()) {
            search::Assignment assignment = numbers_of(record.params_json);
            try {
                search::Design design = found->second->instantiate(assignment);
                if (design.content_hash == record.content_hash) return design;
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
        return design;
    }

    void restore_kernel(KernelRuntime& kernel) {
        auto tree = trees();
        auto state = parse_or(tree.state("kernel/" + kernel.name()), nlohmann::json::object());
        kernel.status = state.value("status", std::string("active"));
        kernel.reason = state.value("reason", std::string());
        kernel.failure_kind = state.value("failure_kind", std::string());
        kernel.sol_cycles = state.value("sol_cycles", 0.0);
        kernel.steps_since_accept = state.value("steps_since_accept", std::int64_t{0});
        kernel.runs_since_accept = state.value("runs_since_accept", std::int64_t{0});
        kernel.accepts_since_revalidation = state.value("accepts_since_revalidation", std::int64_t{0});
        kernel.revalidate_pending = state.value("revalidate_pending", false);
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
            kernel.scheduler.set_stats(stats.role, role_stats);
        }
        for (const auto& edge : tree.list_edges(kernel.name())) {
            auto design = store->find_design(edge.design_id);
            if (!design) continue;
            kernel.known_hashes.insert(design->content_hash);
            kernel.designs += 1;
            auto tmpl = kernel.templates_by_name.find(design->template_name);
            std::string family = tmpl == kernel.templates_by_name.end() ? design->template_name : tmpl->second->family();
            const bool measured = edge.cycles && edge.verdict != "failed" && edge.verdict != "error";
            (measured ? kernel.family_designs : kernel.family_failed)[family] += 1;
            if (measured) {
                const auto quantities = numbers_of(edge.quantities_json);
                const auto params = numbers_of(design->params_json);
                kernel.cost_model.observe(family, quantities, *edge.cycles, &params);
            }
        }
        auto path = tree.champion_path(kernel.name());
        if (!path.empty()) {
            kernel.baseline_cycles = path.front().cycles;
            load_champion(kernel, path.back());
        }
    }

    void load_champion(KernelRuntime& kernel, const store::ChampionRecord& link) {
        auto record = store->find_design(link.design_id);
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

    // ---- evaluation ------------------------------------------------------------------------

    std::filesystem::path source_file(const search::Design& design) {
        auto dir = options.dir / "designs";
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

    std::int64_t record_design(const search::Design& design, std::optional<std::int64_t> parent) {
        store::DesignRecord record;
        record.content_hash = design.content_hash;
        record.target = design.target.empty() ? options.target : design.target;
        record.kernel = design.kernel;
        record.shape = design.shape_text;
        record.template_name = design.template_name;
        record.params_json = design.params_json().dump();
        record.source = design.source;
        record.parent_id = parent;
        return store->record_design(record);
    }

    eval::Candidate candidate_of(const search::Design& design, std::int64_t design_id, std::optional<double> predicted) {
        eval::Candidate candidate;
        candidate.design_id = design_id;
        candidate.content_hash = design.content_hash;
        candidate.kernel = design.kernel;
        candidate.source_file = source_file(design);
        candidate.quantities = design.quantities;
        candidate.features = design.features;
        candidate.predicted_cycles = predicted;
        return candidate;
    }

    /// Device runs the budget still allows (none: no device-run budget).
    std::optional<std::int64_t> device_runs_left() const {
        if (options.device_run_budget <= 0) return std::nullopt;
        return std::max<std::int64_t>(0, options.device_run_budget - device_runs);
    }

    std::optional<eval::Champion> champion_of(KernelRuntime& kernel) {
        if (!kernel.champion) return std::nullopt;
        eval::Champion champion;
        // The champion's estimate comes from the same (family-corrected) cost model as the
        // candidates' predictions, so that the estimate stage compares like with like; a design
        // that declares no quantities (the baseline) falls back to the toolchain's static schedule.
        std::optional<double> predicted;
        if (!kernel.champion->is_baseline) {
            predicted = kernel.cost_model.predict(kernel.champion->family, quantities_map(*kernel.champion),
                                                  &kernel.champion->params);
        }
        champion.candidate = candidate_of(*kernel.champion, kernel.champion_design_id, predicted);
        champion.cycles_median = kernel.champion_cycles;
        return champion;
    }

    /// Evaluate one design of `kernel` and commit the step. Returns the outcome's verdict.
    std::string evaluate_step(KernelRuntime& kernel, const search::Proposal& proposal) {
        std::optional<std::int64_t> parent;
        if (kernel.champion) parent = kernel.champion_design_id;
        std::int64_t design_id = record_design(proposal.design, parent);
        eval::Candidate candidate = candidate_of(proposal.design, design_id, proposal.predicted_cycles);
        auto champion = champion_of(kernel);

        eval::Outcome outcome;
        try {
            evaluator->set_device_run_allowance(device_runs_left());
            outcome = evaluator->evaluate(candidate, champion, kernel.setup.context);
        } catch (const Error& error) {
            if (error.kind() == ErrorKind::interrupted || error.kind() == ErrorKind::store) throw;
            outcome = eval::Outcome{};
            outcome.final_reason = fmt::format("evaluation ended with an error ({}): {}",
                                               error_kind_name(error.kind()), error.what());
            eval::StageRecord stage;
            stage.stage = eval::Stage::compile;
            stage.verdict = "error";
            stage.reason = outcome.final_reason;
            outcome.stages.push_back(stage);
        }
        std::string verdict = edge_verdict(outcome);
        bool is_baseline = proposal.design.is_baseline && !kernel.champion;
        bool becomes_champion = outcome.accepted || (is_baseline && outcome.correct && outcome.cycles_median);
        if (becomes_champion) verdict = "accepted";

        double champion_before = kernel.champion_cycles;
        std::optional<double> speedup = outcome.speedup;
        if (!speedup && outcome.cycles_median && champion_before > 0 && *outcome.cycles_median > 0) {
            speedup = champion_before / *outcome.cycles_median;
        }
        nlohmann::json quantities = proposal.design.quantities;
        for (const auto& [name, value] : proposal.design.features) quantities[name] = value;

        store::TreeEdgeRecord edge;
        edge.kernel = kernel.name();
        edge.design_id = design_id;
        edge.parent_design_id = parent;
        edge.role = proposal.role;
        edge.move = proposal.move;
        edge.reason = proposal.reason;
        edge.step = step + 1;
        edge.verdict = verdict;
        edge.last_stage = last_stage(outcome);
        edge.final_reason = final_reason(outcome);
        edge.cycles = outcome.cycles_median;
        edge.predicted_cycles = proposal.predicted_cycles;
        edge.speedup = speedup;
        edge.device_runs = outcome.device_runs;
        edge.device_secs = outcome.device_secs;
        edge.quantities_json = quantities.dump();

        // Everything the step decided, in one transaction.
        double new_champion_cycles = becomes_champion
                                         ? (outcome.cycles_median ? *outcome.cycles_median : champion_before)
                                         : champion_before;
        double log_gain = becomes_champion && champion_before > 0 && new_champion_cycles > 0
                              ? std::log(champion_before / new_champion_cycles)
                              : 0.0;
        // The bandit is paid in the share of the remaining distance to the bound that the step
        // closed, so that the first jump away from the baseline (any role's proposal wins it, by a
        // log-speedup tens of times any later one) does not lock the scheduler onto whichever
        // role made it; steps taken against the baseline itself are not scored at all.
        const bool against_baseline = kernel.champion && kernel.champion->is_baseline;
        if (!is_baseline && !against_baseline) {
            double scale = 1.0;
            if (kernel.sol_cycles > 0.0 && champion_before > kernel.sol_cycles) {
                scale = 1.0 / std::max(std::log(champion_before / kernel.sol_cycles), 0.02);
            }
            kernel.scheduler.record(proposal.role, log_gain * scale, outcome.device_secs, becomes_champion);
        }
        std::int64_t link_id = 0;
        {
            store::Transaction transaction = store->database().transaction();
            auto tree = trees();
            if (auto existing = tree.find_edge(kernel.name(), design_id)) tree.remove_edge(kernel.name(), design_id);
            tree.record_edge(edge);
            if (becomes_champion) {
                store::ChampionRecord link;
                link.kernel = kernel.name();
                link.design_id = design_id;
                link.step = step + 1;
                link.cycles = new_champion_cycles;
                link.reason = is_baseline ? "baseline: the first champion"
                                          : fmt::format("{}: {} ({})", proposal.role, proposal.move, edge.final_reason);
                link_id = tree.push_champion(link);
            }
            step += 1;
            device_runs += outcome.device_runs;
            device_secs += outcome.device_secs;
            kernel.steps_since_accept = becomes_champion ? 0 : kernel.steps_since_accept + 1;
            kernel.runs_since_accept = becomes_champion ? 0 : kernel.runs_since_accept + outcome.device_runs;
            if (becomes_champion && !is_baseline) kernel.accepts_since_revalidation += 1;
            if (is_baseline && !becomes_champion) {
                kernel.status = "failed";
                kernel.failure_kind = verdict == "error" ? "toolchain" : "baseline";
                kernel.reason = fmt::format("the baseline did not become champion ({} at {}): {}", verdict,
                                            edge.last_stage.empty() ? "?" : edge.last_stage, edge.final_reason);
            }
            save_counters();
            save_kernel(kernel);
            emit("step", {{"kernel", kernel.name()},
                          {"step", step},
                          {"role", proposal.role},
                          {"design", proposal.design.label()},
                          {"hash", proposal.design.content_hash},
                          {"verdict", verdict},
                          {"cycles", outcome.cycles_median ? nlohmann::json(*outcome.cycles_median) : nlohmann::json()},
                          {"device_runs", outcome.device_runs}});
            if (kernel.status == "failed") {
                emit("kernel_failed", {{"kernel", kernel.name()}, {"reason", kernel.reason}});
            }
            transaction.commit();
        }
        steps_this_run += 1;
        device_runs_this_run += outcome.device_runs;
        kernel.known_hashes.insert(proposal.design.content_hash);
        kernel.designs += 1;
        const bool measured = outcome.cycles_median && verdict != "failed" && verdict != "error";
        (measured ? kernel.family_designs : kernel.family_failed)[proposal.design.family] += 1;
        if (measured) {
            kernel.cost_model.observe(proposal.design.family, quantities_map(proposal.design), *outcome.cycles_median,
                                      &proposal.design.params);
        }
        if (becomes_champion) {
            if (is_baseline) kernel.baseline_cycles = new_champion_cycles;
            kernel.champion = proposal.design;
            kernel.champion_design_id = design_id;
            kernel.champion_link_id = link_id;
            kernel.champion_cycles = new_champion_cycles;
        }
        report(kernel, proposal, verdict);
        return verdict;
    }

    static std::map<std::string, double> quantities_map(const search::Design& design) {
        auto quantities = design.quantities;
        for (const auto& [name, value] : design.features) quantities.emplace(name, value);
        return quantities;
    }

    void report(const KernelRuntime& kernel, const search::Proposal& proposal, const std::string& verdict) {
        if (!options.progress) return;
        Progress progress;
        progress.kernel = kernel.name();
        progress.step = step;
        progress.role = proposal.role;
        progress.design = proposal.design.label();
        progress.verdict = verdict;
        if (kernel.champion) progress.champion_cycles = kernel.champion_cycles;
        progress.baseline_cycles = kernel.baseline_cycles;
        if (kernel.baseline_cycles && kernel.champion_cycles > 0) progress.speedup = *kernel.baseline_cycles / kernel.champion_cycles;
        if (kernel.sol_cycles > 0 && kernel.champion_cycles > 0) progress.sol_fraction = kernel.sol_cycles / kernel.champion_cycles;
        progress.device_runs_used = device_runs;
        progress.device_runs_budget = options.device_run_budget;
        progress.wall_secs_used = wall_used();
        progress.wall_secs_budget = options.wall_budget_secs;
        double elapsed = std::chrono::duration<double>(Clock::now() - run_start).count();
        double eta = std::max(0.0, options.wall_budget_secs - wall_used());
        if (device_runs_this_run > 0 && options.device_run_budget > 0) {
            double per_run = elapsed / static_cast<double>(device_runs_this_run);
            eta = std::min(eta, per_run * static_cast<double>(std::max<std::int64_t>(0, options.device_run_budget - device_runs)));
        }
        progress.eta_secs = eta;
        options.progress(progress);
    }

    // ---- revalidation ----------------------------------------------------------------------

    void revalidate(KernelRuntime& kernel, const std::string& why) {
        auto tree = trees();
        auto path = tree.champion_path(kernel.name());
        kernel.accepts_since_revalidation = 0;
        kernel.revalidate_pending = false;
        if (path.size() < 2 || !kernel.champion) {
            store::Transaction transaction = store->database().transaction();
            save_kernel(kernel);
            transaction.commit();
            return;
        }
        const auto& predecessor_link = path[path.size() - 2];
        auto predecessor_record = store->find_design(predecessor_link.design_id);
        auto predecessor_design = predecessor_record ? design_from_record(kernel, *predecessor_record) : std::nullopt;
        if (!predecessor_design) return;
        eval::Champion champion = *champion_of(kernel);
        eval::Champion predecessor;
        predecessor.candidate = candidate_of(*predecessor_design, predecessor_link.design_id, std::nullopt);
        predecessor.cycles_median = predecessor_link.cycles;
        evaluator->set_device_run_allowance(device_runs_left());
        eval::Outcome outcome = evaluator->revalidate(champion, predecessor, kernel.setup.context);
        // a re-validation the budget cut short decided nothing: the champion stays
        bool holds = outcome.accepted || outcome.budget_exhausted;
        {
            store::Transaction transaction = store->database().transaction();
            device_runs += outcome.device_runs;
            device_secs += outcome.device_secs;
            if (!holds) {
                tree.end_champion(path.back().id, fmt::format("re-validation ({}) failed: {}", why, final_reason(outcome)));
            }
            save_counters();
            save_kernel(kernel);
            emit("revalidation", {{"kernel", kernel.name()},
                                  {"why", why},
                                  {"champion_design_id", kernel.champion_design_id},
                                  {"holds", holds},
                                  {"reason", final_reason(outcome)}});
            transaction.commit();
        }
        device_runs_this_run += outcome.device_runs;
        if (!holds) load_champion(kernel, predecessor_link);
    }

    // ---- the loop --------------------------------------------------------------------------

    KernelRuntime* pick_kernel() {
        KernelRuntime* best = nullptr;
        double best_priority = -1e300;
        for (auto& kernel : kernels) {
            if (kernel->status != "active") continue;
            if (!kernel->champion) return kernel.get();  // baselines first
            double reference = kernel->sol_cycles > 0 ? kernel->sol_cycles
                                                      : (kernel->baseline_cycles ? *kernel->baseline_cycles / 100.0 : 1.0);
            double distance = std::log(std::max(kernel->champion_cycles / std::max(reference, 1e-9), 1.0 + 1e-9));
            // Distance from the bound, discounted by what the kernel has cost since it last
            // improved: a kernel stuck near the limit of its families yields its turn to kernels
            // still gaining, since every kernel's log-speedup counts alike in the geomean.
            double priority = distance / (1.0 + 0.05 * static_cast<double>(kernel->steps_since_accept) +
                                          static_cast<double>(kernel->runs_since_accept) / 25.0);
            if (priority > best_priority) {
                best_priority = priority;
                best = kernel.get();
            }
        }
        return best;
    }

    search::SearchContext context_for(KernelRuntime& kernel) {
        search::SearchContext context;
        context.kernel = kernel.name();
        context.templates = kernel.setup.templates;
        context.champion = kernel.champion;
        context.champion_cycles = kernel.champion_cycles;
        context.speed_of_light_cycles = kernel.sol_cycles;
        context.cost_model = &kernel.cost_model;
        context.is_known = [&kernel](const std::string& hash) { return kernel.known_hashes.count(hash) > 0; };
        context.rule_check = rule_check;
        // A family counts as explored once a design of it was measured; one whose designs keep
        // failing before a device run (illegal corners, learnt rules) counts after three failures,
        // so that the architect neither abandons a family after one bad sample nor retries a
        // family that does not build for ever.
        context.family_designs = kernel.family_designs;
        for (const auto& [family, failed] : kernel.family_failed) {
            if (failed >= 3) context.family_designs[family] += 1;
        }
        context.age = age();
        context.seed = mix_seed(options.seed, kernel.name(), step);
        return context;
    }

    void step_kernel(KernelRuntime& kernel) {
        if (!kernel.champion) {
            auto baseline = std::find_if(kernel.setup.templates.begin(), kernel.setup.templates.end(),
                                         [](const auto& tmpl) { return tmpl->is_baseline(); });
            if (baseline == kernel.setup.templates.end()) {
                fail_kernel(kernel, "baseline", "the kernel's baseline source could not be loaded");
                return;
            }
            search::Proposal proposal;
            proposal.design = (*baseline)->instantiate({});
            proposal.role = "baseline";
            proposal.move = "baseline";
            proposal.reason = "the official baseline of kernels.yaml: measured first, it is the first champion";
            evaluate_step(kernel, proposal);
            return;
        }
        search::SearchContext context = context_for(kernel);
        std::set<std::string> unavailable;
        for (std::size_t attempt = 0; attempt < kernel.roles.size(); ++attempt) {
            std::string role_name = kernel.scheduler.pick(context.age, mix_seed(options.seed, kernel.name(), step, attempt + 1),
                                                          unavailable);
            if (role_name.empty()) break;
            auto role = std::find_if(kernel.roles.begin(), kernel.roles.end(),
                                     [&](const auto& candidate) { return candidate->name() == role_name; });
            std::vector<search::Proposal> proposals;
            if (role != kernel.roles.end()) proposals = (*role)->propose(context);
            proposals.erase(std::remove_if(proposals.begin(), proposals.end(),
                                           [&](const search::Proposal& proposal) {
                                               return kernel.known_hashes.count(proposal.design.content_hash) > 0;
                                           }),
                            proposals.end());
            if (proposals.empty()) {
                kernel.scheduler.record_empty(role_name);
                unavailable.insert(role_name);
                continue;
            }
            if (proposals.front().role.empty()) proposals.front().role = role_name;
            evaluate_step(kernel, proposals.front());
            if (options.revalidate_every_accepts > 0 &&
                kernel.accepts_since_revalidation >= options.revalidate_every_accepts) {
                revalidate(kernel, fmt::format("every {} accepts", options.revalidate_every_accepts));
            }
            return;
        }
        kernel.status = "exhausted";
        kernel.reason = "no role has a new design to propose";
        store::Transaction transaction = store->database().transaction();
        save_kernel(kernel);
        emit("kernel_exhausted", {{"kernel", kernel.name()}, {"reason", kernel.reason}});
        transaction.commit();
    }

    void fail_kernel(KernelRuntime& kernel, const std::string& kind, const std::string& reason) {
        kernel.status = "failed";
        kernel.failure_kind = kind;
        kernel.reason = reason;
        store::Transaction transaction = store->database().transaction();
        save_kernel(kernel);
        emit("kernel_failed", {{"kernel", kernel.name()}, {"kind", kind}, {"reason", reason}});
        transaction.commit();
    }

    /// Late in the campaign (age ≥ strict_after) the evaluator switches to its strict preset: a
    /// false champion costs more the less budget is left to undo it. Recorded as an event.
    void enter_strict_phase_when_due() {
        if (strict_phase || options.strict_after >= 1.0 || age() < options.strict_after) return;
        strict_phase = true;
        evaluator->set_strict(true);
        emit("acceptance_strict", {{"age", age()}, {"strict_after", options.strict_after}, {"step", step}});
    }

    void set_run_state(const std::string& state, const std::string& stop_reason) {
        trees().set_state("run", nlohmann::json{{"state", state},
                                                {"pid", static_cast<std::int64_t>(::getpid())},
                                                {"started_at", m_started_at},
                                                {"heartbeat_at", log::utc_timestamp()},
                                                {"stop_reason", stop_reason}}
                                     .dump());
    }

    CampaignResult run_loop() {
        run_start = Clock::now();
        m_started_at = log::utc_timestamp();
        if (!options.dir.empty()) {
            std::filesystem::create_directories(options.dir);
            try {
                event_log = std::make_unique<log::EventLog>(options.dir / std::string(log::k_event_log_name));
            } catch (const Error&) {
            }
        }
        auto tree = trees();
        auto counters = parse_or(tree.state("counters"), nlohmann::json::object());
        step = counters.value("step", std::int64_t{0});
        // The cascade counts every launch in the store as it starts (CampaignStore::count_device_launch):
        // the launches of a step killed in flight were never committed with its step, but are spent.
        device_runs = std::max(counters.value("device_runs", std::int64_t{0}), store->device_launches());
        device_secs = counters.value("device_secs", 0.0);
        wall_secs_before = counters.value("wall_secs", 0.0);
        bool resumed = step > 0;

        std::string why_missing;
        toolchain_version = evaluator->toolchain_version(&why_missing);
        auto previous_version = tree.state("toolchain_version");
        {
            store::Transaction transaction = store->database().transaction();
            tree.set_state("budgets", nlohmann::json{{"wall_secs", options.wall_budget_secs},
                                                     {"device_runs", options.device_run_budget},
                                                     {"llm_tokens", options.llm_token_budget},
                                                     {"seed", options.seed},
                                                     {"target", options.target}}
                                          .dump());
            set_run_state("running", "");
            // A stage a killed run left "running" keeps its completed launches and is marked
            // interrupted; its design has no tree edge and is evaluated again when proposed.
            std::int64_t interrupted_rows = store->mark_interrupted_evaluations(
                "its process ended in the middle of this stage (killed or crashed); the launches it completed are kept");
            if (interrupted_rows > 0) emit("evaluations_interrupted", {{"count", interrupted_rows}});
            emit(resumed ? "campaign_resumed" : "campaign_started",
                 {{"step", step}, {"device_runs", device_runs}, {"toolchain_version", toolchain_version}});
            transaction.commit();
        }

        for (auto& kernel : kernels) {
            restore_kernel(*kernel);
            // A kernel that failed for want of a toolchain gets another chance on every run.
            if (kernel->status == "failed" && kernel->failure_kind == "toolchain" && !toolchain_version.empty()) {
                kernel->status = "active";
                kernel->reason.clear();
                kernel->failure_kind.clear();
            }
            if (kernel->status == "exhausted") kernel->status = "active";  // new knowledge may open moves
            store::Transaction transaction = store->database().transaction();
            for (const auto& error : kernel->setup.template_errors) {
                emit("template_failed", {{"kernel", kernel->name()}, {"error", error}});
            }
            if (kernel->sol_cycles <= 0) kernel->sol_cycles = evaluator->speed_of_light_cycles(kernel->setup.context);
            if (toolchain_version.empty() && kernel->status == "active") {
                kernel->status = "failed";
                kernel->failure_kind = "toolchain";
                kernel->reason = fmt::format("toolchain missing: {}", why_missing.empty() ? "no version" : why_missing);
                emit("kernel_failed", {{"kernel", kernel->name()}, {"kind", "toolchain"}, {"reason", kernel->reason}});
            }
            if (previous_version && !previous_version->empty() && !toolchain_version.empty() &&
                *previous_version != toolchain_version && kernel->champion) {
                kernel->revalidate_pending = true;
            }
            save_kernel(*kernel);
            transaction.commit();
        }
        if (!toolchain_version.empty()) {
            if (previous_version && !previous_version->empty() && *previous_version != toolchain_version) {
                emit("toolchain_changed", {{"from", *previous_version}, {"to", toolchain_version}});
            }
            tree.set_state("toolchain_version", toolchain_version);
        }
        for (auto& kernel : kernels) {
            if (kernel->revalidate_pending && kernel->status == "active") {
                revalidate(*kernel, fmt::format("toolchain changed to {}", toolchain_version));
            }
        }

        CampaignResult result;
        while (true) {
            if (options.stop_requested ? options.stop_requested() : interrupted()) {
                result.stop = StopReason::interrupted;
                result.message = "stopped by a signal after the step in flight";
                break;
            }
            if (options.max_steps && steps_this_run >= *options.max_steps) {
                result.stop = StopReason::step_limit;
                result.message = fmt::format("stopped after {} steps (step limit)", steps_this_run);
                break;
            }
            if (options.device_run_budget > 0 && device_runs >= options.device_run_budget) {
                result.stop = StopReason::device_budget;
                result.message = fmt::format("device-run budget spent ({} of {})", device_runs, options.device_run_budget);
                break;
            }
            if (options.wall_budget_secs > 0 && wall_used() >= options.wall_budget_secs) {
                result.stop = StopReason::wall_budget;
                result.message = fmt::format("wall-time budget spent ({:.0f} s of {:.0f} s)", wall_used(),
                                             options.wall_budget_secs);
                break;
            }
            enter_strict_phase_when_due();
            KernelRuntime* kernel = pick_kernel();
            if (!kernel) {
                bool any_champion = std::any_of(kernels.begin(), kernels.end(), [](const auto& k) { return k->champion.has_value(); });
                result.stop = any_champion ? StopReason::finished : StopReason::all_failed;
                result.message = any_champion ? "every kernel is exhausted or failed"
                                              : "no kernel could be started: every kernel failed (see kernel reasons)";
                break;
            }
            step_kernel(*kernel);
        }
        {
            store::Transaction transaction = store->database().transaction();
            save_counters();
            std::string state = result.stop == StopReason::finished || result.stop == StopReason::all_failed
                                    ? "finished"
                                    : "stopped";
            set_run_state(state, stop_reason_name(result.stop));
            emit("campaign_stopped", {{"reason", stop_reason_name(result.stop)},
                                      {"message", result.message},
                                      {"steps", steps_this_run},
                                      {"device_runs", device_runs}});
            transaction.commit();
        }
        result.steps_this_run = steps_this_run;
        result.device_runs_used = device_runs;
        for (const auto& kernel : kernels) {
            KernelOutcome outcome;
            outcome.kernel = kernel->name();
            outcome.status = kernel->status;
            outcome.reason = kernel->reason;
            outcome.baseline_cycles = kernel->baseline_cycles;
            if (kernel->champion) {
                outcome.champion_cycles = kernel->champion_cycles;
                outcome.champion = kernel->champion->label();
            }
            outcome.designs = kernel->designs;
            result.kernels.push_back(outcome);
        }
        return result;
    }
};

CampaignDriver::CampaignDriver(store::CampaignStore& store, Evaluator& evaluator, std::vector<KernelSetup> kernels,
                               CampaignOptions options, std::optional<knowledge::HardwareModel> model,
                               search::RuleCheck rule_check, RoleFactory roles)
    : m_impl(std::make_unique<Impl>()) {
    m_impl->store = &store;
    m_impl->evaluator = &evaluator;
    m_impl->options = std::move(options);
    m_impl->model = std::move(model);
    m_impl->rule_check = std::move(rule_check);
    m_impl->role_factory = roles ? std::move(roles) : RoleFactory([](const std::string&) { return search::make_heuristic_roles(); });
    for (auto& setup : kernels) {
        auto runtime = std::make_unique<KernelRuntime>();
        runtime->setup = std::move(setup);
        for (const auto& tmpl : runtime->setup.templates) runtime->templates_by_name[tmpl->name()] = tmpl;
        runtime->roles = m_impl->role_factory(runtime->name());
        std::vector<std::string> names;
        for (const auto& role : runtime->roles) names.push_back(role->name());
        runtime->scheduler = search::Scheduler(names);
        if (m_impl->model) runtime->cost_model = search::CostModel(*m_impl->model);
        m_impl->kernels.push_back(std::move(runtime));
    }
}

CampaignDriver::~CampaignDriver() = default;

CampaignResult CampaignDriver::run() {
    std::optional<CampaignLock> lock;
    if (m_impl->options.take_lock) lock.emplace(CampaignLock::acquire(m_impl->options.dir));
    return m_impl->run_loop();
}

}  // namespace npuopt::campaign
