#pragma once
// The recorder: the one way an evaluation reaches the store. A step's results — every stage row
// with its launches, and the knowledge base's updates (rules mined from diagnostics, demotions,
// runtime rules) — are kept until `commit`, which writes them, together with the caller's own
// writes for the step (its tree edge, champion, counters), in one transaction. A race, which can
// run for minutes, is the exception that keeps a journal: its rows exist from its first launch and
// every launch is appended as it completes, so a killed process loses no completed launch (its
// rows are marked interrupted on resume); its verdict still lands with the step's commit.
//
//   stage() ─┐
//   knowledge() ─┼─► kept ─► commit(step writes) ─► ONE transaction
//   close_journal() ─┘
//   open_journal() / append_launch() ─► written at once (the race's launches)

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "eval/evaluation.hpp"
#include "store/campaign_store.hpp"

namespace npuopt::eval {

/// Where an evaluation's results go (a store, or an in-memory log in tests).
class Recorder {
public:
    virtual ~Recorder() = default;
    /// A finished stage of `candidate` and its launches (kept until commit).
    virtual void stage(const Candidate& candidate, const KernelContext& kernel, const StageRecord& record,
                       std::vector<store::MeasurementRecord> launches) = 0;
    /// A stage whose launches are journalled as they happen: its row now, verdict `running`.
    /// nullopt for a design that is not recorded (design_id 0).
    virtual std::optional<std::int64_t> open_journal(const Candidate& candidate, StageKind stage,
                                                     const KernelContext& kernel, const std::string& reason) = 0;
    /// One launch of a journalled stage, written at once.
    virtual void append_launch(std::int64_t journal, const store::MeasurementRecord& launch) = 0;
    /// A journalled stage's final record (kept until commit).
    virtual void close_journal(std::int64_t journal, const StageRecord& record) = 0;
    /// A knowledge-base update (kept until commit, run inside its transaction).
    virtual void knowledge(std::function<void()> update) = 0;
    /// Write everything kept, then `step_writes`, in one transaction; forget what was kept.
    virtual void commit(const std::function<void()>& step_writes = {}) = 0;
    /// Forget what was kept without writing it (journalled launches stay written).
    virtual void discard() = 0;
};

/// The recorder over a campaign store: evaluations and measurements rows, one transaction per commit.
class StoreRecorder final : public Recorder {
public:
    /// `toolchain_version_id` and `bench_config_hash` tag every row (looked up by the cascade).
    explicit StoreRecorder(store::CampaignStore& store) : m_store(&store) {}

    void set_row_tags(std::optional<std::int64_t> toolchain_version_id, std::string bench_config_hash);

    void stage(const Candidate& candidate, const KernelContext& kernel, const StageRecord& record,
               std::vector<store::MeasurementRecord> launches) override;
    std::optional<std::int64_t> open_journal(const Candidate& candidate, StageKind stage, const KernelContext& kernel,
                                             const std::string& reason) override;
    void append_launch(std::int64_t journal, const store::MeasurementRecord& launch) override;
    void close_journal(std::int64_t journal, const StageRecord& record) override;
    void knowledge(std::function<void()> update) override;
    void commit(const std::function<void()>& step_writes = {}) override;
    void discard() override;

    /// A row that is no stage of the cascade (a submission's `measure`), kept until commit.
    void row(store::EvaluationRecord row, std::vector<store::MeasurementRecord> launches);

    /// Rows kept and not yet committed (stages and journal verdicts).
    std::size_t pending() const { return m_stages.size() + m_closed.size() + m_updates.size(); }

private:
    struct PendingStage { store::EvaluationRecord row; std::vector<store::MeasurementRecord> launches; };

    store::EvaluationRecord row_of(const Candidate& candidate, const StageRecord& record) const;

    store::CampaignStore* m_store;
    std::optional<std::int64_t> m_toolchain_version_id;
    std::string m_bench_config_hash;
    std::vector<PendingStage> m_stages;
    std::vector<std::pair<std::int64_t, store::EvaluationRecord>> m_closed;
    std::vector<std::function<void()>> m_updates;
};

/// A stage record's verdict, reason, time and launch counts into a store row.
void copy_stage_record(const StageRecord& record, store::EvaluationRecord& row);

}  // namespace npuopt::eval
