#pragma once
// The evaluation pipeline's parts (campaign.yaml `parallel:`): a pool of device slots, a device
// whose launches take a slot, and one evaluator per step in flight. The driver plans a round of
// steps, runs them on these evaluators at once and commits them in the order planned.
//
//   builder k: compile, rules, estimate ─► first launch: take a device slot ─► correctness,
//              screen, race (every launch on that slot) ─► step ends: slot back to the pool

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "campaign/evaluator.hpp"
#include "eval/cascade.hpp"
#include "target/device.hpp"

namespace npuopt::campaign {

/// `count` device slots shared by the builders: a step holds one from its first launch to its end.
/// Records how long slots were held, for the device utilisation a benchmark reports.
class DeviceSlots {
public:
    explicit DeviceSlots(int count);
    /// The index of a free slot, waiting until one is free.
    int acquire();
    void release(int slot);
    int count() const { return static_cast<int>(m_busy.size()); }
    /// Seconds slots were held, summed over slots, since construction.
    double held_secs() const;

private:
    mutable std::mutex m_mutex;
    std::condition_variable m_freed;
    std::vector<bool> m_busy;
    std::vector<std::chrono::steady_clock::time_point> m_since;
    double m_held_secs = 0.0;
};

/// A device whose launches run on one slot of a pool, taken at the first launch and kept until
/// release(): a step's launches (a race's interleaved pairs) stay on one device. The slot's index
/// is the `{device}` placeholder of the target's run command. Builds and estimates take no slot.
class SlottedDevice final : public target::Device {
public:
    SlottedDevice(const target::Device& inner, DeviceSlots& slots) : m_inner(&inner), m_slots(&slots) {}
    ~SlottedDevice() override { release(); }
    target::CheckResult build(const std::filesystem::path& file, const std::string& kernel,
                              const std::map<std::string, std::int64_t>& shape) const override {
        return m_inner->build(file, kernel, shape);
    }
    target::RunResult run(const target::RunRequest& request) const override;
    target::ScheduleResult estimate(const std::filesystem::path& file, const std::string& kernel,
                                    const std::map<std::string, std::int64_t>& shape) const override {
        return m_inner->estimate(file, kernel, shape);
    }
    target::VersionResult version() const override { return m_inner->version(); }
    const std::string& target_name() const override { return m_inner->target_name(); }
    std::string identity() const override { return m_inner->identity(); }
    /// The slot back to the pool (nothing when none is held).
    void release() const;

private:
    const target::Device* m_inner;
    DeviceSlots* m_slots;
    mutable std::optional<int> m_slot;  ///< one builder's, used from its thread only
};

/// One builder of the pipeline: its own cascade on a slotted device, sharing the campaign's store,
/// rule book and hardware model; its records wait for the driver's commit like the main one's.
class BuilderEvaluator final : public Evaluator {
public:
    BuilderEvaluator(const target::Device& device, DeviceSlots& slots, store::CampaignStore& store,
                     knowledge::RuleBook* rules, const knowledge::HardwareModel* model, eval::CascadeConfig config,
                     knowledge::SourceRules* source_rules);
    eval::Outcome evaluate(const eval::Candidate& candidate, const std::optional<eval::Champion>& champion,
                           const eval::KernelContext& kernel) override;
    eval::Outcome revalidate(const eval::Champion& champion, const eval::Champion& predecessor,
                             const eval::KernelContext& kernel) override;
    double speed_of_light_cycles(const eval::KernelContext& kernel) override { return m_inner->speed_of_light_cycles(kernel); }
    std::string toolchain_version(std::string* why = nullptr) override { return m_inner->toolchain_version(why); }
    std::string toolchain_name() override { return m_inner->toolchain_name(); }
    std::string toolchain_identity() override { return m_inner->toolchain_identity(); }
    void set_strict(bool strict) override { m_inner->set_strict(strict); }
    void set_device_run_allowance(std::optional<std::int64_t> allowance) override {
        m_inner->set_device_run_allowance(allowance);
    }
    void set_deadline(std::optional<std::chrono::steady_clock::time_point> deadline) override {
        m_inner->set_deadline(deadline);
    }
    void commit_step(const std::function<void()>& step_writes) override { m_inner->commit_step(step_writes); }
    eval::Cascade& cascade() { return *m_cascade; }

private:
    std::unique_ptr<SlottedDevice> m_device;
    std::unique_ptr<eval::Cascade> m_cascade;
    std::unique_ptr<CascadeEvaluator> m_inner;
};

/// The builders of a campaign run and the device slots they share (none when builders <= 1).
struct Pipeline {
    std::unique_ptr<DeviceSlots> slots;
    std::vector<std::unique_ptr<BuilderEvaluator>> builders;
    /// The builders as the driver takes them (CampaignOptions::parallel_evaluators).
    std::vector<Evaluator*> evaluators() const;
};

/// `builders` evaluators over `device` sharing `devices` slots, each cascade configured alike.
Pipeline make_pipeline(std::int64_t builders, std::int64_t devices, const target::Device& device,
                       store::CampaignStore& store, knowledge::RuleBook* rules, const knowledge::HardwareModel* model,
                       const eval::CascadeConfig& config, knowledge::SourceRules* source_rules);

}  // namespace npuopt::campaign
