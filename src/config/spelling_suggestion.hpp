// "did you mean ...?" for misspelt keys and names.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace sluice::config {

// The candidate closest to `word` (case-insensitive, a swap of two neighbours counts as one
// edit), when it is near enough to be a likely typo: at most 1 edit for words shorter than 5
// characters, else at most 2 or a quarter of the word's length, whichever is more. Never a
// candidate that every character would have to change for. On a tie, the earlier candidate wins.
std::optional<std::string_view> closest_spelling(std::string_view word,
                                                 const std::vector<std::string_view>& candidates);

// Edit distance with adjacent transpositions (optimal string alignment), case-insensitive.
std::size_t spelling_distance(std::string_view a, std::string_view b);

}  // namespace sluice::config
