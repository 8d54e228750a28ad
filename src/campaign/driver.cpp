// The campaign loop (driver.hpp): picks a kernel, asks its search for a proposal, has the
// evaluator judge it (driver_step.cpp) and commits the step — the evaluation's records, the tree
// edge, the champion, the counters and the event — in one transaction. A run's beginning and end
// are in driver_run.cpp, porting and re-validation in driver_port.cpp; persistence lives in
// campaign_records, the search and its learning in search/kernel_search.

#include "campaign/driver_impl.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "campaign/lock.hpp"
#include "campaign/records_io.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "target/toolchain.hpp"

namespace npuopt::campaign {

namespace driver_detail {

std::uint64_t mix_seed(std::uint64_t seed, const std::string& kernel, std::int64_t step, std::uint64_t salt) {
    std::string hash = content_hash(fmt::format("{}|{}|{}|{}", seed, kernel, step, salt));
    return std::stoull(hash.substr(0, 15), nullptr, 16);
}

std::string last_stage(const eval::Outcome& outcome) {
    return outcome.stages.empty() ? "" : eval::stage_name(outcome.stages.back().stage);
}

std::string final_reason(const eval::Outcome& outcome) {
    if (!outcome.final_reason.empty()) return outcome.final_reason;
    return outcome.stages.empty() ? "" : outcome.stages.back().reason;
}

eval::StepVerdict step_verdict(const eval::Outcome& outcome) {
    if (outcome.accepted) return eval::StepVerdict::accepted;
    if (outcome.stages.empty()) return eval::StepVerdict::error;
    return eval::step_verdict_of(outcome.stages.back().verdict);
}

std::string queue_key(const std::string& kernel) { return "user_queue/" + kernel; }

std::vector<std::int64_t> read_queue(store::TreeStore tree, const std::string& kernel) {
    std::vector<std::int64_t> ids;
    const auto text = tree.state(queue_key(kernel));
    if (!text || text->empty()) return ids;
    const nlohmann::json json = nlohmann::json::parse(*text, nullptr, false);
    if (!json.is_array()) return ids;
    for (const auto& id : json) {
        if (id.is_number_integer()) ids.push_back(id.get<std::int64_t>());
    }
    return ids;
}

namespace {
std::string resume_key(const std::string& kernel) { return "resume_queue/" + kernel; }
}  // namespace

std::vector<ResumeEntry> read_resume_queue(store::TreeStore tree, const std::string& kernel) {
    std::vector<ResumeEntry> entries;
    const auto text = tree.state(resume_key(kernel));
    if (!text || text->empty()) return entries;
    const nlohmann::json json = nlohmann::json::parse(*text, nullptr, false);
    if (!json.is_array()) return entries;
    for (const auto& item : json) {
        if (!item.is_object() || !item.contains("design_id") || !item["design_id"].is_number_integer()) continue;
        entries.push_back({item["design_id"].get<std::int64_t>(), item.value("role", std::string("resume")),
                           item.value("move", std::string()), item.value("reason", std::string())});
    }
    return entries;
}

void write_resume_queue(store::TreeStore tree, const std::string& kernel, const std::vector<ResumeEntry>& entries) {
    nlohmann::json json = nlohmann::json::array();
    for (const auto& entry : entries) {
        json.push_back({{"design_id", entry.design_id}, {"role", entry.role}, {"move", entry.move}, {"reason", entry.reason}});
    }
    tree.set_state(resume_key(kernel), json.dump());
}

}  // namespace driver_detail

using namespace driver_detail;

bool queue_design(store::CampaignStore& store, const std::string& kernel, std::int64_t design_id) {
    store::TreeStore tree(store.database());
    std::vector<std::int64_t> queue = read_queue(tree, kernel);
    if (std::find(queue.begin(), queue.end(), design_id) != queue.end()) return false;
    queue.push_back(design_id);
    tree.set_state(queue_key(kernel), nlohmann::json(queue).dump());
    return true;
}

std::int64_t queue_user_design(store::CampaignStore& store, const std::string& target, const config::KernelSpec& kernel,
                               const std::string& source, const std::string& file_name) {
    const search::Design design =
        search::design_from_source(target, kernel.name, target::format_shape(kernel.shape), source, "user",
                                   kernel.baseline.has_extension() ? kernel.baseline.extension().string() : ".rs");
    store::Transaction transaction = store.database().transaction();
    store::DesignRecord record;
    record.content_hash = design.content_hash;
    record.target = target;
    record.kernel = kernel.name;
    record.shape = design.shape_text;
    record.template_name = design.template_name;
    record.source = design.source;
    const std::int64_t id = store.record_design(record);
    queue_design(store, kernel.name, id);
    store.record_event("design_added", nlohmann::json{{"kernel", kernel.name},
                                                      {"design_id", id},
                                                      {"hash", design.content_hash},
                                                      {"file", file_name}}
                                           .dump());
    transaction.commit();
    return id;
}

std::string stop_reason_name(StopReason reason) {
    switch (reason) {
        case StopReason::finished: return "finished";
        case StopReason::wall_budget: return "wall_budget";
        case StopReason::device_budget: return "device_budget";
        case StopReason::interrupted: return "interrupted";
        case StopReason::step_limit: return "step_limit";
        case StopReason::all_failed: return "all_failed";
        case StopReason::toolchain_changed: return "toolchain_changed";
        case StopReason::toolchain_missing: return "toolchain_missing";
        case StopReason::token_budget: return "token_budget";
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

CampaignResult CampaignDriver::Impl::run_loop() {
    begin_run();
    restore_kernels();
    while (true) {
        if (auto stop = stop_condition()) return end_run(std::move(*stop));
        if (auto stop = toolchain_moved()) return end_run(std::move(*stop));
        enter_strict_phase_when_due();
        KernelRuntime* kernel = pick_kernel();
        if (!kernel) {
            const bool any_champion =
                std::any_of(kernels.begin(), kernels.end(), [](const auto& k) { return k->champion.has_value(); });
            CampaignResult result;
            result.stop = any_champion ? StopReason::finished : StopReason::all_failed;
            result.message = options.only_queued ? "the designs users added were evaluated"
                             : any_champion ? "every kernel is exhausted or failed"
                                            : "no kernel could be started: every kernel failed (see kernel reasons)";
            return end_run(std::move(result));
        }
        if (options.parallel_evaluators.size() > 1 && plain_search_step(*kernel)) {
            step_round(*kernel);
        } else {
            step_kernel(*kernel);
        }
    }
}

KernelRuntime* CampaignDriver::Impl::pick_kernel(const std::vector<const KernelRuntime*>& taken) {
    KernelRuntime* best = nullptr;
    double best_priority = -1e300;
    for (auto& kernel : kernels) {
        if (!kernel->active()) continue;
        if (std::find(taken.begin(), taken.end(), kernel.get()) != taken.end()) continue;
        if (!kernel->champion && !kernel->baseline_tried) return kernel.get();  // baselines first
        if (kernel->port_pending) return kernel.get();  // then ports after a toolchain update
        if (!read_resume_queue(records.trees(), kernel->name()).empty()) return kernel.get();  // then steps a budget cut
        if (!read_queue(records.trees(), kernel->name()).empty()) return kernel.get();  // then designs users added
        if (options.only_queued) continue;
        const double reference = kernel->sol_cycles > 0
                                     ? kernel->sol_cycles
                                     : (kernel->baseline_cycles ? *kernel->baseline_cycles / 100.0 : 1.0);
        // A kernel whose baseline failed and that has no correct design yet counts as far
        // from its bound (as a baseline is), discounted like the others by its failed steps.
        const double distance =
            kernel->champion ? std::log(std::max(kernel->champion_cycles / std::max(reference, 1e-9), 1.0 + 1e-9))
                             : std::log(100.0);
        // Distance from the bound, discounted by what the kernel has cost since it last
        // improved: a kernel stuck near the limit of its families yields its turn to kernels
        // still gaining, since every kernel's log-speedup counts alike in the geomean.
        const double priority = distance / (1.0 + 0.05 * static_cast<double>(kernel->steps_since_accept) +
                                            static_cast<double>(kernel->runs_since_accept) / 25.0);
        if (priority > best_priority) {
            best_priority = priority;
            best = kernel.get();
        }
    }
    return best;
}

void CampaignDriver::Impl::step_kernel(KernelRuntime& kernel) {
    if (!kernel.champion && !kernel.baseline_tried) {
        step_baseline(kernel);
        return;
    }
    if (kernel.port_pending) {
        port_kernel(kernel);
        return;
    }
    if (step_resumed(kernel)) return;
    if (step_queued(kernel)) return;
    if (auto proposal = propose(kernel, counters.step)) {
        evaluate_step(kernel, *proposal);
        revalidate_when_due(kernel);
    }
}

std::optional<search::Proposal> CampaignDriver::Impl::propose(KernelRuntime& kernel, std::int64_t step,
                                                              bool may_exhaust) {
    std::string blocked_by;
    search::ProposalRequest request;
    request.templates = open_templates(kernel, &blocked_by);
    if (!blocked_by.empty()) {
        block_kernel(kernel, blocked_by);
        return std::nullopt;
    }
    request.champion = kernel.champion;
    request.champion_cycles = kernel.champion_cycles;
    request.speed_of_light_cycles = kernel.sol_cycles;
    request.rule_check = rule_check;
    request.age = age();
    request.seed = mix_seed(options.seed, kernel.name(), step);
    request.pick_seed = [this, &kernel, step](std::size_t attempt) {
        return mix_seed(options.seed, kernel.name(), step, attempt + 1);
    };
    if (kernel.reopen_steps_left > 0) {
        request.reopened_terms = kernel.reopened_terms;
        if (--kernel.reopen_steps_left == 0) kernel.reopened_terms.clear();  // saved with this step
    }
    if (options.schedule_screen > 1) {
        request.screen_width = static_cast<std::size_t>(options.schedule_screen);
        request.screen_open = [this] { return screen_budget_open(); };
        request.screen = [this, &kernel](const search::Proposal& proposal) {
            if (!screen_budget_open()) {
                search::ScreenEstimate unasked;
                unasked.unasked = true;
                unasked.why = fmt::format("the screen's share of the device time is spent ({:.1f} s of {:.1f} s × {})",
                                          counters.screen_secs, counters.device_secs, options.screen_share.value_or(0.0));
                return unasked;
            }
            eval::Candidate candidate = records.candidate_of(proposal.design, 0, std::nullopt);
            const auto started = std::chrono::steady_clock::now();
            search::ScreenEstimate estimate = evaluator->static_estimate(candidate, kernel.setup.context);
            counters.screen_secs += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
            ++counters.screen_calls;
            return estimate;
        };
    }
    if (auto proposal = kernel.search.next_proposal(request)) return proposal;
    if (!may_exhaust) return std::nullopt;
    kernel.state = KernelState::exhausted;
    kernel.reason = "no role has a new design to propose";
    store::Transaction transaction = records.store().database().transaction();
    records.save_kernel(kernel);
    records.emit("kernel_exhausted", {{"kernel", kernel.name()}, {"reason", kernel.reason}});
    transaction.commit();
    return std::nullopt;
}

bool CampaignDriver::Impl::screen_budget_open() const {
    // The screen costs wall time and no device run. It may always spend its share of what the
    // device runs took so far: nearly free where they are slow, a bounded overhead where a run
    // costs no more than a compile. Before any device run it waits.
    if (!options.screen_share || counters.screen_secs < *options.screen_share * counters.device_secs) return true;
    // Beyond its share, it spends the wall time the device runs will not need: while the
    // campaign, at what a device run has cost so far (the screen's time included), would spend
    // its whole device-run budget well inside its wall budget. A campaign that the wall budget
    // ends (a demo, a night on a fast device) keeps its time for device runs.
    if (*options.screen_share <= 0.0 || counters.device_runs <= 0 || options.device_run_budget <= 0) return false;
    if (options.wall_budget_secs <= 0.0) return true;
    constexpr double k_slack_margin = 0.8;  ///< of the wall time left, what the projection may take
    const double used = counters.wall_used();
    const double per_run = used / static_cast<double>(counters.device_runs);
    const double runs_left = static_cast<double>(std::max<std::int64_t>(0, options.device_run_budget - counters.device_runs));
    const double reserve = options.wall_reserve_secs ? options.wall_reserve_secs(counters.device_secs /
                                                                                 static_cast<double>(counters.device_runs))
                                                     : 0.0;
    return per_run * runs_left < k_slack_margin * (options.wall_budget_secs - used - reserve);
}

void CampaignDriver::Impl::revalidate_when_due(KernelRuntime& kernel) {
    if (options.revalidate_every_accepts > 0 && kernel.accepts_since_revalidation >= options.revalidate_every_accepts) {
        revalidate(kernel, fmt::format("every {} accepts", options.revalidate_every_accepts));
    }
}

bool CampaignDriver::Impl::plain_search_step(const KernelRuntime& kernel) {
    if (options.only_queued || (!kernel.champion && !kernel.baseline_tried) || kernel.port_pending) return false;
    return read_resume_queue(records.trees(), kernel.name()).empty() && read_queue(records.trees(), kernel.name()).empty();
}

void CampaignDriver::Impl::step_round(KernelRuntime& first) {
    // Plan: search steps taken from the kernels in the order the serial loop would pick them,
    // round-robin while builders are left, each proposal seeded by its place in the round, so
    // that the plan depends on nothing a device returns during the round.
    const auto& workers = options.parallel_evaluators;
    std::size_t limit = workers.size();
    if (options.max_steps) {  // a step limit holds within a round too
        limit = std::min<std::size_t>(limit, static_cast<std::size_t>(std::max<std::int64_t>(
                                                 1, *options.max_steps - counters.steps_this_run)));
    }
    std::vector<KernelRuntime*> order;
    {
        std::vector<const KernelRuntime*> taken;
        for (KernelRuntime* kernel = &first; kernel && order.size() < limit;) {
            order.push_back(kernel);
            taken.push_back(kernel);
            kernel = pick_kernel(taken);
            if (kernel && !plain_search_step(*kernel)) break;  // a baseline, port or queued step: served alone next
        }
    }
    std::vector<PreparedStep> steps;
    std::map<const KernelRuntime*, int> in_round;  // candidates per kernel planned so far
    for (std::size_t turn = 0; steps.size() < limit && !order.empty(); ++turn) {
        KernelRuntime* kernel = order[turn % order.size()];
        const bool first_of_kernel = in_round[kernel] == 0;
        auto proposal = propose(*kernel, counters.step + static_cast<std::int64_t>(steps.size()), first_of_kernel);
        if (!proposal) {  // nothing more of this kernel in this round
            order.erase(std::find(order.begin(), order.end(), kernel));
            continue;
        }
        kernel->search.mark_known(proposal->design.content_hash);  // in flight: not proposed again
        in_round[kernel] += 1;
        steps.push_back(prepare_step(*kernel, *proposal));
    }
    if (steps.empty()) return;
    // Measure: each step on its own evaluator and thread; the budgets are shared out first.
    for (std::size_t idx = 0; idx < steps.size(); ++idx) {
        apply_budgets(*workers[idx], static_cast<std::int64_t>(steps.size()));
    }
    std::vector<std::exception_ptr> failures(steps.size());
    std::vector<char> measured(steps.size(), 0);
    {
        std::vector<std::jthread> threads;
        for (std::size_t idx = 0; idx < steps.size(); ++idx) {
            threads.emplace_back([this, &steps, &workers, &failures, &measured, idx] {
                try {
                    measure_step(steps[idx], *workers[idx]);
                    measured[idx] = 1;
                } catch (...) {
                    failures[idx] = std::current_exception();
                }
            });
        }
    }  // joined
    // Commit in the order planned; a step whose evaluation ended with an error that ends the run
    // (an interrupt, the store) is not committed, the others are, and the error is raised after.
    for (std::size_t idx = 0; idx < steps.size(); ++idx) {
        if (!measured[idx]) continue;
        KernelRuntime& kernel = *steps[idx].kernel;
        if (steps[idx].opponent && kernel.champion_design_id != steps[idx].opponent->candidate.design_id) {
            steps[idx].replaced_by = kernel.champion_design_id;  // its opponent is no longer the champion
        }
        finish_step(steps[idx], *workers[idx], 0);
        revalidate_when_due(kernel);
    }
    for (const auto& failure : failures) {
        if (failure) std::rethrow_exception(failure);
    }
}

void CampaignDriver::Impl::step_baseline(KernelRuntime& kernel) {
    auto baseline = std::find_if(kernel.setup.templates.begin(), kernel.setup.templates.end(),
                                 [](const auto& tmpl) { return tmpl->is_baseline(); });
    if (baseline == kernel.setup.templates.end()) {
        kernel.baseline_tried = true;
        kernel.baseline_failure = "the kernel's baseline source could not be loaded";
        store::Transaction transaction = records.store().database().transaction();
        records.save_kernel(kernel);
        records.emit("baseline_failed", {{"kernel", kernel.name()},
                                         {"shape", kernel.setup.spec.shape_name},
                                         {"reason", kernel.baseline_failure},
                                         {"then", "the search goes on; the first correct design becomes the reference"}});
        transaction.commit();
        return;
    }
    search::Proposal proposal;
    proposal.design = (*baseline)->instantiate({});
    proposal.role = "baseline";
    proposal.move = "baseline";
    proposal.reason = "the official baseline of kernels.yaml: measured first, it is the first champion";
    evaluate_step(kernel, proposal);
}

bool CampaignDriver::Impl::step_queued(KernelRuntime& kernel) {
    std::vector<std::int64_t> queue = read_queue(records.trees(), kernel.name());
    if (queue.empty()) return false;
    const std::int64_t id = queue.front();
    auto record = records.store().find_design(id);
    auto design = record ? records.design_from_record(kernel, *record) : std::nullopt;
    if (design) {
        search::Proposal proposal;
        proposal.design = *design;
        const QueuedOrigin origin = queued_origin(records.store(), id);  // `npuopt add` or `npuopt import`
        proposal.role = origin.role;
        proposal.move = origin.move;
        proposal.reason = origin.reason;
        evaluate_step(kernel, proposal);
    }
    queue = read_queue(records.trees(), kernel.name());
    queue.erase(std::remove(queue.begin(), queue.end(), id), queue.end());
    store::Transaction transaction = records.store().database().transaction();
    records.trees().set_state(queue_key(kernel.name()), nlohmann::json(queue).dump());
    transaction.commit();
    return true;
}

bool CampaignDriver::Impl::step_resumed(KernelRuntime& kernel) {
    std::vector<ResumeEntry> queue = read_resume_queue(records.trees(), kernel.name());
    if (queue.empty()) return false;
    const ResumeEntry entry = queue.front();
    queue.erase(queue.begin());
    {  // taken off first: a step cut again is queued again by evaluate_step
        store::Transaction transaction = records.store().database().transaction();
        write_resume_queue(records.trees(), kernel.name(), queue);
        transaction.commit();
    }
    auto record = records.store().find_design(entry.design_id);
    auto design = record ? records.design_from_record(kernel, *record) : std::nullopt;
    if (!design) return true;
    search::Proposal proposal;
    proposal.design = *design;
    proposal.role = entry.role;
    proposal.move = entry.move;
    proposal.reason = entry.reason.rfind("resumed: ", 0) == 0 || entry.reason.rfind("re-raced: ", 0) == 0
                          ? entry.reason
                          : fmt::format("resumed: cut short by a budget in an earlier run; {}", entry.reason);
    evaluate_step(kernel, proposal);
    return true;
}

void CampaignDriver::Impl::enter_strict_phase_when_due() {
    if (strict_phase || options.strict_after >= 1.0 || age() < options.strict_after) return;
    strict_phase = true;
    evaluator->set_strict(true);
    for (Evaluator* worker : options.parallel_evaluators) worker->set_strict(true);
    records.emit("acceptance_strict", {{"age", age()}, {"strict_after", options.strict_after}, {"step", counters.step}});
}

CampaignDriver::CampaignDriver(store::CampaignStore& store, Evaluator& evaluator, std::vector<KernelSetup> kernels,
                               CampaignOptions options, std::optional<knowledge::HardwareModel> model,
                               search::RuleCheck rule_check, RoleFactory roles)
    : m_impl(std::make_unique<Impl>(store, evaluator, std::move(options))) {
    m_impl->rule_check = std::move(rule_check);
    const RoleFactory role_factory =
        roles ? std::move(roles) : RoleFactory([](const std::string&) { return search::make_heuristic_roles(); });
    for (auto& setup : kernels) {
        const std::string name = setup.spec.name;
        search::CostModel cost_model = model ? search::CostModel(*model) : search::CostModel();
        for (const auto& tmpl : setup.templates) {  // a template's own cost terms (`terms:`)
            if (tmpl->is_baseline()) continue;
            try {
                cost_model.add_family_terms(tmpl->family(), tmpl->spec().terms);
            } catch (const Error& error) {  // recorded like a broken template; the target's terms rank it
                setup.template_errors.push_back(error.what());
            }
        }
        m_impl->kernels.push_back(std::make_unique<KernelRuntime>(std::move(setup), role_factory(name), std::move(cost_model)));
        m_impl->kernels.back()->search.set_token_price(m_impl->options.device_secs_per_1k_tokens);
    }
}

CampaignDriver::~CampaignDriver() = default;

CampaignResult CampaignDriver::run() {
    std::optional<CampaignLock> lock;
    if (m_impl->options.take_lock) lock.emplace(CampaignLock::acquire(m_impl->options.dir));
    return m_impl->run_loop();
}

}  // namespace npuopt::campaign
