#pragma once
// Where a toolchain call runs: here (proc::run) or as a batch job on a cluster (proc/slurm.hpp).
// A call and its result travel between machines as JSON (to_json/from_json), and `npuopt
// exec-call CALL RESULT` runs one on a cluster node with the same sandbox, limits and capture as
// here: only the place changes.

#include <filesystem>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "proc/subprocess.hpp"

namespace npuopt::proc {

/// Runs commands to completion; failures are data in the Result, as with proc::run.
class Executor {
public:
    virtual ~Executor() = default;
    virtual Result run(const Command& command) = 0;
};

/// proc::run, here.
class LocalExecutor final : public Executor {
public:
    Result run(const Command& command) override { return proc::run(command); }
};

nlohmann::json to_json(const Command& command);
Command command_from_json(const nlohmann::json& json);
nlohmann::json to_json(const Result& result);
Result result_from_json(const nlohmann::json& json);

/// `npuopt exec-call`: the call in `call_file` run here, its result written to `result_file`
/// (atomically: a reader never sees half a file). Throws Error(invalid_input) on a bad call file,
/// and Error(interrupted), writing nothing, when SIGTERM/SIGINT came during the call (a cancelled job).
void execute_call_file(const std::filesystem::path& call_file, const std::filesystem::path& result_file);

}  // namespace npuopt::proc
