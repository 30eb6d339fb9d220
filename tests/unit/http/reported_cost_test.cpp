// The cost a response reports (cost: {response_header | response_trailer}), read from head
// fields and from a chunked body's trailer section as BodyReader keeps it.
#include <catch2/catch.hpp>

#include <limits>
#include <string>
#include <vector>

#include "http/body_reader.hpp"
#include "http/field_list.hpp"
#include "http/reported_cost.hpp"

using namespace sluice::http;
using Kind = ReportedCost::Kind;

namespace {

ReportedCost of(std::vector<std::string> values) {
    CostReport report;
    for (const auto& v : values) report.add(v);
    return report.result();
}

// The trailer section BodyReader keeps of a chunked body fed in pieces of `piece` bytes.
std::string kept_trailers(std::string_view body, std::size_t piece) {
    BodyReader reader = BodyReader::chunked();
    reader.keep_trailers();
    std::vector<char> out(7);
    std::size_t offset = 0;
    while (reader.state() == BodyReader::State::reading && offset < body.size()) {
        const auto step = reader.decode(body.substr(offset, std::min(piece, body.size() - offset)), out);
        offset += step.consumed;
    }
    REQUIRE(reader.done());
    return std::string(reader.trailers());
}

}  // namespace

TEST_CASE("a reported cost is one whole number", "[settle]") {
    CHECK(of({}).kind == Kind::absent);
    CHECK(of({"1234"}).kind == Kind::units);
    CHECK(of({"1234"}).units == 1234);
    CHECK(of({" \t0 "}).units == 0);
    CHECK(of({"7", " 7"}).units == 7);  // the same number twice
    CHECK(of({"999999999999999999"}).units == 999'999'999'999'999'999ULL);
    CHECK(of({"1234567890123456789012"}).units == std::numeric_limits<std::uint64_t>::max());
    CHECK(of({"0000000000000000000000012"}).units == 12);  // leading zeros count for nothing
    CHECK(of({"000"}).units == 0);
    for (const char* bad : {"", " ", "-1", "+1", "1.5", "1e3", "0x10", "12 tokens", "１２"}) {
        CAPTURE(bad);
        CHECK(of({bad}).kind == Kind::invalid);
    }
    CHECK(of({"7", "8"}).kind == Kind::invalid);
    CHECK(of({"7", "8"}).problem == "given more than once with different values");
    CHECK(of({"x", "7"}).kind == Kind::invalid);
    CHECK(of({"7", "x"}).problem == "not a whole number");
}

TEST_CASE("a reported cost in head fields and in a trailer section", "[settle]") {
    FieldList fields;
    fields.insert("Content-Type", "text/plain");
    fields.insert("X-Tokens-Used", "42");
    CHECK(cost_in_fields(fields, "x-tokens-used").units == 42);
    CHECK(cost_in_fields(fields, "x-usage").kind == Kind::absent);
    fields.insert("x-TOKENS-used", "43");
    CHECK(cost_in_fields(fields, "x-tokens-used").kind == Kind::invalid);

    CHECK(cost_in_trailers("X-Usage: 12\r\nOther: 1\r\n", "x-usage").units == 12);
    CHECK(cost_in_trailers("Other: 12\r\n", "x-usage").kind == Kind::absent);
    CHECK(cost_in_trailers("", "x-usage").kind == Kind::absent);
    CHECK(cost_in_trailers("X-Usage:12\r\nx-usage: 13\r\n", "x-usage").kind == Kind::invalid);
}

TEST_CASE("BodyReader keeps a chunked body's trailer section when asked, whatever the pieces", "[settle][body_reader]") {
    const std::string body = "5\r\nhello\r\n0\r\nX-Usage: 12\r\nOther:\tx y\r\n\r\n";
    for (std::size_t piece : {1, 2, 3, 7, 100}) {
        CAPTURE(piece);
        CHECK(kept_trailers(body, piece) == "X-Usage: 12\r\nOther:\tx y\r\n");
    }
    CHECK(kept_trailers("0\r\n\r\n", 1).empty());
    // Not kept unless asked; bounded by the trailer limits like any trailer.
    BodyReader plain = BodyReader::chunked();
    std::vector<char> out(64);
    plain.decode(body, out);
    CHECK(plain.done());
    CHECK(plain.trailers().empty());
    BodyLimits tight;
    tight.max_trailer_bytes = 10;
    BodyReader bounded = BodyReader::chunked(tight);
    bounded.keep_trailers();
    bounded.decode(body, out);
    CHECK(bounded.state() == BodyReader::State::trailer_too_large);
    CHECK(bounded.trailers().size() <= 10);
}
