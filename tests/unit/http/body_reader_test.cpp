#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "http/body_reader.hpp"

using sluice::http::BodyLimits;
using sluice::http::BodyReader;
using State = BodyReader::State;

namespace {

struct Decoded {
    std::string body;
    std::size_t consumed = 0;
    State state = State::reading;
};

// Feeds `in` in pieces of `piece` bytes (0: all at once) through an output buffer of `out_size`.
Decoded run(BodyReader reader, std::string_view in, std::size_t piece = 0, std::size_t out_size = 64 * 1024) {
    Decoded d;
    std::vector<char> out(out_size);
    std::size_t offset = 0;
    std::size_t avail = piece ? std::min(piece, in.size()) : in.size();
    while (reader.state() == State::reading) {
        auto step = reader.decode(in.substr(offset, avail - offset), out);
        d.body.append(out.data(), step.produced);
        offset += step.consumed;
        if (step.consumed == 0 && step.produced == 0) {
            if (avail == in.size()) break;
            avail = piece ? std::min(avail + piece, in.size()) : in.size();
        }
    }
    d.consumed = offset;
    d.state = reader.state();
    return d;
}

}  // namespace

TEST_CASE("chunked bodies decode to their data, whatever the pieces they arrive in", "[body_reader]") {
    struct Case {
        std::string in;
        std::string body;
        std::size_t consumed;  // bytes of the message: what follows is the next message
    };
    const std::string next = "GET /next HTTP/1.1\r\n";
    const Case cases[] = {
        {"0\r\n\r\n", "", 5},
        {"0\r\n\r\n" + next, "", 5},
        {"5\r\nhello\r\n0\r\n\r\n", "hello", 15},
        {"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n" + next, "hello world", 26},
        {"A\r\n0123456789\r\n0\r\n\r\n", "0123456789", 20},
        {"a\r\n0123456789\r\n0\r\n\r\n", "0123456789", 20},
        {"0005\r\nhello\r\n0\r\n\r\n", "hello", 18},
        {"5;x=y\r\nhello\r\n0;last\r\n\r\n", "hello", 24},
        {"5 ;x=\"a;b\\\"c\"\r\nhello\r\n0\r\n\r\n", "hello", 27},
        {"5\t\r\nhello\r\n0\r\n\r\n", "hello", 16},
        {"0\r\nX-Trailer: 1\r\nOther: two words\r\n\r\n" + next, "", 37},
        {"3\r\nabc\r\n0\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n", "abc", 39},
    };
    for (const auto& c : cases) {
        for (std::size_t piece : {0, 1, 2, 7}) {
            for (std::size_t out_size : {64 * 1024, 1, 3}) {
                INFO(c.in << " piece " << piece << " out " << out_size);
                auto d = run(BodyReader::chunked(), c.in, piece, out_size);
                CHECK(d.state == State::done);
                CHECK(d.body == c.body);
                CHECK(d.consumed == c.consumed);
            }
        }
    }
}

TEST_CASE("malformed chunked framing is refused, never guessed at", "[body_reader]") {
    const std::string cases[] = {
        "\r\n",                      // no size
        "x\r\n",                     // not hex
        " 5\r\nhello\r\n0\r\n\r\n",  // leading whitespace
        "+5\r\nhello\r\n0\r\n\r\n",
        "-5\r\nhello\r\n0\r\n\r\n",
        "0x5\r\nhello\r\n0\r\n\r\n",
        "5\nhello\r\n0\r\n\r\n",  // bare LF
        "5\rhello\r\n0\r\n\r\n",  // bare CR
        "5\r\nhello!\r\n0\r\n\r\n",  // data longer than the size
        "5\r\nhelloXY0\r\n\r\n",     // no CRLF after the data
        "5\r\nhello\n0\r\n\r\n",
        "5;x=\"unterminated\r\nhello\r\n0\r\n\r\n",
        "5;x\x01\r\nhello\r\n0\r\n\r\n",  // control character in an extension
        "5;x=(y)\r\nhello\r\n0\r\n\r\n",   // not a token
        "5 5\r\nhello\r\n0\r\n\r\n",       // two sizes
        "0\r\n folded\r\n\r\n",            // obs-fold in trailers
        "0\r\nNo colon\r\n\r\n",
        "0\r\n: no name\r\n\r\n",
        "0\r\nX: a\rb\r\n\r\n",
        "0\r\nX: a\nb\r\n\r\n",
        "0\r\nX: a\x7f\r\n\r\n",
        "0\r\n\rX",
        "1000000000000000\r\n",  // 16 significant digits
        "fffffffffffffffffffffffff\r\n",
    };
    for (const auto& in : cases) {
        for (std::size_t piece : {0, 1}) {
            INFO(in << " piece " << piece);
            auto d = run(BodyReader::chunked(), in, piece);
            CHECK(d.state == State::malformed);
        }
    }
}

TEST_CASE("chunked bodies are bounded everywhere", "[body_reader]") {
    BodyLimits limits;
    limits.max_body = 10;
    limits.max_chunk_line = 64;
    limits.max_trailer_bytes = 64;
    limits.max_trailer_fields = 3;

    SECTION("body over max_body, in one chunk or several") {
        CHECK(run(BodyReader::chunked(limits), "b\r\n").state == State::too_large);
        CHECK(run(BodyReader::chunked(limits), "5\r\nhello\r\n6\r\n").state == State::too_large);
        auto d = run(BodyReader::chunked(limits), "5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n");
        CHECK(d.state == State::done);
        CHECK(d.body == "helloworld");
    }
    SECTION("a long chunk-size line: leading zeros, extensions, an unterminated quote") {
        CHECK(run(BodyReader::chunked(limits), std::string(100, '0')).state == State::malformed);
        CHECK(run(BodyReader::chunked(limits), "5;" + std::string(100, 'x')).state == State::malformed);
        CHECK(run(BodyReader::chunked(limits), "5;x=\"" + std::string(100, 'x')).state == State::malformed);
        CHECK(run(BodyReader::chunked(limits), std::string(60, '0') + "5\r\nhello\r\n0\r\n\r\n").state == State::done);
    }
    SECTION("the trailer section") {
        CHECK(run(BodyReader::chunked(limits), "0\r\nX: " + std::string(100, 'a')).state == State::trailer_too_large);
        CHECK(run(BodyReader::chunked(limits), "0\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n").state ==
              State::trailer_too_large);
        CHECK(run(BodyReader::chunked(limits), "0\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n").state == State::done);
    }
    SECTION("a 64 MiB extension is refused after max_chunk_line bytes, without holding them") {
        BodyReader r = BodyReader::chunked();
        std::string piece(1 << 20, 'x');
        std::vector<char> out(16);
        r.decode("1;", out);
        std::size_t fed = 0;
        while (r.state() == State::reading && fed < (64u << 20)) {
            r.decode(piece, out);
            fed += piece.size();
        }
        CHECK(r.state() == State::malformed);
        CHECK(fed == piece.size());
    }
}

TEST_CASE("Content-Length bodies end exactly at their length", "[body_reader]") {
    auto d = run(BodyReader::length(5), "helloGET / HTTP/1.1\r\n", 1);
    CHECK(d.state == State::done);
    CHECK(d.body == "hello");
    CHECK(d.consumed == 5);

    CHECK(BodyReader::length(0).done());
    CHECK(BodyReader().done());

    BodyLimits limits;
    limits.max_body = 4;
    CHECK(BodyReader::length(5, limits).state() == State::too_large);
    CHECK(BodyReader::length(4, limits).state() == State::reading);

    SECTION("read straight into the destination") {
        auto r = BodyReader::length(10);
        CHECK(r.raw_remaining() == 10);
        r.consumed_raw(4);
        CHECK(r.raw_remaining() == 6);
        CHECK(r.state() == State::reading);
        r.consumed_raw(6);
        CHECK(r.done());
    }
    SECTION("the connection closing early cuts it short") {
        auto r = BodyReader::length(10);
        std::vector<char> out(64);
        r.decode("abc", out);
        r.end_of_input();
        CHECK(r.state() == State::cut_short);
    }
}

TEST_CASE("a body that ends with the connection", "[body_reader]") {
    auto r = BodyReader::until_close();
    std::vector<char> out(64);
    auto step = r.decode("some bytes", out);
    CHECK(step.produced == 10);
    CHECK(r.state() == State::reading);
    r.end_of_input();
    CHECK(r.done());

    auto chunked = BodyReader::chunked();
    chunked.decode("5\r\nhel", out);
    chunked.end_of_input();
    CHECK(chunked.state() == State::cut_short);
}

TEST_CASE("chunk_frame writes the size in hex", "[body_reader]") {
    auto text = [](std::size_t n) {
        auto f = sluice::http::chunk_frame(n);
        return std::string(f.head, f.head_size);
    };
    CHECK(text(0) == "0\r\n");
    CHECK(text(5) == "5\r\n");
    CHECK(text(32768) == "8000\r\n");
    CHECK(text(0xabcdef) == "abcdef\r\n");
    CHECK(text(SIZE_MAX) == "ffffffffffffffff\r\n");
}
