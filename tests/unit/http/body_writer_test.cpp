// The one writer of body framing: what it sends for a sequence of pieces, and that a chunked
// body it writes reads back, through BodyReader, as the pieces it was given.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "http/body_reader.hpp"
#include "http/body_writer.hpp"

using namespace sluice::http;

namespace {

// Every byte written for `pieces` (the last one ends the body), as one string.
std::string write_all(BodyWriter::Mode mode, const std::vector<std::string>& pieces, std::string_view head = "HEAD|") {
    BodyWriter writer(head, mode);
    std::string out;
    for (std::size_t i = 0; i < pieces.size(); ++i)
        for (auto part : writer.frame(pieces[i], i + 1 == pieces.size())) out += part;
    return out;
}

}  // namespace

TEST_CASE("body writer framing, piece by piece") {
    using Mode = BodyWriter::Mode;
    struct Row {
        const char* what;
        Mode mode;
        std::vector<std::string> pieces;
        std::string bytes;
    };
    const Row rows[] = {
        {"as is: the head, then the bytes", Mode::as_is, {"hel", "lo"}, "HEAD|hello"},
        {"as is: an empty body is the head alone", Mode::as_is, {""}, "HEAD|"},
        {"chunked: a chunk per piece, then the last chunk", Mode::chunked, {"hello", "world!"},
         "HEAD|5\r\nhello\r\n6\r\nworld!\r\n0\r\n\r\n"},
        {"chunked: empty pieces make no chunk (a zero chunk would end the body)", Mode::chunked,
         {"ab", "", "", "c", ""}, "HEAD|2\r\nab\r\n1\r\nc\r\n0\r\n\r\n"},
        {"chunked: an empty body is the last chunk alone", Mode::chunked, {""}, "HEAD|0\r\n\r\n"},
        {"chunked: the last piece travels with the last chunk", Mode::chunked, {"xyz"}, "HEAD|3\r\nxyz\r\n0\r\n\r\n"},
        {"chunked: sizes in lowercase hex", Mode::chunked, {std::string(0x1a2b, 'q')},
         "HEAD|1a2b\r\n" + std::string(0x1a2b, 'q') + "\r\n0\r\n\r\n"},
    };
    for (const auto& row : rows) {
        SECTION(row.what) { CHECK(write_all(row.mode, row.pieces) == row.bytes); }
    }
}

TEST_CASE("body writer sends the head once and the last chunk once") {
    BodyWriter writer("H", BodyWriter::Mode::chunked);
    auto first = writer.frame("", false);
    CHECK(first[0] == "H");
    for (std::size_t i = 1; i < first.size(); ++i) CHECK(first[i].empty());
    auto last = writer.frame("a", true);
    CHECK(last[0].empty());
    CHECK(last[4] == last_chunk);
    auto after = writer.frame("", true);
    for (auto part : after) CHECK(part.empty());
}

TEST_CASE("a chunked body the writer frames reads back as its pieces") {
    const std::vector<std::string> pieces{"a", "", std::string(4096, 'b'), "\r\n0\r\n\r\n", "tail"};
    const std::string wire = write_all(BodyWriter::Mode::chunked, pieces, "");
    BodyReader reader = BodyReader::chunked();
    std::string decoded;
    std::string_view in = wire;
    std::vector<char> out(1000);
    while (reader.state() == BodyReader::State::reading && !in.empty()) {
        const auto step = reader.decode(in, std::span<char>(out.data(), out.size()));
        REQUIRE((step.consumed > 0 || step.produced > 0));  // no progress would loop forever
        decoded.append(out.data(), step.produced);
        in.remove_prefix(step.consumed);
    }
    CHECK(reader.state() == BodyReader::State::done);
    CHECK(in.empty());
    std::string expected;
    for (const auto& p : pieces) expected += p;
    CHECK(decoded == expected);
}
