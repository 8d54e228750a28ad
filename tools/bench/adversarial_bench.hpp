#pragma once
// `npuopt bench adversarial`: every kernel of the adversarial corpus (tests/data/adversarial)
// and the honest controls (each kernel's baseline and every template at its defaults) through
// the real cascade against the baseline, each in its own scratch campaign. Canaries planted
// before the run (a secret variable in npuopt's environment, a key in a canary home, another
// campaign's database) make containment checkable from outside the sandbox: marker files,
// leaked canaries, processes that outlive their call, processes and memory summed over a call,
// output floods, connections to a local listener.
//
//   corpus header ──► scratch campaign ──► baseline champion ──► cascade(kernel) ──► verdict
//                                 monitors (/proc, listener) ──► escape checks ──► row

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace npuopt::bench {

/// Where the canaries live (fixed, outside /tmp, so that a kernel can name it at compile time).
inline constexpr const char* k_adversarial_canary_root = "/var/tmp/npuopt-adversarial";
/// The local listener the network kernels try to reach.
inline constexpr int k_adversarial_listener_port = 47611;

/// One kernel of the corpus, from its header:
///   // adversarial: <pattern>: <description>
///   // expect: rejected | contained | accepted
struct AdversarialCase {
    std::filesystem::path file;
    std::string name;         ///< file stem, or "<kernel>/<template>" for a control
    std::string kernel;       ///< from `npu::kernels! { <kernel> => ... }`
    std::string pattern;
    std::string description;
    std::string expect;       ///< rejected | contained | accepted
    std::string kind;         ///< gaming | escape | control
};

/// Parse a corpus file's header; Error(invalid_input) naming the file when it is malformed.
AdversarialCase parse_adversarial_case(const std::filesystem::path& file);
/// Every `*.rs` of `dir`, sorted by name.
std::vector<AdversarialCase> load_adversarial_corpus(const std::filesystem::path& dir);

/// What one case did.
struct AdversarialRow {
    AdversarialCase item;
    std::string verdict;                 ///< accepted | rejected | error
    std::string stage;                   ///< the stage that decided (rejected: the first stage not passed)
    std::string reason;
    std::vector<std::string> escapes;    ///< what got out (empty: contained)
    bool met = false;                    ///< the expectation holds
    std::optional<double> cycles;        ///< controls: the cascade's median
    std::optional<double> model_cycles;  ///< controls: noise-free device model cycles (npuc trace)
    std::optional<double> model_cycles_before;  ///< controls: from the cycles-before file
    std::int64_t device_runs = 0;
    double secs = 0.0;
};

struct AdversarialOptions {
    std::filesystem::path corpus_dir;               ///< default: the source tree's tests/data/adversarial
    std::optional<std::filesystem::path> knowledge_dir;
    std::vector<std::string> only;                  ///< case names (file stems, or "controls"); empty: all
    bool controls = true;                           ///< also the baselines and template defaults
    bool keep = false;                              ///< keep the scratch campaigns
    std::optional<std::filesystem::path> toolchain; ///< npuc to use instead of target.yaml's
    std::optional<std::filesystem::path> cycles_before;  ///< JSON {"kernel/template": model cycles}
    std::optional<std::filesystem::path> save_cycles;    ///< write the controls' model cycles here
    double cycles_tolerance = 0.01;                 ///< controls: |after/before - 1| allowed
    std::function<void(const AdversarialRow&)> on_row;
};

struct AdversarialReport {
    std::vector<AdversarialRow> rows;
    int gaming_total = 0, gaming_accepted = 0;
    int escapes_total = 0, escapes_contained = 0;
    int controls_total = 0, controls_accepted = 0, controls_cycles_ok = 0, controls_cycles_known = 0;
    std::filesystem::path work_dir;
    bool goals_met() const;
};

/// Plant the canaries, run every case, remove the canaries and (unless `keep`) the campaigns.
/// A gaming kernel whose attack does nothing is an honest copy of the baseline, and a race between
/// equal designs accepts now and then by design (at most alpha per race; about 0.5 % measured,
/// src/eval/STATISTICS.md). So a gaming case the race accepted (a gain under the clear-win margin)
/// is run twice more (`again`: a fresh scratch campaign, fresh launch noise) and counts as rejected
/// only when neither rerun accepts; the reason lists every attempt. An attack that works is
/// accepted every time; an equal design twice more with probability about alpha^2. Any other row
/// (a clear win, an escape, a control) is returned as it is, `again` not called.
AdversarialRow confirm_gaming_accept(AdversarialRow first, const std::function<AdversarialRow()>& again);

AdversarialReport run_adversarial_bench(const AdversarialOptions& options);

nlohmann::json adversarial_report_json(const AdversarialReport& report);
/// The Markdown table and the summary lines.
std::string adversarial_report_table(const AdversarialReport& report);

}  // namespace npuopt::bench
