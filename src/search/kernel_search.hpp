#pragma once
// The search of one kernel: its roles, the role scheduler and the cost model, behind one
// lifecycle (start → next_proposal → notify → finish). Learning happens in notify(): the cost
// model is updated from what was measured, the scheduler paid for the step, every role told.
// The driver (campaign/) only asks for a proposal and reports how the step ended.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "search/cost_model.hpp"
#include "search/roles.hpp"
#include "search/scheduler.hpp"
#include "search/screen.hpp"

namespace npuopt::search {

/// What the driver knows of the kernel when it asks for a proposal.
struct ProposalRequest {
    std::vector<std::shared_ptr<Template>> templates;
    std::optional<Design> champion;
    double champion_cycles = 0.0;
    double speed_of_light_cycles = 0.0;
    RuleCheck rule_check;
    double age = 0.0;
    std::uint64_t seed = 0;   ///< this step's seed, from the campaign seed
    /// A seed per scheduler attempt (attempt 0, 1, …), so that the order stays reproducible.
    std::function<std::uint64_t(std::size_t attempt)> pick_seed;
    /// Cost terms re-opened after a toolchain update (SearchContext::reopened_terms): the
    /// analyst is asked first while there are any.
    std::vector<std::string> reopened_terms;
    /// The static-schedule screen (search.schedule_screen): the first `screen_width` template
    /// proposals of the role asked are estimated by `screen` and the best combined estimate goes
    /// first. 0 or 1, or no `screen`: the cost model's order stands.
    ScreenFn screen;
    std::size_t screen_width = 0;
    /// Whether this step may screen at all (search.screen_share: the screen's wall time so far
    /// is under its share of the device time). Closed: the step proposes as without a screen,
    /// with no wide window. Empty: always open. Within a step, `screen` itself answers
    /// `unasked` once the share is spent, and the rest of the window keeps the model's word.
    std::function<bool()> screen_open;
};

/// The search of one kernel.
class KernelSearch {
public:
    KernelSearch(std::string kernel, std::vector<std::unique_ptr<Role>> roles, CostModel cost_model);
    /// With any cost model behind the interface (a test's fake, another target's model).
    KernelSearch(std::string kernel, std::vector<std::unique_ptr<Role>> roles, std::unique_ptr<CyclePredictor> cost_model);

    /// Before the first proposal of a run: every role's start().
    void start();
    /// The next design to evaluate, or nullopt when no role has a new one (the kernel is
    /// exhausted). A role that has nothing is recorded as empty and the next one asked.
    std::optional<Proposal> next_proposal(const ProposalRequest& request);
    /// Learn from a finished step: design known, family counts, cost model, scheduler, roles.
    void notify(const StepFeedback& feedback);
    /// Replay a step recorded in an earlier run (resume): what notify() learns, except the
    /// scheduler, whose state is restored from its own rows.
    void replay(const std::string& content_hash, const std::string& family,
                const std::map<std::string, double>& quantities, const std::map<std::string, double>& params,
                std::optional<double> cycles, eval::StepVerdict verdict);
    /// When the run ends: every role's finish().
    void finish();

    /// Mark a design as evaluated (or in flight) without learning from it.
    void mark_known(const std::string& content_hash) { m_known_hashes.insert(content_hash); }
    bool is_known(const std::string& content_hash) const { return m_known_hashes.count(content_hash) > 0; }
    /// A known design whose every evaluation is stale (an older toolchain): still known to the
    /// roles, but the analyst's re-opened moves may measure it again under the new version.
    void mark_stale(const std::string& content_hash) {
        if (is_known(content_hash)) m_stale_hashes.insert(content_hash);
    }
    bool is_known_now(const std::string& content_hash) const {
        return is_known(content_hash) && m_stale_hashes.count(content_hash) == 0;
    }

    Scheduler& scheduler() { return m_scheduler; }
    const Scheduler& scheduler() const { return m_scheduler; }
    CyclePredictor& cost_model() { return *m_cost_model; }
    const CyclePredictor& cost_model() const { return *m_cost_model; }
    const std::vector<std::unique_ptr<Role>>& roles() const { return m_roles; }
    const ScheduleScreen& screen() const { return m_screen; }
    /// Designs tried so far (this run and replayed).
    std::int64_t designs() const { return m_designs; }
    /// The price of LLM tokens in the scheduler's currency, device-seconds per 1000 tokens
    /// (llm.device_secs_per_1k_tokens): a role is paid per device-second and per token.
    void set_token_price(double device_secs_per_1k_tokens) { m_token_price = device_secs_per_1k_tokens; }
    /// The bandit's reward for a step: the share of the remaining log-distance to the bound it closed.
    static double reward(const StepFeedback& feedback);
    /// Measured steps in a row, without a new champion, after which a parametrised family that
    /// has no measurement yet is entered before the scheduler's pick.
    static constexpr std::int64_t k_family_patience = 3;
    /// How far the model's predicted gains have come true, by the number of parameters a move
    /// changes: the least-squares slope through the origin of measured log(cycles / champion's)
    /// on the model's log(predicted / champion's predicted), over this run's measured neighbour
    /// moves the model predicted faster, clamped to [0, 1]; none for a kind with fewer than k_trust_min_moves of them or
    /// whose predictions were all ties. A model that ranks pairs of ridge-learnt effects as 6 %
    /// gains that measure as none is believed accordingly: its predictions are shrunk towards the
    /// champion's and the moves it sees better rank first.
    std::map<int, double> prediction_trust() const;
    static constexpr std::size_t k_trust_min_moves = 6;
    /// What the search has learnt of the model's word in this campaign (the measured neighbour
    /// moves behind prediction_trust), for the campaign to keep across a
    /// resume; restore_learnt_state takes it back, skipping entries it cannot read.
    nlohmann::json learnt_state() const;
    void restore_learnt_state(const nlohmann::json& state);

private:
    void count_family(const std::string& family, bool measured);
    /// The champion's family at its declared defaults, once every parametrised family has a
    /// measurement, where the champion departs from them and they were never proposed.
    std::optional<Proposal> defaults_check(const SearchContext& context) const;

    std::string m_kernel;
    std::vector<std::unique_ptr<Role>> m_roles;
    Scheduler m_scheduler;
    std::unique_ptr<CyclePredictor> m_cost_model;  ///< never null
    std::set<std::string> m_known_hashes;
    std::set<std::string> m_stale_hashes;
    std::map<std::string, std::int64_t> m_family_designs;  ///< measured designs per family
    std::map<std::string, std::int64_t> m_family_failed;   ///< designs per family that ended without a measurement
    std::int64_t m_designs = 0;
    std::int64_t m_steps_since_gain = 0;  ///< measured steps since the champion last changed (this run)
    double m_token_price = 0.0;
    /// Measured neighbour moves of this run: (model's log gain, measured log gain) by how many
    /// parameters they changed.
    std::map<int, std::vector<std::pair<double, double>>> m_gain_records;
    ScheduleScreen m_screen;
};

}  // namespace npuopt::search
