// Response headers sluice adds of its own (the rate-limit fields, Retry-After, a refusal's):
// names are literals, values kept inline up to 48 bytes (a RateLimit field is about 30), on
// the heap beyond; every limited response carries a few, in one list allocated once.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/container/small_vector.hpp>

namespace sluice::limit {

class HeaderValue {
public:
    HeaderValue() = default;
    HeaderValue(std::string_view text) : bytes_(text.begin(), text.end()) {}  // NOLINT: converts like a string
    HeaderValue(const char* text) : HeaderValue(std::string_view(text)) {}     // NOLINT
    HeaderValue(const std::string& text) : HeaderValue(std::string_view(text)) {}  // NOLINT

    std::string_view view() const { return {bytes_.data(), bytes_.size()}; }
    operator std::string_view() const { return view(); }  // NOLINT
    explicit operator std::string() const { return std::string(view()); }
    const char* data() const { return bytes_.data(); }
    std::size_t size() const { return bytes_.size(); }
    bool empty() const { return bytes_.empty(); }
    // `n` bytes to write the value into (what was there is gone).
    char* overwrite(std::size_t n) {
        bytes_.resize(n);
        return bytes_.data();
    }

    friend bool operator==(const HeaderValue& a, std::string_view b) { return a.view() == b; }

private:
    boost::container::small_vector<char, 48> bytes_;
};

// Name and value, names unique.
using HeaderList = std::vector<std::pair<std::string_view, HeaderValue>>;

}  // namespace sluice::limit
