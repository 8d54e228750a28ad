#pragma once
// The device launches of one stage, failed ones included, as the store's measurement rows; and
// the words the cascade uses for a failed call. A launch is asked of a `LaunchGate` first, which
// counts it against the device-run allowance.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "store/campaign_store.hpp"
#include "target/device.hpp"

namespace npuopt::eval {

/// Asked before every device launch (retries included): false when the allowance is spent.
using LaunchGate = std::function<bool()>;

/// The launches of one stage.
class LaunchLog {
public:
    /// Run `request` on `runner`, retrying while it fails transiently (at most `max_retries`
    /// times); every attempt is logged. A closed `gate` ends the call with status not_started
    /// and budget_stopped() set. `side` names the design that ran in the rows (a stage that also
    /// launches the champion logs those launches as "champion").
    target::RunResult run(const target::Runner& runner, const target::RunRequest& request, int max_retries,
                          double& device_secs, const LaunchGate& gate, std::string_view side = "candidate");

    std::int64_t launches() const { return m_launches; }
    std::int64_t failed() const { return m_failed; }
    std::int64_t retries() const { return m_retries; }
    std::int64_t transient_failures() const { return m_transient; }
    bool budget_stopped() const { return m_budget_stopped; }
    const std::vector<store::MeasurementRecord>& rows() const { return m_rows; }

private:
    void add(const target::RunResult& result, std::uint64_t seed, int attempt, std::string_view side);

    std::vector<store::MeasurementRecord> m_rows;
    std::int64_t m_launches = 0;
    std::int64_t m_failed = 0;
    std::int64_t m_retries = 0;
    std::int64_t m_transient = 0;
    bool m_budget_stopped = false;
};

/// The first error diagnostic as "CODE message (file:line)", "" when there is none.
std::string first_error(const std::vector<target::Diagnostic>& diagnostics);
/// "; N transient failure(s) retried", "" for none.
std::string transient_note(std::int64_t transient_failures);
/// Why a call failed, in words ("hang: …" for a timeout), with its first error diagnostic.
std::string call_failure(const target::CallInfo& call, const std::vector<target::Diagnostic>& diagnostics);
std::string run_failure(const target::RunResult& result);

}  // namespace npuopt::eval
