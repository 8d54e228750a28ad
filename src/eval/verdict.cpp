#include "eval/verdict.hpp"

#include <array>
#include <utility>

namespace npuopt::eval {
namespace {

constexpr std::array<std::pair<Verdict, std::string_view>, 11> k_verdict_names{{
    {Verdict::pass, "pass"},
    {Verdict::fail, "fail"},
    {Verdict::skip, "skip"},
    {Verdict::accept, "accept"},
    {Verdict::reject, "reject"},
    {Verdict::inconclusive, "inconclusive"},
    {Verdict::suspect, "suspect"},
    {Verdict::error, "error"},
    {Verdict::running, "running"},
    {Verdict::interrupted, "interrupted"},
    {Verdict::champion, "champion"},
}};

constexpr std::array<std::pair<StepVerdict, std::string_view>, 7> k_step_verdict_names{{
    {StepVerdict::accepted, "accepted"},
    {StepVerdict::rejected, "rejected"},
    {StepVerdict::failed, "failed"},
    {StepVerdict::skipped, "skipped"},
    {StepVerdict::error, "error"},
    {StepVerdict::inconclusive, "inconclusive"},
    {StepVerdict::suspect, "suspect"},
}};

template <typename Enum, std::size_t N>
std::string_view name_of(const std::array<std::pair<Enum, std::string_view>, N>& names, Enum value) {
    for (const auto& [candidate, name] : names) {
        if (candidate == value) return name;
    }
    return "?";
}

template <typename Enum, std::size_t N>
std::optional<Enum> parse(const std::array<std::pair<Enum, std::string_view>, N>& names, std::string_view text) {
    for (const auto& [candidate, name] : names) {
        if (name == text) return candidate;
    }
    return std::nullopt;
}

}  // namespace

std::string_view verdict_name(Verdict verdict) { return name_of(k_verdict_names, verdict); }
std::optional<Verdict> parse_verdict(std::string_view name) { return parse(k_verdict_names, name); }
std::ostream& operator<<(std::ostream& out, Verdict verdict) { return out << verdict_name(verdict); }

std::string_view step_verdict_name(StepVerdict verdict) { return name_of(k_step_verdict_names, verdict); }
std::optional<StepVerdict> parse_step_verdict(std::string_view name) { return parse(k_step_verdict_names, name); }
std::ostream& operator<<(std::ostream& out, StepVerdict verdict) { return out << step_verdict_name(verdict); }

StepVerdict step_verdict_of(Verdict last) {
    switch (last) {
        case Verdict::accept: return StepVerdict::accepted;
        case Verdict::fail: return StepVerdict::failed;
        case Verdict::skip: return StepVerdict::skipped;
        case Verdict::error: return StepVerdict::error;
        case Verdict::inconclusive: return StepVerdict::inconclusive;
        case Verdict::suspect: return StepVerdict::suspect;
        case Verdict::reject:
        case Verdict::pass:
        case Verdict::running:
        case Verdict::interrupted:
        case Verdict::champion: return StepVerdict::rejected;
    }
    return StepVerdict::rejected;
}

bool step_measured(StepVerdict verdict) { return verdict != StepVerdict::failed && verdict != StepVerdict::error; }

}  // namespace npuopt::eval
