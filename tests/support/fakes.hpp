#pragma once
// In-memory fakes of the interfaces evaluation and search are written against (target/device.hpp,
// eval/recorder.hpp): no process, no file, no store. A FakeDevice answers from functions of the
// source file's name and the seed; a MemoryRecorder keeps what an evaluation records and what it
// committed, so a test can tell the two apart.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "eval/recorder.hpp"
#include "target/device.hpp"
#include "target/toolchain.hpp"

namespace npuopt::fakes {

/// A device in memory. By default every source builds, has no static estimate, and runs in
/// `cycles(file)` cycles with a correct, input-dependent output.
class FakeDevice final : public target::Device {
public:
    std::string name = "fake-device";
    std::function<target::CheckResult(const std::filesystem::path&)> on_build = [](const std::filesystem::path&) {
        target::CheckResult result;
        result.call.status = target::CallStatus::ok;
        result.ok = true;
        result.compile_secs = 0.01;
        return result;
    };
    std::function<double(const std::filesystem::path&)> cycles = [](const std::filesystem::path&) { return 1000.0; };
    /// A whole run result, when a test needs more than cycles (failures, wrong outputs).
    std::function<std::optional<target::RunResult>(const target::RunRequest&)> on_run;
    mutable std::vector<target::RunRequest> runs;  ///< every launch, in order
    mutable int builds = 0;

    mutable std::vector<std::string> build_shapes;  ///< each build's kernel and shape, "kernel k=v,…"

    target::CheckResult build(const std::filesystem::path& file, const std::string& kernel,
                              const std::map<std::string, std::int64_t>& shape) const override {
        ++builds;
        build_shapes.push_back(kernel + " " + target::format_shape(shape));
        return on_build(file);
    }

    target::RunResult run(const target::RunRequest& request) const override {
        runs.push_back(request);
        if (on_run) {
            if (auto result = on_run(request)) return *result;
        }
        target::RunResult result;
        result.call.status = target::CallStatus::ok;
        result.call.process.wall_secs = 0.001;
        result.cycles.assign(static_cast<std::size_t>(std::max(1, request.repeat)), cycles(request.file));
        if (request.check) {
            target::Verify verify;
            verify.passed = true;
            verify.elements = 64;
            target::OutputInfo output;
            output.name = "out";
            output.elements = 64;
            output.fingerprint = "fp-" + std::to_string(request.seed);  // changes with the inputs, reproduces
            output.mean_abs = 1.0;
            output.ref_mean_abs = 1.0;
            verify.outputs.push_back(output);
            result.verify = verify;
        }
        return result;
    }

    target::ScheduleResult estimate(const std::filesystem::path&, const std::string&,
                                    const std::map<std::string, std::int64_t>&) const override {
        target::ScheduleResult result;
        result.call.status = target::CallStatus::failed;
        result.call.message = "the fake device has no static schedule";
        return result;
    }

    target::VersionResult version() const override {
        target::VersionResult result;
        result.call.status = target::CallStatus::ok;
        result.name = name;
        result.version = "1.0.0";
        return result;
    }
    const std::string& target_name() const override { return name; }
};

/// A recorder in memory: what was recorded, and what of it was committed.
class MemoryRecorder final : public eval::Recorder {
public:
    struct Row { std::string content_hash; eval::StageRecord record; std::size_t launches = 0; };

    std::vector<Row> pending;
    std::vector<Row> committed;
    std::map<std::int64_t, std::vector<store::MeasurementRecord>> journals;  ///< written at once
    std::vector<std::function<void()>> updates;
    int knowledge_updates_run = 0;
    int commits = 0;

    void stage(const eval::Candidate& candidate, const eval::KernelContext&, const eval::StageRecord& record,
               std::vector<store::MeasurementRecord> launches) override {
        pending.push_back({candidate.content_hash, record, launches.size()});
    }
    std::optional<std::int64_t> open_journal(const eval::Candidate&, eval::StageKind, const eval::KernelContext&,
                                             const std::string&) override {
        const auto id = static_cast<std::int64_t>(journals.size() + 1);
        journals[id];
        return id;
    }
    void append_launch(std::int64_t journal, const store::MeasurementRecord& launch) override {
        journals[journal].push_back(launch);
    }
    void close_journal(std::int64_t journal, const eval::StageRecord& record) override {
        pending.push_back({"journal-" + std::to_string(journal), record, journals[journal].size()});
    }
    void knowledge(std::function<void()> update) override { updates.push_back(std::move(update)); }
    void commit(const std::function<void()>& step_writes = {}) override {
        for (const auto& update : updates) {
            update();
            ++knowledge_updates_run;
        }
        committed.insert(committed.end(), pending.begin(), pending.end());
        if (step_writes) step_writes();
        ++commits;
        discard();
    }
    void discard() override {
        pending.clear();
        updates.clear();
    }
};

}  // namespace npuopt::fakes
