#pragma once
// Reproducible, unpredictable seeds: every random choice of an evaluation (input seeds, priming,
// exploration draws, which launches are checked, submission runs) is a hash of the campaign seed,
// the design's content hash and the purpose, so it is reproducible from the database and no kernel
// can guess it from a small counter (never 0x5eed + i).

#include <cstdint>
#include <string_view>

namespace npuopt::eval {

/// FNV-1a over `text`, continuing from `hash`.
std::uint64_t fnv1a(std::string_view text, std::uint64_t hash = 0xcbf29ce484222325ULL);
/// The splitmix64 finaliser: a bijective 64-bit mix.
std::uint64_t splitmix64(std::uint64_t value);

/// A reproducible stream of seeds for one purpose of one design (content hash; may be empty).
class SeedStream {
public:
    SeedStream(std::uint64_t campaign_seed, std::string_view content_hash, std::string_view purpose);
    /// The next seed, within int64 (the store keeps seeds as INTEGER).
    std::uint64_t next();
    /// A uniform draw in [0, 1).
    double uniform();

private:
    std::uint64_t m_state;
};

/// The first seed of SeedStream(campaign_seed, content_hash, purpose).
std::uint64_t derive_seed(std::uint64_t campaign_seed, std::string_view content_hash, std::string_view purpose);

}  // namespace npuopt::eval
