#include "store/tree_store.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/log.hpp"

namespace npuopt::store {

namespace {

constexpr std::string_view k_edge_columns =
    "id, kernel, design_id, parent_design_id, role, move, reason, step, verdict, last_stage, final_reason, cycles, "
    "predicted_cycles, speedup, device_runs, device_secs, quantities, created_at, llm_call_id, prompt_hash, reply_hash, "
    "llm_tokens";

TreeEdgeRecord edge_from_row(const Row& row) {
    TreeEdgeRecord edge;
    edge.id = as_int(row[0]);
    edge.kernel = as_text(row[1]);
    edge.design_id = as_int(row[2]);
    edge.parent_design_id = as_optional_int(row[3]);
    edge.role = as_text(row[4]);
    edge.move = as_text(row[5]);
    edge.reason = as_text(row[6]);
    edge.step = as_int(row[7]);
    edge.verdict = as_text(row[8]);
    edge.last_stage = as_text(row[9]);
    edge.final_reason = as_text(row[10]);
    edge.cycles = as_optional_double(row[11]);
    edge.predicted_cycles = as_optional_double(row[12]);
    edge.speedup = as_optional_double(row[13]);
    edge.device_runs = as_int(row[14]);
    edge.device_secs = as_double(row[15]);
    edge.quantities_json = as_text(row[16]);
    edge.created_at = as_text(row[17]);
    edge.llm_call_id = as_optional_int(row[18]);
    edge.prompt_hash = as_text(row[19]);
    edge.reply_hash = as_text(row[20]);
    edge.llm_tokens = as_int(row[21]);
    return edge;
}

constexpr std::string_view k_champion_columns = "id, kernel, design_id, step, cycles, reason, active, ended_reason, created_at";

ChampionRecord champion_from_row(const Row& row) {
    ChampionRecord champion;
    champion.id = as_int(row[0]);
    champion.kernel = as_text(row[1]);
    champion.design_id = as_int(row[2]);
    champion.step = as_int(row[3]);
    champion.cycles = as_double(row[4]);
    champion.reason = as_text(row[5]);
    champion.active = as_int(row[6]) != 0;
    champion.ended_reason = as_text(row[7]);
    champion.created_at = as_text(row[8]);
    return champion;
}

}  // namespace

std::int64_t TreeStore::record_edge(const TreeEdgeRecord& edge) {
    if (find_edge(edge.kernel, edge.design_id)) {
        throw Error(ErrorKind::store, fmt::format("design {} already has an edge in the tree of kernel {}",
                                                  edge.design_id, edge.kernel));
    }
    m_database->execute(
        "INSERT INTO tree_edges (kernel, design_id, parent_design_id, role, move, reason, step, verdict, last_stage, "
        "final_reason, cycles, predicted_cycles, speedup, device_runs, device_secs, quantities, created_at, llm_call_id, "
        "prompt_hash, reply_hash, llm_tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        {edge.kernel, edge.design_id, optional_value(edge.parent_design_id), edge.role, edge.move, edge.reason,
         edge.step, edge.verdict, edge.last_stage, edge.final_reason, optional_value(edge.cycles),
         optional_value(edge.predicted_cycles), optional_value(edge.speedup), edge.device_runs, edge.device_secs,
         edge.quantities_json, edge.created_at.empty() ? log::utc_timestamp() : edge.created_at,
         optional_value(edge.llm_call_id), edge.prompt_hash, edge.reply_hash, edge.llm_tokens});
    return m_database->last_insert_id();
}

bool TreeStore::remove_edge(const std::string& kernel, std::int64_t design_id) {
    return m_database->execute("DELETE FROM tree_edges WHERE kernel = ? AND design_id = ?", {kernel, design_id}) > 0;
}

std::optional<TreeEdgeRecord> TreeStore::find_edge(const std::string& kernel, std::int64_t design_id) {
    auto rows = m_database->query(
        fmt::format("SELECT {} FROM tree_edges WHERE kernel = ? AND design_id = ?", k_edge_columns), {kernel, design_id});
    if (rows.empty()) return std::nullopt;
    return edge_from_row(rows[0]);
}

std::vector<TreeEdgeRecord> TreeStore::list_edges(const std::string& kernel) {
    std::vector<TreeEdgeRecord> edges;
    for (const auto& row : m_database->query(
             fmt::format("SELECT {} FROM tree_edges WHERE kernel = ? ORDER BY step, id", k_edge_columns), {kernel})) {
        edges.push_back(edge_from_row(row));
    }
    return edges;
}

std::vector<std::string> TreeStore::list_kernels() {
    std::vector<std::string> kernels;
    for (const auto& row : m_database->query("SELECT DISTINCT kernel FROM tree_edges ORDER BY kernel")) {
        kernels.push_back(as_text(row[0]));
    }
    return kernels;
}

bool TreeStore::has_edge_for_hash(const std::string& kernel, const std::string& content_hash) {
    auto rows = m_database->query(
        "SELECT 1 FROM tree_edges JOIN designs ON designs.id = tree_edges.design_id "
        "WHERE tree_edges.kernel = ? AND designs.content_hash = ? LIMIT 1",
        {kernel, content_hash});
    return !rows.empty();
}

std::int64_t TreeStore::push_champion(const ChampionRecord& champion) {
    m_database->execute(
        "INSERT INTO champion_path (kernel, design_id, step, cycles, reason, active, ended_reason, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        {champion.kernel, champion.design_id, champion.step, champion.cycles, champion.reason,
         std::int64_t{champion.active ? 1 : 0}, champion.ended_reason,
         champion.created_at.empty() ? log::utc_timestamp() : champion.created_at});
    return m_database->last_insert_id();
}

void TreeStore::end_champion(std::int64_t champion_id, const std::string& reason) {
    m_database->execute("UPDATE champion_path SET active = 0, ended_reason = ? WHERE id = ?", {reason, champion_id});
}

std::vector<ChampionRecord> TreeStore::champion_path(const std::string& kernel, bool include_inactive) {
    std::vector<ChampionRecord> path;
    for (const auto& row : m_database->query(
             fmt::format("SELECT {} FROM champion_path WHERE kernel = ? {} ORDER BY id", k_champion_columns,
                         include_inactive ? "" : "AND active = 1"),
             {kernel})) {
        path.push_back(champion_from_row(row));
    }
    return path;
}

std::optional<ChampionRecord> TreeStore::current_champion(const std::string& kernel) {
    auto rows = m_database->query(
        fmt::format("SELECT {} FROM champion_path WHERE kernel = ? AND active = 1 ORDER BY id DESC LIMIT 1",
                    k_champion_columns),
        {kernel});
    if (rows.empty()) return std::nullopt;
    return champion_from_row(rows[0]);
}

void TreeStore::save_role_stats(const RoleStatsRecord& stats) {
    m_database->execute(
        "INSERT INTO role_stats (kernel, role, pulls, accepts, empty, reward, device_secs, rate_sum, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (kernel, role) DO UPDATE SET pulls = excluded.pulls, "
        "accepts = excluded.accepts, empty = excluded.empty, reward = excluded.reward, "
        "device_secs = excluded.device_secs, rate_sum = excluded.rate_sum, updated_at = excluded.updated_at",
        {stats.kernel, stats.role, stats.pulls, stats.accepts, stats.empty, stats.reward, stats.device_secs,
         stats.rate_sum, log::utc_timestamp()});
}

std::vector<RoleStatsRecord> TreeStore::list_role_stats(const std::string& kernel) {
    std::vector<RoleStatsRecord> result;
    for (const auto& row : m_database->query(
             "SELECT kernel, role, pulls, accepts, empty, reward, device_secs, rate_sum FROM role_stats "
             "WHERE kernel = ? ORDER BY role",
             {kernel})) {
        RoleStatsRecord stats;
        stats.kernel = as_text(row[0]);
        stats.role = as_text(row[1]);
        stats.pulls = as_int(row[2]);
        stats.accepts = as_int(row[3]);
        stats.empty = as_int(row[4]);
        stats.reward = as_double(row[5]);
        stats.device_secs = as_double(row[6]);
        stats.rate_sum = as_double(row[7]);
        result.push_back(stats);
    }
    return result;
}

void TreeStore::set_state(const std::string& key, const std::string& value) {
    m_database->execute(
        "INSERT INTO campaign_state (key, value, updated_at) VALUES (?, ?, ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        {key, value, log::utc_timestamp()});
}

std::optional<std::string> TreeStore::state(const std::string& key) {
    auto rows = m_database->query("SELECT value FROM campaign_state WHERE key = ?", {key});
    if (rows.empty()) return std::nullopt;
    return as_text(rows[0][0]);
}

std::map<std::string, std::string> TreeStore::all_state() {
    std::map<std::string, std::string> result;
    for (const auto& row : m_database->query("SELECT key, value FROM campaign_state")) {
        result[as_text(row[0])] = as_text(row[1]);
    }
    return result;
}

}  // namespace npuopt::store
