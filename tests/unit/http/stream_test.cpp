// Stream::send_now (the write that does not wait) and rest_after, over real loopback TCP.
#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "http/stream.hpp"

using boost::asio::ip::tcp;
using sluice::http::rest_after;
using sluice::http::Stream;
namespace net = boost::asio;

namespace {

struct Pair {
    net::io_context io;
    tcp::acceptor acceptor{io, tcp::endpoint(net::ip::address_v4::loopback(), 0)};
    tcp::socket peer{io};
    Stream stream{tcp::socket(io)};

    Pair() {
        stream.socket().connect(acceptor.local_endpoint());
        peer = acceptor.accept();
    }

    std::string read_exactly(std::size_t n) {
        std::string got(n, '\0');
        net::read(peer, net::buffer(got));
        return got;
    }
};

std::string joined(const std::array<net::const_buffer, 5>& buffers) {
    std::string s;
    for (const auto& b : buffers) s.append(static_cast<const char*>(b.data()), b.size());
    return s;
}

}  // namespace

TEST_CASE("send_now writes every non-empty buffer in one go, in order") {
    Pair p;
    const std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
    const std::string body = "hello";
    const std::array<net::const_buffer, 5> out{net::buffer(head), net::const_buffer(), net::buffer(body),
                                               net::const_buffer(), net::const_buffer()};
    boost::system::error_code ec;
    REQUIRE(p.stream.send_now(out, ec) == head.size() + body.size());
    REQUIRE_FALSE(ec);
    CHECK(p.read_exactly(head.size() + body.size()) == head + body);

    // Nothing to send: nothing sent, no error.
    const std::array<net::const_buffer, 5> empty{};
    CHECK(p.stream.send_now(empty, ec) == 0);
    CHECK_FALSE(ec);
}

TEST_CASE("send_now stops where the socket is full, without an error, and rest_after resumes there") {
    Pair p;
    p.stream.socket().set_option(net::socket_base::send_buffer_size(4096));
    p.peer.set_option(net::socket_base::receive_buffer_size(4096));
    const std::string a(400000, 'a'), b(400000, 'b');
    const std::array<net::const_buffer, 5> out{net::buffer(a), net::buffer(b), {}, {}, {}};
    boost::system::error_code ec;
    // The peer reads nothing: the buffers fill, and a try then sends nothing and is no error
    // (the caller waits asynchronously for the rest).
    std::size_t sent = 0;
    for (int i = 0; i < 1000; ++i) {
        const std::size_t n = p.stream.send_now(rest_after(out, sent), ec);
        REQUIRE_FALSE(ec);
        if (n == 0) break;
        sent += n;
    }
    REQUIRE(sent > 0);
    REQUIRE(sent < a.size() + b.size());
    CHECK(p.stream.send_now(rest_after(out, sent), ec) == 0);
    CHECK_FALSE(ec);
    // What was sent and what is left make the whole, in order.
    CHECK(joined(rest_after(out, sent)) == (a + b).substr(sent));
    CHECK(p.read_exactly(sent) == (a + b).substr(0, sent));
}

TEST_CASE("send_now reports a connection the peer reset, with no SIGPIPE") {
    Pair p;
    p.peer.set_option(net::socket_base::linger(true, 0));
    p.peer.close();  // a reset
    const std::string s(1000, 'x');
    const std::array<net::const_buffer, 5> out{net::buffer(s), {}, {}, {}, {}};
    boost::system::error_code ec;
    // The first send may still be taken before the reset is seen; one of a few is refused.
    for (int i = 0; i < 50 && !ec; ++i) p.stream.send_now(out, ec);
    REQUIRE(ec);
    CHECK((ec == net::error::connection_reset || ec == net::error::broken_pipe));
    // As an asynchronous write would report it.
    CHECK(ec.category() == boost::system::system_category());
}

TEST_CASE("send_now leaves a TLS stream and a closed socket to the asynchronous write") {
    net::io_context io;
    net::ssl::context context(net::ssl::context::tls_client);
    Stream tls(tcp::socket(io), context);
    const std::string s = "x";
    const std::array<net::const_buffer, 5> out{net::buffer(s), {}, {}, {}, {}};
    boost::system::error_code ec;
    CHECK(tls.send_now(out, ec) == 0);
    CHECK_FALSE(ec);
    Stream closed{tcp::socket(io)};
    CHECK(closed.send_now(out, ec) == 0);
    CHECK_FALSE(ec);
}

TEST_CASE("send_now sends the first 8 non-empty buffers of more; rest_after resumes with the others") {
    Pair p;
    std::vector<std::string> pieces;
    for (char c = 'a'; c < 'a' + 10; ++c) pieces.emplace_back(3, c);
    std::array<net::const_buffer, 11> out;
    out[0] = net::const_buffer();  // empty ones do not count
    for (std::size_t i = 0; i < 10; ++i) out[i + 1] = net::buffer(pieces[i]);
    boost::system::error_code ec;
    const std::size_t sent = p.stream.send_now(out, ec);
    REQUIRE_FALSE(ec);
    CHECK(sent == 24);
    const auto rest = rest_after(out, sent);
    CHECK(p.stream.send_now(rest, ec) == 6);
    CHECK(p.read_exactly(30) == "aaabbbcccdddeeefffggghhhiiijjj");
}

TEST_CASE("rest_after skips whole and partial buffers") {
    const std::string a = "abc", b = "de", c = "fghi";
    const std::array<net::const_buffer, 5> out{net::buffer(a), {}, net::buffer(b), net::buffer(c), {}};
    for (std::size_t n = 0; n <= 9; ++n) CHECK(joined(rest_after(out, n)) == std::string("abcdefghi").substr(n));
    CHECK(joined(rest_after(out, 100)).empty());
}

namespace {

// One read on the stream, run until it completes (or 5 s, which fails the test).
struct ReadResult {
    bool done_at_once = false;  // before anything more was sent
    bool done = false;
    boost::system::error_code ec;
    std::string bytes;
};

using ReadHandler = std::function<void(boost::system::error_code, std::size_t)>;

// Starts a read into a 64-byte buffer with `start`, runs what is ready at once, then
// `after_start`, then the loop until the read is done (or 5 s). `then` runs in the
// completion, after the result is kept.
ReadResult run_read(net::io_context& io, const std::function<void(net::mutable_buffer, ReadHandler)>& start,
                    const std::function<void()>& after_start, const ReadHandler& then = {}) {
    ReadResult r;
    std::array<char, 64> buf{};
    start(net::buffer(buf), [&](boost::system::error_code ec, std::size_t n) {
        r.done = true;
        r.ec = ec;
        r.bytes.assign(buf.data(), n);
        if (then) then(ec, n);
    });
    io.restart();
    io.poll();
    r.done_at_once = r.done;
    if (after_start) after_start();
    io.restart();
    io.run_for(std::chrono::seconds(5));
    return r;
}

ReadResult read_once(Pair& p, const std::function<void()>& after_start = {}) {
    return run_read(
        p.io, [&](net::mutable_buffer b, ReadHandler h) { p.stream.async_read_some(b, std::move(h)); }, after_start);
}

// What a read that starts without a receive first must still get, in order: bytes sent
// after it started, bytes that came before it started, the peer's close, the last bytes and
// the close together. `attempts_after`: whether a read after the first attempts a receive.
void check_next_reads(Pair& p, const std::function<ReadResult(Pair&, const std::function<void()>&)>& read,
                      bool attempts_after) {
    SECTION("bytes sent after the read started") {
        const auto r = read(p, [&] { net::write(p.peer, net::buffer(std::string("abc"))); });
        CHECK_FALSE(r.done_at_once);
        REQUIRE(r.done);
        CHECK_FALSE(r.ec);
        CHECK(r.bytes == "abc");
        CHECK(p.stream.attempts_read_first() == attempts_after);
    }
    SECTION("bytes that arrived before the read started") {
        net::write(p.peer, net::buffer(std::string("late")));
        const auto r = read(p, {});
        REQUIRE(r.done);
        CHECK(r.bytes == "late");
    }
    SECTION("the peer's close") {
        p.peer.close();
        const auto r = read(p, {});
        REQUIRE(r.done);
        CHECK(r.ec == net::error::eof);
    }
    SECTION("bytes and the close together: the bytes, then the end") {
        const auto r = read(p, [&] {
            net::write(p.peer, net::buffer(std::string("last")));
            p.peer.close();
        });
        CHECK(r.bytes == "last");
        const auto end = read(p, {});
        REQUIRE(end.done);
        CHECK(end.ec == net::error::eof);
    }
}

}  // namespace

TEST_CASE("quiet: the next read waits for the socket without a receive first, and gets what arrives") {
    Pair p;
    CHECK(p.stream.attempts_read_first());
    REQUIRE(p.stream.quiet());
    CHECK_FALSE(p.stream.attempts_read_first());

    // (quiet() left nothing to say about the next reads: each attempts a receive again)
    check_next_reads(p, read_once, true);
    SECTION("after a read, the next one attempts a receive again") {
        net::write(p.peer, net::buffer(std::string("one")));
        CHECK(read_once(p).bytes == "one");
        net::write(p.peer, net::buffer(std::string("two")));
        CHECK(p.stream.attempts_read_first());
        CHECK(read_once(p).bytes == "two");
    }
}

TEST_CASE("quiet is false for a connection with bytes nobody asked for, or closed") {
    Pair p;
    SECTION("unsolicited bytes, left in place") {
        net::write(p.peer, net::buffer(std::string("x")));
        CHECK_FALSE(p.stream.quiet());
        CHECK(p.stream.attempts_read_first());
        CHECK(read_once(p).bytes == "x");
    }
    SECTION("closed by the peer") {
        p.peer.close();
        CHECK_FALSE(p.stream.quiet());
    }
    SECTION("closed here") {
        p.stream.socket().close();
        CHECK_FALSE(p.stream.quiet());
    }
}

namespace {

// A read through async_read_reported (its result reported in its completion), or with
// `report` false one that only marks the socket's report word, as it does, and whose result
// the test reports itself (ReadReadiness::read_done) when it chooses.
ReadResult read_reported(Pair& p, bool report = true, const std::function<void()>& after_start = {}) {
    return run_read(
        p.io,
        [&](net::mutable_buffer b, ReadHandler h) {
            if (report) return p.stream.async_read_reported(b, std::move(h));
            p.stream.socket().async_read_some(sluice::net::ReadReadiness(p.stream.socket()).buffer(b), std::move(h));
        },
        after_start);
}

// Runs the event loop for a moment with no read pending: what the socket has is reported
// (epoll collects it) and no read takes it.
void collect_reports_of(net::io_context& io) {
    net::steady_timer timer(io, std::chrono::milliseconds(20));
    timer.async_wait([](boost::system::error_code) {});
    io.restart();
    io.run();
}
void collect_reports(Pair& p) { collect_reports_of(p.io); }

// The first reported read registers the socket for the peer's close.
void register_close_reports(Pair& p) {
    net::write(p.peer, net::buffer(std::string("hello")));
    REQUIRE(read_reported(p).bytes == "hello");
    REQUIRE(p.stream.watches_peer_close());
}

}  // namespace

TEST_CASE("reported reads: a read that drained the socket lets the next one wait without a receive first") {
    Pair p;
    CHECK_FALSE(p.stream.watches_peer_close());
    register_close_reports(p);
    // Registering says nothing yet about this read: the next still attempts a receive.
    CHECK(p.stream.attempts_read_first());

    net::write(p.peer, net::buffer(std::string("two")));
    CHECK(read_reported(p).bytes == "two");
    CHECK_FALSE(p.stream.attempts_read_first());

    // (each drained read reported: the one after it waits again)
    check_next_reads(p, [](Pair& q, const std::function<void()>& after_start) { return read_reported(q, true, after_start); },
                     false);
}

TEST_CASE("reported reads: bytes with the close behind them, already reported, still end the connection") {
    Pair p;
    register_close_reports(p);
    // The last bytes and the close arrive and are reported while no read is pending; the
    // read that takes the bytes takes fewer than it asked for, yet the close is still there.
    net::write(p.peer, net::buffer(std::string("last")));
    p.peer.close();
    collect_reports(p);
    const auto r = read_reported(p);
    CHECK(r.bytes == "last");
    CHECK(p.stream.attempts_read_first());
    const auto end = read_reported(p);
    REQUIRE(end.done);  // not waiting for a report that will never come
    CHECK(end.ec == net::error::eof);
}

TEST_CASE("reported reads: a report after the receive keeps the next read's receive") {
    Pair p;
    register_close_reports(p);
    net::write(p.peer, net::buffer(std::string("a")));
    const auto r = read_reported(p, false);
    REQUIRE(r.bytes == "a");
    // More bytes arrive and are reported before the read's result is: they are there.
    net::write(p.peer, net::buffer(std::string("b")));
    collect_reports(p);
    sluice::net::ReadReadiness(p.stream.socket()).read_done(1, 64);
    CHECK(p.stream.attempts_read_first());
    const auto next = read_reported(p);
    REQUIRE(next.done);
    CHECK(next.bytes == "b");
}

TEST_CASE("reported reads: a read that filled its buffer keeps the next read's receive") {
    Pair p;
    register_close_reports(p);
    const std::string many(100, 'x');
    net::write(p.peer, net::buffer(many));
    collect_reports(p);  // reported before the read: no report comes for the rest
    const auto r = read_reported(p);
    REQUIRE(r.bytes.size() == 64);
    CHECK(p.stream.attempts_read_first());
    const auto rest = read_reported(p);
    REQUIRE(rest.done);
    CHECK(rest.bytes == many.substr(64));
}

namespace {

// A server Stream over TLS and a client on the other end, handshaken, with a throwaway
// self-signed P-256 certificate.
struct TlsPair {
    net::io_context io;
    net::ssl::context server_context{net::ssl::context::tls_server};
    net::ssl::context client_context{net::ssl::context::tls_client};
    tcp::acceptor acceptor{io, tcp::endpoint(net::ip::address_v4::loopback(), 0)};
    std::unique_ptr<Stream> stream;
    std::unique_ptr<net::ssl::stream<tcp::socket>> client;

    TlsPair() {
        EVP_PKEY* key = EVP_EC_gen("P-256");
        X509* cert = X509_new();
        X509_set_version(cert, 2);
        ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
        X509_gmtime_adj(X509_getm_notBefore(cert), 0);
        X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
        X509_set_pubkey(cert, key);
        X509_NAME* name = X509_get_subject_name(cert);
        X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("localhost"), -1, -1, 0);
        X509_set_issuer_name(cert, name);
        X509_sign(cert, key, EVP_sha256());
        REQUIRE(SSL_CTX_use_certificate(server_context.native_handle(), cert) == 1);
        REQUIRE(SSL_CTX_use_PrivateKey(server_context.native_handle(), key) == 1);
        X509_free(cert);
        EVP_PKEY_free(key);
        client_context.set_verify_mode(net::ssl::verify_none);

        client = std::make_unique<net::ssl::stream<tcp::socket>>(io, client_context);
        client->next_layer().connect(acceptor.local_endpoint());
        stream = std::make_unique<Stream>(acceptor.accept(), server_context);
        int done = 0;
        stream->tls().async_handshake(net::ssl::stream_base::server, [&](boost::system::error_code ec) {
            REQUIRE_FALSE(ec);
            ++done;
        });
        client->async_handshake(net::ssl::stream_base::client, [&](boost::system::error_code ec) {
            REQUIRE_FALSE(ec);
            ++done;
        });
        io.run_for(std::chrono::seconds(5));
        REQUIRE(done == 2);
    }

    void send(const std::string& text) {
        // A record per write: each is read by one socket receive
        net::write(*client, net::buffer(text));
    }

    ReadResult read(const std::function<void()>& after_start = {}) {
        return run_read(
            io, [&](net::mutable_buffer b, ReadHandler h) { stream->async_read_some(b, std::move(h)); }, after_start,
            [&](boost::system::error_code, std::size_t) { io.stop(); });  // (the client may still wait: its shutdown)
    }
};

}  // namespace

TEST_CASE("TLS: the socket's reads are reported: the next request's waits without a receive first") {
    TlsPair p;
    p.send("one");
    REQUIRE(p.read().bytes == "one");
    CHECK(p.stream->watches_peer_close());  // the handshake's reads registered it
    p.send("two");
    REQUIRE(p.read().bytes == "two");
    CHECK_FALSE(p.stream->attempts_read_first());

    SECTION("a record sent later is read when it comes") {
        const auto r = p.read([&] { p.send("three"); });
        CHECK_FALSE(r.done_at_once);
        REQUIRE(r.done);
        CHECK(r.bytes == "three");
    }
    SECTION("the client's close_notify and close") {
        // close_notify, then (the client's shutdown waits for the server's answer) the close
        p.client->async_shutdown([&](boost::system::error_code) {});
        const auto r = p.read([&] {
            net::steady_timer later(p.io, std::chrono::milliseconds(50));
            later.async_wait([&](boost::system::error_code) { p.client->next_layer().close(); });
            p.io.restart();
            p.io.run_for(std::chrono::milliseconds(100));
        });
        REQUIRE(r.done);
        CHECK(r.ec == net::error::eof);
    }
    SECTION("the last record and the close, reported before the read: the record, then the end") {
        p.send("last");
        p.client->next_layer().close();  // no close_notify: a cut connection
        collect_reports_of(p.io);
        const auto r = p.read();
        CHECK(r.bytes == "last");
        const auto end = p.read();
        REQUIRE(end.done);  // not waiting for a report that will never come
        CHECK(end.ec);
    }
}
