#pragma once
// What a campaign keeps in its store besides the evaluations: the counters, the run state, each
// kernel's state and scheduler statistics, the events (store + events.jsonl), the designs and
// their source files; and the replay of all of it when a campaign resumes. The driver decides,
// this writes and reads.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "campaign/kernel_runtime.hpp"
#include "core/log.hpp"
#include "eval/evaluation.hpp"
#include "store/campaign_store.hpp"
#include "store/tree_store.hpp"

namespace npuopt::campaign {

/// The campaign's running totals (tree_state "counters"), across resumed runs.
struct Counters {
    std::int64_t step = 0;
    std::int64_t device_runs = 0;
    double device_secs = 0.0;
    std::int64_t screen_calls = 0;   ///< static-schedule calls of the search's screen (cache misses)
    double screen_secs = 0.0;        ///< their wall time
    double wall_secs_before = 0.0;   ///< wall time of earlier runs
    std::chrono::steady_clock::time_point run_start = std::chrono::steady_clock::now();
    std::int64_t steps_this_run = 0;
    std::int64_t device_runs_this_run = 0;

    double wall_used() const;
    /// Share of the budget used, 0..1: the larger of the wall-time and device-run shares.
    double age(double wall_budget_secs, std::int64_t device_run_budget) const;
};

/// The campaign's records in its store.
class CampaignRecords {
public:
    CampaignRecords(store::CampaignStore& store, std::filesystem::path dir, std::string target);

    store::CampaignStore& store() { return *m_store; }
    store::TreeStore trees() { return store::TreeStore(m_store->database()); }

    /// A run starts: its start time for the run state, and events.jsonl beside the database
    /// opened (best effort: events also go to the store).
    void begin_run();
    /// An event, in the store and in events.jsonl.
    void emit(const std::string& kind, const nlohmann::json& payload);
    /// Also hand every event to `listener` (`run --message-format json`); empty: none.
    void set_listener(std::function<void(const std::string&, const nlohmann::json&)> listener) {
        m_listener = std::move(listener);
    }

    /// Read the counters of earlier runs (the device runs counted as launches happened included).
    Counters load_counters();
    void save_counters(const Counters& counters);
    /// tree_state "run": running | stopped | finished, with the pid and a heartbeat.
    void set_run_state(const std::string& state, const std::string& stop_reason = "");

    void save_kernel(const KernelRuntime& kernel);
    /// A kernel's state, scheduler statistics, the designs it tried (replayed into its search) and
    /// its champion, from the store.
    void restore_kernel(KernelRuntime& kernel);
    /// Make the champion link `link` the kernel's champion. Error(store) when its design is gone.
    /// Mark the kernel's designs whose every evaluation is stale (older toolchains) as such in
    /// its search: what a re-opened move may measure again.
    void mark_stale_designs(KernelRuntime& kernel);
    void load_champion(KernelRuntime& kernel, const store::ChampionRecord& link);
    /// A stored design, re-instantiated from its template when it still gives the same hash,
    /// else read back from its stored source; nullopt when neither works.
    std::optional<search::Design> design_from_record(const KernelRuntime& kernel, const store::DesignRecord& record);

    /// Store a design (its parent: the champion it came from) and return its id.
    std::int64_t record_design(const search::Design& design, std::optional<std::int64_t> parent);
    /// The design's source under <dir>/designs/, written once (atomically).
    std::filesystem::path source_file(const search::Design& design);
    /// The design as the cascade sees it.
    eval::Candidate candidate_of(const search::Design& design, std::int64_t design_id, std::optional<double> predicted);

private:
    store::CampaignStore* m_store;
    std::filesystem::path m_dir;
    std::string m_target;
    std::string m_started_at = log::utc_timestamp();
    std::unique_ptr<log::EventLog> m_event_log;
    std::function<void(const std::string&, const nlohmann::json&)> m_listener;
};

}  // namespace npuopt::campaign
