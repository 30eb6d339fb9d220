// UpstreamPool with real loopback connections: what it keeps, what it closes and when.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

#include "http/upstream_connection.hpp"
#include "http/upstream_pool.hpp"

using namespace std::chrono_literals;
using boost::asio::ip::tcp;
using sluice::http::UpstreamConnection;
using sluice::http::UpstreamPool;

namespace {

struct Loopback {
    boost::asio::io_context io;
    tcp::acceptor acceptor{io, tcp::endpoint(boost::asio::ip::address_v4::loopback(), 0)};
    std::vector<tcp::socket> peers;  // the server side of every connection, in order

    std::unique_ptr<UpstreamConnection> connect() {
        auto conn = std::make_unique<UpstreamConnection>(io.get_executor());
        conn->stream.socket().connect(acceptor.local_endpoint());
        peers.push_back(acceptor.accept());
        conn->key = "127.0.0.1:" + std::to_string(acceptor.local_endpoint().port());
        return conn;
    }

    // The proxy side of peer `i` was closed: the server side reads end of stream.
    bool closed_by_proxy(std::size_t i) {
        char byte;
        boost::system::error_code ec;
        peers[i].non_blocking(false);
        peers[i].read_some(boost::asio::buffer(&byte, 1), ec);
        return ec == boost::asio::error::eof;
    }

    // As closed_by_proxy, for a connection closed with unread bytes (the kernel resets it).
    bool reset_by_proxy(std::size_t i) {
        char byte;
        boost::system::error_code ec;
        peers[i].non_blocking(false);
        peers[i].read_some(boost::asio::buffer(&byte, 1), ec);
        return ec == boost::asio::error::connection_reset;
    }
};

}  // namespace

TEST_CASE("upstream pool: surplus beyond max_idle waits for reuse, then goes oldest first") {
    Loopback net;
    UpstreamPool pool(net.io.get_executor(), 50ms);
    std::vector<UpstreamConnection*> conns;
    for (int i = 0; i < 4; ++i) {
        auto conn = net.connect();
        conns.push_back(conn.get());
        pool.put(std::move(conn), 2);
    }
    CHECK(pool.idle_count() == 4);  // two over max_idle, kept for now
    const auto key = conns[0]->key;

    SECTION("taken again before the surplus idle time: all of them, newest first") {
        std::vector<std::unique_ptr<UpstreamConnection>> taken;
        for (int i = 3; i >= 0; --i) {
            taken.push_back(pool.take(key));
            REQUIRE(taken.back());
            CHECK(taken.back().get() == conns[i]);
        }
        net.io.run();  // the trim finds nothing to do
        CHECK(pool.idle_count() == 0);
    }
    SECTION("left idle: the two oldest are closed, the newest max_idle stay") {
        net.io.run();  // returns once the trim has run and nothing is surplus
        CHECK(pool.idle_count() == 2);
        CHECK(net.closed_by_proxy(0));
        CHECK(net.closed_by_proxy(1));
        auto newest = pool.take(key);
        auto next = pool.take(key);
        CHECK(newest.get() == conns[3]);
        CHECK(next.get() == conns[2]);
        CHECK_FALSE(pool.take(key));
    }
}

TEST_CASE("upstream pool: a connection with unsolicited bytes on it is closed, never handed out") {
    Loopback net;
    UpstreamPool pool(net.io.get_executor(), 10min);
    auto conn = net.connect();
    const auto key = conn->key;
    pool.put(std::move(conn), 4);
    pool.put(net.connect(), 4);
    // The newest one's server sends bytes after its response (a body to a HEAD, say).
    boost::asio::write(net.peers[1], boost::asio::buffer("stray", 5));
    std::this_thread::sleep_for(20ms);
    auto taken = pool.take(key);
    REQUIRE(taken);
    CHECK(taken->stream.socket().local_endpoint() == net.peers[0].remote_endpoint());
    CHECK(net.reset_by_proxy(1));
    CHECK_FALSE(pool.take(key));
}

TEST_CASE("upstream pool: shut closes everything, keeps nothing more and leaves no timer") {
    Loopback net;
    UpstreamPool pool(net.io.get_executor(), 10min);
    for (int i = 0; i < 3; ++i) pool.put(net.connect(), 1);  // surplus: the trim timer is armed
    pool.shut();
    CHECK(pool.idle_count() == 0);
    CHECK(net.closed_by_proxy(0));
    CHECK(net.closed_by_proxy(2));
    // A stopping worker's io_context must run out of work: no trim left pending.
    net.io.poll();
    net.io.poll();
    CHECK(net.io.stopped());

    pool.put(net.connect(), 5);  // a session finishing after the stop gives its connection back
    CHECK(pool.idle_count() == 0);
    CHECK(net.closed_by_proxy(3));
}
