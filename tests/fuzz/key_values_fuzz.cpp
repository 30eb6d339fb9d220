// libFuzzer target: what rate-limit key parts read from a request: query parameters,
// cookies, path segments, client networks. Sources: src/limit/key_values.cpp.
//
// The first input byte picks a name length; the rest is the name and the text. What must
// hold: a value found is never ambiguous; a decoded query or cookie value is never longer
// than the text; a path segment is a view into the text; a segment holds no
// '/'; the same call gives the same answer; a client network parses back as an address
// whose host bits are zero; an address without a colon is read as inet_pton reads IPv4 text
// (IpAddress::parse reads dotted decimal itself).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include <arpa/inet.h>

#include "limit/key_values.hpp"
#include "net/cidr.hpp"

using namespace sluice;

namespace {

bool inside(std::string_view part, std::string_view whole) {
    return part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const std::size_t name_size = std::min<std::size_t>(data[0] % 16, size - 1);
    const std::string_view name(reinterpret_cast<const char*>(data) + 1, name_size);
    const std::string_view text(reinterpret_cast<const char*>(data) + 1 + name_size, size - 1 - name_size);

    bool ambiguous = false;
    const auto query = limit::query_value(text, name, ambiguous);
    if (query && (ambiguous || query->size() > text.size())) std::abort();
    bool again = false;
    if (limit::query_value(text, name, again) != query || again != ambiguous) std::abort();

    const auto cookie = limit::cookie_value(text, name, ambiguous);
    if (cookie && (ambiguous || cookie->size() > text.size())) std::abort();
    if (limit::percent_decoded(text).size() > text.size()) std::abort();

    for (unsigned n = 1; n <= 4; ++n) {
        const auto segment = limit::path_segment(text, n);
        if (!segment) break;
        if (segment->empty() || !inside(*segment, text) || segment->find('/') != std::string_view::npos) std::abort();
    }

    if (text.find(':') == std::string_view::npos && text.find('\0') == std::string_view::npos) {
        const std::string copy(text);
        in_addr raw{};
        const bool libc = inet_pton(AF_INET, copy.c_str(), &raw) == 1;
        const auto ours = net::IpAddress::parse(text);
        if (libc != ours.has_value()) std::abort();
        if (libc && (!ours->v4 || std::memcmp(ours->bytes.data() + 12, &raw, 4) != 0)) std::abort();
    }

    const unsigned v4 = 1 + data[0] % 32, v6 = 1 + (data[size - 1] % 128);
    if (const auto network = limit::client_network(text, v4, v6)) {
        const auto cidr = net::Cidr::parse(*network);
        if (!cidr) std::abort();
        // Masked: a network taken again of its own base is itself.
        if (limit::client_network(cidr->base.str(), v4, v6) != network) std::abort();
    }
    return 0;
}
