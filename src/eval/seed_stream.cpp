#include "eval/seed_stream.hpp"

namespace npuopt::eval {

std::uint64_t fnv1a(std::string_view text, std::uint64_t hash) {
    for (unsigned char ch : text) {
        hash ^= ch;
        hash *= 0x100000001b3ULL;
    }
    return hash;
}

std::uint64_t splitmix64(std::uint64_t value) {
    value += 0x9e3779b97f4a7c15ULL;
    value = (value ^ (value >> 30)) * 0xbf58476d1ce4e5b9ULL;
    value = (value ^ (value >> 27)) * 0x94d049bb133111ebULL;
    return value ^ (value >> 31);
}

SeedStream::SeedStream(std::uint64_t campaign_seed, std::string_view content_hash, std::string_view purpose)
    : m_state(splitmix64(campaign_seed ^ fnv1a(purpose, fnv1a(content_hash)))) {}

std::uint64_t SeedStream::next() {
    m_state = splitmix64(m_state);
    return m_state >> 1;
}

double SeedStream::uniform() { return static_cast<double>(next() >> 10) / static_cast<double>(1ULL << 53); }

std::uint64_t derive_seed(std::uint64_t campaign_seed, std::string_view content_hash, std::string_view purpose) {
    return SeedStream(campaign_seed, content_hash, purpose).next();
}

}  // namespace npuopt::eval
