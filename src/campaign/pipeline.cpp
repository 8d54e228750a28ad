#include "campaign/pipeline.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace npuopt::campaign {

DeviceSlots::DeviceSlots(int count)
    : m_busy(static_cast<std::size_t>(std::max(1, count)), false),
      m_since(static_cast<std::size_t>(std::max(1, count))) {}

int DeviceSlots::acquire() {
    std::unique_lock lock(m_mutex);
    while (true) {
        auto free = std::find(m_busy.begin(), m_busy.end(), false);
        if (free != m_busy.end()) {
            *free = true;
            const auto slot = static_cast<std::size_t>(free - m_busy.begin());
            m_since[slot] = std::chrono::steady_clock::now();
            return static_cast<int>(slot);
        }
        m_freed.wait(lock);
    }
}

void DeviceSlots::release(int slot) {
    {
        std::lock_guard lock(m_mutex);
        const auto idx = static_cast<std::size_t>(slot);
        if (idx >= m_busy.size() || !m_busy[idx]) return;
        m_busy[idx] = false;
        m_held_secs += std::chrono::duration<double>(std::chrono::steady_clock::now() - m_since[idx]).count();
    }
    m_freed.notify_one();
}

double DeviceSlots::held_secs() const {
    std::lock_guard lock(m_mutex);
    return m_held_secs;
}

target::RunResult SlottedDevice::run(const target::RunRequest& request) const {
    if (!m_slot) m_slot = m_slots->acquire();
    target::RunRequest on_slot = request;
    on_slot.extra.emplace("device", std::to_string(*m_slot));
    return m_inner->run(on_slot);
}

void SlottedDevice::release() const {
    if (!m_slot) return;
    m_slots->release(*m_slot);
    m_slot.reset();
}

BuilderEvaluator::BuilderEvaluator(const target::Device& device, DeviceSlots& slots, store::CampaignStore& store,
                                   knowledge::RuleBook* rules, const knowledge::HardwareModel* model,
                                   eval::CascadeConfig config, knowledge::SourceRules* source_rules)
    : m_device(std::make_unique<SlottedDevice>(device, slots)),
      m_cascade(std::make_unique<eval::Cascade>(*m_device, store, rules, model, std::move(config))) {
    if (source_rules) m_cascade->set_source_rules(source_rules);
    m_cascade->set_launch_hook([&store] { store.count_device_launch(); });
    m_inner = std::make_unique<CascadeEvaluator>(*m_cascade, *m_device);
}

namespace {
/// Gives the builder's device slot back when the step ends, however it ends.
struct SlotReturn {
    const SlottedDevice* device;
    ~SlotReturn() { device->release(); }
};
}  // namespace

eval::Outcome BuilderEvaluator::evaluate(const eval::Candidate& candidate, const std::optional<eval::Champion>& champion,
                                         const eval::KernelContext& kernel) {
    SlotReturn slot{m_device.get()};
    return m_inner->evaluate(candidate, champion, kernel);
}

eval::Outcome BuilderEvaluator::revalidate(const eval::Champion& champion, const eval::Champion& predecessor,
                                           const eval::KernelContext& kernel) {
    SlotReturn slot{m_device.get()};
    return m_inner->revalidate(champion, predecessor, kernel);
}

std::vector<Evaluator*> Pipeline::evaluators() const {
    std::vector<Evaluator*> out;
    for (const auto& builder : builders) out.push_back(builder.get());
    return out;
}

Pipeline make_pipeline(std::int64_t builders, std::int64_t devices, const target::Device& device,
                       store::CampaignStore& store, knowledge::RuleBook* rules, const knowledge::HardwareModel* model,
                       const eval::CascadeConfig& config, knowledge::SourceRules* source_rules) {
    Pipeline pipeline;
    if (builders <= 1) return pipeline;
    pipeline.slots = std::make_unique<DeviceSlots>(static_cast<int>(std::max<std::int64_t>(1, devices)));
    for (std::int64_t idx = 0; idx < builders; ++idx) {
        pipeline.builders.push_back(
            std::make_unique<BuilderEvaluator>(device, *pipeline.slots, store, rules, model, config, source_rules));
    }
    return pipeline;
}

}  // namespace npuopt::campaign
