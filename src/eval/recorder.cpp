#include "eval/recorder.hpp"

namespace npuopt::eval {

void copy_stage_record(const StageRecord& record, store::EvaluationRecord& row) {
    row.stage = stage_name(record.stage);
    row.verdict = std::string(verdict_name(record.verdict));
    row.reason = record.reason;
    row.secs = record.secs;
    row.launches = record.device_runs;
    row.failed_launches = record.failed_launches;
    row.retries = record.retries;
}

void StoreRecorder::set_row_tags(std::optional<std::int64_t> toolchain_version_id, std::string bench_config_hash) {
    m_toolchain_version_id = toolchain_version_id;
    m_bench_config_hash = std::move(bench_config_hash);
}

store::EvaluationRecord StoreRecorder::row_of(const Candidate& candidate, const StageRecord& record) const {
    store::EvaluationRecord row;
    row.design_id = candidate.design_id;
    row.toolchain_version_id = m_toolchain_version_id;
    row.bench_config_hash = m_bench_config_hash;
    copy_stage_record(record, row);
    return row;
}

void StoreRecorder::stage(const Candidate& candidate, const KernelContext& /*kernel*/, const StageRecord& record,
                          std::vector<store::MeasurementRecord> launches) {
    if (candidate.design_id <= 0) return;  // an unrecorded design (a fixture, a bench probe) leaves no rows
    m_stages.push_back({row_of(candidate, record), std::move(launches)});
}

void StoreRecorder::row(store::EvaluationRecord row, std::vector<store::MeasurementRecord> launches) {
    m_stages.push_back({std::move(row), std::move(launches)});
}

std::optional<std::int64_t> StoreRecorder::open_journal(const Candidate& candidate, StageKind stage,
                                                        const KernelContext& /*kernel*/, const std::string& reason) {
    if (candidate.design_id <= 0) return std::nullopt;
    StageRecord running;
    running.stage = stage;
    running.verdict = Verdict::running;
    running.reason = reason;
    return m_store->record_evaluation(row_of(candidate, running));
}

void StoreRecorder::append_launch(std::int64_t journal, const store::MeasurementRecord& launch) {
    m_store->append_measurement(journal, launch);
}

void StoreRecorder::close_journal(std::int64_t journal, const StageRecord& record) {
    store::EvaluationRecord row;
    copy_stage_record(record, row);
    m_closed.emplace_back(journal, row);
}

void StoreRecorder::knowledge(std::function<void()> update) { m_updates.push_back(std::move(update)); }

void StoreRecorder::commit(const std::function<void()>& step_writes) {
    auto transaction = m_store->database().transaction();
    for (const auto& update : m_updates) update();
    for (const auto& pending : m_stages) m_store->record_evaluation(pending.row, pending.launches);
    for (const auto& [journal, row] : m_closed) m_store->complete_evaluation(journal, row);
    if (step_writes) step_writes();
    transaction.commit();
    discard();
}

void StoreRecorder::discard() {
    m_stages.clear();
    m_closed.clear();
    m_updates.clear();
}

}  // namespace npuopt::eval
