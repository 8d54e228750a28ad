#pragma once
// What evaluation needs from a target, as interfaces (after TVM MetaSchedule's Builder and
// Runner): results are plain values with failures as data, never exceptions. `Toolchain`
// implements all of them over a target.yaml; tests use in-memory fakes (tests/support/).
//
//   source ─► Builder::build ─► diagnostics / ok ─► Runner::run(seed) ─► cycles, verify, errors
//                 Estimator::estimate ─► static cycles (or diagnostics, or unsupported)

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "target/results.hpp"

namespace npuopt::target {

/// Source file → checked artifact or diagnostics (the toolchain's `check`), for one kernel at one
/// shape: legality that depends on sizes (a buffer's bytes, a tile's rows) is checked at the shape
/// the design will run at.
class Builder {
public:
    virtual ~Builder() = default;
    virtual CheckResult build(const std::filesystem::path& file, const std::string& kernel,
                              const std::map<std::string, std::int64_t>& shape) const = 0;
};

/// One device launch of a built source with a seed; every failure is in the result.
class Runner {
public:
    virtual ~Runner() = default;
    virtual RunResult run(const RunRequest& request) const = 0;
};

/// A static estimate of a design's cycles (the toolchain's `schedule`), without the device.
class Estimator {
public:
    virtual ~Estimator() = default;
    virtual ScheduleResult estimate(const std::filesystem::path& file, const std::string& kernel,
                                    const std::map<std::string, std::int64_t>& shape) const = 0;
};

/// A target's builder, runner and estimator together, with its identity.
class Device : public Builder, public Runner, public Estimator {
public:
    /// The toolchain's name and version as it reports them.
    virtual VersionResult version() const = 0;
    /// The target's name (a directory under knowledge/).
    virtual const std::string& target_name() const = 0;
    /// What identifies the installed toolchain without running it (resolved path, size,
    /// modification time): when it changes, the version is asked again. "" when the toolchain
    /// cannot be found; a device that cannot tell returns a constant.
    virtual std::string identity() const { return "unknown"; }
};

}  // namespace npuopt::target
