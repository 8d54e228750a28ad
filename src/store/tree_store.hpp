#pragma once
// Design trees, champion paths, role statistics and the campaign's resumable state (tables of
// the tree migration step; SCHEMA.md). One tree per kernel per campaign: a node is a design
// (designs row + its evaluations), an edge says which role made it from which parent, with what
// move and why, and how its evaluation ended. Knows nothing about targets or roles' logic.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "store/database.hpp"

namespace npuopt::store {

/// How a design entered a kernel's tree and how its evaluation ended.
struct TreeEdgeRecord {
    std::int64_t id = 0;
    std::string kernel;
    std::int64_t design_id = 0;
    std::optional<std::int64_t> parent_design_id;  ///< the champion it was derived from (none: a root)
    std::string role;     ///< analyst | architect | tuner | baseline | …
    std::string move;
    std::string reason;
    std::int64_t step = 0;
    std::string verdict;  ///< accepted | rejected | failed | inconclusive | skipped
    std::string last_stage;
    std::string final_reason;
    std::optional<double> cycles;            ///< the candidate's median, when measured
    std::optional<double> predicted_cycles;
    std::optional<double> speedup;           ///< over the champion it raced
    std::int64_t device_runs = 0;
    double device_secs = 0.0;
    std::string quantities_json = "{}";
    std::string created_at;
    // written by an LLM: the call (llm_calls) and the hashes of its prompt and reply, its tokens
    std::optional<std::int64_t> llm_call_id;
    std::string prompt_hash;
    std::string reply_hash;
    std::int64_t llm_tokens = 0;
};

/// One link of a kernel's champion path.
struct ChampionRecord {
    std::int64_t id = 0;
    std::string kernel;
    std::int64_t design_id = 0;
    std::int64_t step = 0;
    double cycles = 0.0;
    std::string reason;
    bool active = true;    ///< false once dethroned (failed re-validation, toolchain change)
    std::string ended_reason;
    std::string created_at;
};

/// The scheduler's numbers for one role on one kernel.
struct RoleStatsRecord {
    std::string kernel;
    std::string role;
    std::int64_t pulls = 0;
    std::int64_t accepts = 0;
    std::int64_t empty = 0;
    double reward = 0.0;
    double device_secs = 0.0;
    double rate_sum = 0.0;
};

/// Accessors; each write is atomic by itself and composes inside a caller's Transaction.
class TreeStore {
public:
    explicit TreeStore(Database& database) : m_database(&database) {}

    /// Insert the edge of (kernel, design); Error(store) when the design already has one there.
    std::int64_t record_edge(const TreeEdgeRecord& edge);
    /// Remove the edge of (kernel, design) (an environment error being retried); false when none.
    bool remove_edge(const std::string& kernel, std::int64_t design_id);
    std::optional<TreeEdgeRecord> find_edge(const std::string& kernel, std::int64_t design_id);
    /// Edges of `kernel` in step order.
    std::vector<TreeEdgeRecord> list_edges(const std::string& kernel);
    /// Kernels that have a tree, sorted.
    std::vector<std::string> list_kernels();
    /// Whether the design with `content_hash` has an edge in `kernel`'s tree (it was evaluated).
    bool has_edge_for_hash(const std::string& kernel, const std::string& content_hash);

    std::int64_t push_champion(const ChampionRecord& champion);
    /// Mark a champion-path link inactive with the reason.
    void end_champion(std::int64_t champion_id, const std::string& reason);
    /// The champion path of `kernel`, oldest first (inactive links included when asked).
    std::vector<ChampionRecord> champion_path(const std::string& kernel, bool include_inactive = false);
    std::optional<ChampionRecord> current_champion(const std::string& kernel);

    void save_role_stats(const RoleStatsRecord& stats);
    std::vector<RoleStatsRecord> list_role_stats(const std::string& kernel);

    /// Campaign state for resume (key → text, e.g. JSON).
    void set_state(const std::string& key, const std::string& value);
    std::optional<std::string> state(const std::string& key);
    std::map<std::string, std::string> all_state();

private:
    Database* m_database;
};

}  // namespace npuopt::store
