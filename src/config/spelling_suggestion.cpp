#include "config/spelling_suggestion.hpp"

#include <algorithm>
#include <cctype>

namespace sluice::config {
namespace {

char folded(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

std::size_t allowed_edits(std::string_view word) { return word.size() < 5 ? 1 : std::max<std::size_t>(2, word.size() / 4); }

}  // namespace

std::size_t spelling_distance(std::string_view a, std::string_view b) {
    const std::size_t columns = b.size() + 1;
    // Three rows of the distance table: two rows back (for transpositions), previous, current.
    std::vector<std::size_t> before(columns), previous(columns), current(columns);
    for (std::size_t j = 0; j < columns; ++j) previous[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        current[0] = i;
        for (std::size_t j = 1; j < columns; ++j) {
            const std::size_t substitution = folded(a[i - 1]) == folded(b[j - 1]) ? 0 : 1;
            current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + substitution});
            const bool swapped = i > 1 && j > 1 && folded(a[i - 1]) == folded(b[j - 2]) &&
                                 folded(a[i - 2]) == folded(b[j - 1]);
            if (swapped) current[j] = std::min(current[j], before[j - 2] + 1);
        }
        std::swap(before, previous);
        std::swap(previous, current);
    }
    return previous[b.size()];
}

std::optional<std::string_view> closest_spelling(std::string_view word,
                                                 const std::vector<std::string_view>& candidates) {
    std::optional<std::string_view> best;
    std::size_t best_distance = allowed_edits(word) + 1;
    for (std::string_view candidate : candidates) {
        const std::size_t distance = spelling_distance(word, candidate);
        if (distance < best_distance && distance < candidate.size()) {
            best = candidate;
            best_distance = distance;
        }
    }
    return best;
}

}  // namespace sluice::config
