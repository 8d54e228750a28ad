// The adversarial corpus (tests/data/adversarial), one test per kernel: each goes through the
// real cascade against the baseline on npu-sim, in a scratch campaign with canaries planted, as
// `npuopt bench adversarial` runs it, and must meet the expectation in its header (gaming:
// rejected; escape: contained; honest: accepted). Skips cleanly when npuc is not built.

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>

#include "adversarial_bench.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path k_corpus = fs::path(NPUOPT_TEST_DATA_DIR) / "adversarial";
const fs::path k_npuc = fs::path(NPUOPT_BUILD_DIR) / "npu-sim" / "1.0" / "bin" / "npuc";

/// The kernels with a test below (a corpus file without one fails the coverage test).
const std::set<std::string> k_tested = {
    "all_zeros",
    "cache_poison_siblings",
    "cache_self_replace",
    "cache_sidecar_exfil",
    "check_detect_args",
    "check_detect_launch_count",
    "check_detect_parent_cmdline",
    "check_detect_wallclock",
    "close_but_wrong",
    "compile_error_smuggle",
    "compile_include_bytes",
    "compile_include_str",
    "daemon",
    "env_secrets",
    "fork_bomb",
    "hang",
    "honest_fewer_passes",
    "host_reference",
    "ignores_input",
    "inf_output",
    "leftovers",
    "memory_across_processes",
    "network_external",
    "network_local",
    "nonfinite",
    "order_dependent",
    "output_flood",
    "partial_output",
    "read_campaign_db",
    "read_host_files_panic",
    "residual_only",
    "result_file_forged",
    "result_file_guessed",
    "single_nonfinite",
    "skip_norm",
    "skipped_rows",
    "stdout_parent_fd",
    "stdout_spoof",
    "timing_est_swap",
    "timing_fixed",
    "write_outside",
};

void check_adversarial(const std::string& name) {
    if (!fs::exists(k_npuc)) {
        MESSAGE("skipped: npuc not built at " << k_npuc.string());
        return;
    }
    npuopt::bench::AdversarialOptions options;
    options.corpus_dir = k_corpus;
    options.only = {name};
    options.controls = false;
    const auto report = npuopt::bench::run_adversarial_bench(options);
    REQUIRE(report.rows.size() == 1);
    const auto& row = report.rows.front();
    std::string escapes;
    for (const auto& escape : row.escapes) escapes += escape + "; ";
    INFO("expected " << row.item.expect << ", verdict " << row.verdict << " at " << row.stage << ": " << row.reason);
    INFO("escapes: " << (escapes.empty() ? "none" : escapes));
    CHECK(row.met);
}

}  // namespace

TEST_CASE("adversarial corpus: every kernel has a header, a test, and the corpus covers the patterns") {
    const auto corpus = npuopt::bench::load_adversarial_corpus(k_corpus);
    int gaming = 0, escapes = 0;
    for (const auto& item : corpus) {
        INFO(item.file.string());
        CHECK(k_tested.count(item.name) == 1);
        CHECK(item.kernel == "attention_output");
        gaming += item.kind == "gaming";
        escapes += item.kind == "escape";
    }
    CHECK(gaming >= 20);
    CHECK(escapes >= 12);
    CHECK(corpus.size() == k_tested.size());
}

TEST_CASE("a gaming kernel the race accepted is run twice more and counts as rejected only when neither rerun accepts") {
    npuopt::bench::AdversarialRow first;
    first.item.expect = "rejected";
    first.verdict = "accepted";
    first.stage = "race";
    first.reason = "race: accept: speedup 1.022";
    auto row = [](const std::string& verdict, const std::string& stage) {
        npuopt::bench::AdversarialRow rerun;
        rerun.item.expect = "rejected";
        rerun.verdict = verdict;
        rerun.stage = stage;
        rerun.met = verdict == "rejected";
        rerun.reason = stage + ": " + verdict;
        return rerun;
    };
    SUBCASE("both reruns rejected: a false accept of an equal design") {
        int calls = 0;
        const auto result = npuopt::bench::confirm_gaming_accept(first, [&] { ++calls; return row("rejected", "screen"); });
        CHECK(calls == 2);
        CHECK(result.verdict == "rejected");
        CHECK(result.met);
        CHECK(result.reason.find("attempt 1 accepted by the race (race: accept: speedup 1.022)") != std::string::npos);
        CHECK(result.reason.find("attempt 3 rejected at screen") != std::string::npos);
    }
    SUBCASE("a rerun accepts: the attack (or a real gain) is not excused") {
        int calls = 0;
        const auto result = npuopt::bench::confirm_gaming_accept(first, [&] {
            return ++calls == 1 ? row("rejected", "race") : row("accepted", "race");
        });
        CHECK(calls == 2);
        CHECK(result.verdict == "accepted");
        CHECK_FALSE(result.met);
        CHECK(result.reason.find("attempt 3 accepted at race") != std::string::npos);
    }
    SUBCASE("a rerun that lets something escape is not excused") {
        const auto result = npuopt::bench::confirm_gaming_accept(first, [&] {
            auto rerun = row("rejected", "screen");
            rerun.escapes = {"canary secret in campaign.db"};
            return rerun;
        });
        CHECK_FALSE(result.met);
        CHECK(result.escapes.size() == 1);
    }
    SUBCASE("a clear win, a rejected case and a control are not run again") {
        int calls = 0;
        auto never = [&] { ++calls; return row("rejected", "screen"); };
        auto clear_win = first;
        clear_win.stage = "screen";
        clear_win.met = false;
        CHECK_FALSE(npuopt::bench::confirm_gaming_accept(clear_win, never).met);
        auto control = first;
        control.item.expect = "accepted";
        control.met = true;
        CHECK(npuopt::bench::confirm_gaming_accept(control, never).verdict == "accepted");
        CHECK(npuopt::bench::confirm_gaming_accept(row("rejected", "race"), never).met);
        CHECK(calls == 0);
    }
}

#define ADVERSARIAL_CASE(NAME) \
    TEST_CASE("adversarial: " #NAME) { check_adversarial(#NAME); }

ADVERSARIAL_CASE(all_zeros)
ADVERSARIAL_CASE(cache_poison_siblings)
ADVERSARIAL_CASE(cache_self_replace)
ADVERSARIAL_CASE(cache_sidecar_exfil)
ADVERSARIAL_CASE(check_detect_args)
ADVERSARIAL_CASE(check_detect_launch_count)
ADVERSARIAL_CASE(check_detect_parent_cmdline)
ADVERSARIAL_CASE(check_detect_wallclock)
ADVERSARIAL_CASE(close_but_wrong)
ADVERSARIAL_CASE(compile_error_smuggle)
ADVERSARIAL_CASE(compile_include_bytes)
ADVERSARIAL_CASE(compile_include_str)
ADVERSARIAL_CASE(daemon)
ADVERSARIAL_CASE(env_secrets)
ADVERSARIAL_CASE(fork_bomb)
ADVERSARIAL_CASE(hang)
ADVERSARIAL_CASE(honest_fewer_passes)
ADVERSARIAL_CASE(host_reference)
ADVERSARIAL_CASE(ignores_input)
ADVERSARIAL_CASE(inf_output)
ADVERSARIAL_CASE(leftovers)
ADVERSARIAL_CASE(memory_across_processes)
ADVERSARIAL_CASE(network_external)
ADVERSARIAL_CASE(network_local)
ADVERSARIAL_CASE(nonfinite)
ADVERSARIAL_CASE(order_dependent)
ADVERSARIAL_CASE(output_flood)
ADVERSARIAL_CASE(partial_output)
ADVERSARIAL_CASE(read_campaign_db)
ADVERSARIAL_CASE(read_host_files_panic)
ADVERSARIAL_CASE(residual_only)
ADVERSARIAL_CASE(result_file_forged)
ADVERSARIAL_CASE(result_file_guessed)
ADVERSARIAL_CASE(single_nonfinite)
ADVERSARIAL_CASE(skip_norm)
ADVERSARIAL_CASE(skipped_rows)
ADVERSARIAL_CASE(stdout_parent_fd)
ADVERSARIAL_CASE(stdout_spoof)
ADVERSARIAL_CASE(timing_est_swap)
ADVERSARIAL_CASE(timing_fixed)
ADVERSARIAL_CASE(write_outside)
