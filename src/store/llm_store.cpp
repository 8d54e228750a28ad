#include "store/llm_store.hpp"

#include <zlib.h>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/log.hpp"

namespace npuopt::store {

namespace {

constexpr std::string_view k_call_columns =
    "id, kernel, role, purpose, strategy, model, step, status, message, prompt_z, reply_z, prompt_hash, reply_hash, "
    "choices, context, prompt_tokens, completion_tokens, tokens_reported, cost, n, attempts, http_status, wall_secs, "
    "created_at";

LlmCallRecord call_from_row(const Row& row) {
    RowReader read(row);
    LlmCallRecord record;
    record.id = read.integer();
    record.kernel = read.text();
    record.role = read.text();
    record.purpose = read.text();
    record.strategy = read.text();
    record.model = read.text();
    record.step = read.integer();
    record.status = read.text();
    record.message = read.text();
    record.prompt = decompress_text(read.text());
    const auto reply = read.optional_text();
    record.reply = reply ? decompress_text(*reply) : std::string();
    record.prompt_hash = read.text();
    record.reply_hash = read.text();
    record.choices_json = read.text();
    record.context_json = read.text();
    record.prompt_tokens = read.integer();
    record.completion_tokens = read.integer();
    record.tokens_reported = read.flag();
    record.cost = read.real();
    record.n = read.integer();
    record.attempts = read.integer();
    record.http_status = read.optional_integer();
    record.wall_secs = read.real();
    record.created_at = read.text();
    read.finish();
    return record;
}

}  // namespace

// Layout: the uncompressed size as 8 little-endian bytes, then the zlib stream.
std::string compress_text(const std::string& text) {
    uLongf bound = compressBound(static_cast<uLong>(text.size()));
    std::string out(8 + bound, '\0');
    const std::uint64_t size = text.size();
    for (int byte = 0; byte < 8; ++byte) out[static_cast<std::size_t>(byte)] = static_cast<char>((size >> (8 * byte)) & 0xff);
    const int rc = compress2(reinterpret_cast<Bytef*>(out.data() + 8), &bound,
                             reinterpret_cast<const Bytef*>(text.data()), static_cast<uLong>(text.size()), 6);
    if (rc != Z_OK) throw Error(ErrorKind::store, fmt::format("cannot compress {} bytes of LLM audit text (zlib {})", size, rc));
    out.resize(8 + bound);
    return out;
}

std::string decompress_text(const std::string& bytes) {
    if (bytes.size() < 8) throw Error(ErrorKind::store, "a compressed LLM audit text is damaged (shorter than its header)");
    std::uint64_t size = 0;
    for (int byte = 0; byte < 8; ++byte) {
        size |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[static_cast<std::size_t>(byte)])) << (8 * byte);
    }
    if (size > (std::uint64_t{1} << 32)) throw Error(ErrorKind::store, "a compressed LLM audit text is damaged (size)");
    std::string out(size, '\0');
    uLongf out_size = static_cast<uLongf>(size);
    const int rc = uncompress(reinterpret_cast<Bytef*>(out.data()), &out_size,
                              reinterpret_cast<const Bytef*>(bytes.data() + 8), static_cast<uLong>(bytes.size() - 8));
    if (rc != Z_OK || out_size != size) {
        throw Error(ErrorKind::store, fmt::format("a compressed LLM audit text is damaged (zlib {})", rc));
    }
    return out;
}

std::int64_t LlmStore::record_call(const LlmCallRecord& record) {
    const std::string prompt_hash = record.prompt_hash.empty() ? content_hash(record.prompt) : record.prompt_hash;
    const std::string reply_hash =
        record.reply_hash.empty() && !record.reply.empty() ? content_hash(record.reply) : record.reply_hash;
    m_database->execute(
        "INSERT INTO llm_calls (kernel, role, purpose, strategy, model, step, status, message, prompt_z, reply_z, "
        "prompt_hash, reply_hash, choices, context, prompt_tokens, completion_tokens, tokens_reported, cost, n, "
        "attempts, http_status, wall_secs, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, CAST(? AS BLOB), "
        "CAST(? AS BLOB), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        {record.kernel, record.role, record.purpose, record.strategy, record.model, record.step, record.status,
         record.message, compress_text(record.prompt),
         record.reply.empty() ? Value(nullptr) : Value(compress_text(record.reply)), prompt_hash, reply_hash,
         record.choices_json, record.context_json, record.prompt_tokens, record.completion_tokens,
         std::int64_t{record.tokens_reported ? 1 : 0}, record.cost, record.n, record.attempts,
         optional_value(record.http_status), record.wall_secs,
         record.created_at.empty() ? log::utc_timestamp() : record.created_at});
    return m_database->last_insert_id();
}

void LlmStore::set_choices(std::int64_t id, const std::string& choices_json) {
    m_database->execute("UPDATE llm_calls SET choices = ? WHERE id = ?", {choices_json, id});
}

std::optional<LlmCallRecord> LlmStore::find_call(std::int64_t id) {
    auto rows = m_database->query(fmt::format("SELECT {} FROM llm_calls WHERE id = ?", k_call_columns), {id});
    if (rows.empty()) return std::nullopt;
    return call_from_row(rows.front());
}

std::vector<LlmCallRecord> LlmStore::list_calls(const std::string& kernel) {
    std::vector<LlmCallRecord> calls;
    auto rows = kernel.empty()
                    ? m_database->query(fmt::format("SELECT {} FROM llm_calls ORDER BY id", k_call_columns))
                    : m_database->query(fmt::format("SELECT {} FROM llm_calls WHERE kernel = ? ORDER BY id", k_call_columns),
                                        {kernel});
    for (const auto& row : rows) calls.push_back(call_from_row(row));
    return calls;
}

std::vector<LlmRoleTotals> LlmStore::totals_by_role() {
    std::vector<LlmRoleTotals> totals;
    for (const auto& row : m_database->query(
             "SELECT role, count(*), sum(status = 'ok'), sum(prompt_tokens), sum(completion_tokens), sum(cost) "
             "FROM llm_calls GROUP BY role ORDER BY role")) {
        RowReader read(row);
        LlmRoleTotals role;
        role.role = read.text();
        role.calls = read.integer();
        role.ok_calls = read.integer();
        role.prompt_tokens = read.integer();
        role.completion_tokens = read.integer();
        role.cost = read.real();
        read.finish();
        totals.push_back(role);
    }
    return totals;
}

std::int64_t LlmStore::total_tokens() {
    auto rows = m_database->query("SELECT coalesce(sum(prompt_tokens + completion_tokens), 0) FROM llm_calls");
    return rows.empty() ? 0 : as_int(rows.front()[0]);
}

}  // namespace npuopt::store
