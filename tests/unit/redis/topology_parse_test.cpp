// What servers and sentinels say about the topology, read strictly (redis/topology_parse).
// Slots are checked against values redis-server's CLUSTER KEYSLOT gives.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <hiredis/hiredis.h>

#include "redis/redis_reply.hpp"
#include "redis/topology_parse.hpp"

using namespace sluice;
using redis::RedisReply;

namespace {

RedisReply integer(std::int64_t n) {
    RedisReply r;
    r.type = RedisReply::Type::integer;
    r.integer = n;
    return r;
}
RedisReply string(std::string s) {
    RedisReply r;
    r.type = RedisReply::Type::string;
    r.text = std::move(s);
    return r;
}
RedisReply array(std::vector<RedisReply> elements) {
    RedisReply r;
    r.type = RedisReply::Type::array;
    r.elements = std::move(elements);
    return r;
}
RedisReply node(std::string host, std::int64_t port) { return array({string(std::move(host)), integer(port), string("id")}); }
RedisReply range(std::int64_t first, std::int64_t last, std::vector<RedisReply> nodes) {
    std::vector<RedisReply> e{integer(first), integer(last)};
    for (auto& n : nodes) e.push_back(std::move(n));
    return array(std::move(e));
}

}  // namespace

TEST_CASE("key_slot: Redis Cluster's CRC16 slot, hash tags included", "[redis][cluster]") {
    // From redis-server 7.0: CLUSTER KEYSLOT.
    CHECK(redis::key_slot("a") == 15495);
    CHECK(redis::key_slot("b") == 3300);
    CHECK(redis::key_slot("f") == 3168);
    CHECK(redis::key_slot("foo") == 12182);
    CHECK(redis::key_slot("123456789") == 12739);  // CRC16/XMODEM check value 0x31C3
    CHECK(redis::key_slot("{x}") == 16287);
    CHECK(redis::key_slot("all:a") == 7614);
    // The tag is the text between the first '{' and the next '}'.
    CHECK(redis::key_slot("sluice:{all:a}:b") == redis::key_slot("all:a"));
    CHECK(redis::key_slot("{user1000}.following") == redis::key_slot("{user1000}.followers"));
    CHECK(redis::key_slot("foo{}{bar}") == redis::key_slot("foo{}{bar}"));
    CHECK(redis::key_slot("foo{}{bar}") != redis::key_slot("bar"));  // empty first tag: the whole key
    CHECK(redis::key_slot("foo{{bar}}zap") == redis::key_slot("{bar"));
    CHECK(redis::key_slot("foo{bar}{zap}") == redis::key_slot("bar"));
    CHECK(redis::key_slot("") == 0);
}

TEST_CASE("split_address and join_address", "[redis][cluster]") {
    std::string host;
    std::uint16_t port = 0;
    REQUIRE(redis::split_address("127.0.0.1:7001", host, port));
    CHECK(host == "127.0.0.1");
    CHECK(port == 7001);
    REQUIRE(redis::split_address("redis-3.internal:6379", host, port));
    CHECK(host == "redis-3.internal");
    REQUIRE(redis::split_address("[::1]:7002", host, port));
    CHECK(host == "::1");
    CHECK(redis::join_address(host, port) == "[::1]:7002");
    REQUIRE(redis::split_address("::1:7002", host, port));  // as Redis writes IPv6 in MOVED
    CHECK(host == "::1");
    CHECK(port == 7002);
    for (const char* bad : {"", ":7001", "127.0.0.1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536",
                            "127.0.0.1:70x", "127.0.0.1:+1", "bad host:1", "a..b:1", "[]:1", "ho\nst:1",
                            "-leading:1"}) {
        INFO(bad);
        CHECK_FALSE(redis::split_address(bad, host, port));
    }
    CHECK_FALSE(redis::split_address(std::string(300, 'a') + ":1", host, port));
}

TEST_CASE("parse_cluster_slots reads a slot map and refuses anything else", "[redis][cluster]") {
    std::vector<redis::SlotRange> ranges;
    std::string error;
    const auto good = array({range(0, 5460, {node("127.0.0.1", 7001), node("127.0.0.1", 7004)}),
                             range(5461, 10922, {node("", 7002)}),
                             range(10923, 16383, {node("10.0.0.3", 7003)})});
    REQUIRE(redis::parse_cluster_slots(good, "127.0.0.9:7009", ranges, error));
    REQUIRE(ranges.size() == 3);
    CHECK(ranges[0].first == 0);
    CHECK(ranges[0].last == 5460);
    CHECK(ranges[0].master == "127.0.0.1:7001");
    CHECK(ranges[0].replicas == std::vector<std::string>{"127.0.0.1:7004"});
    CHECK(ranges[1].master == "127.0.0.9:7002");  // empty host: the node asked
    CHECK(ranges[2].master == "10.0.0.3:7003");
    CHECK(redis::parse_cluster_slots(array({}), "127.0.0.1:1", ranges, error));  // no slots yet
    CHECK(ranges.empty());

    struct Bad {
        RedisReply reply;
        std::string error;
    };
    const std::vector<Bad> bad{
        {string("nope"), "the reply is not an array"},
        {array({integer(1)}), "range 1 is not [first, last, master, replicas...]"},
        {array({range(0, 10, {})}), "range 1 is not [first, last, master, replicas...]"},
        {array({range(5, 4, {node("h", 1)})}), "range 1 has slots outside 0..16383"},
        {array({range(-1, 4, {node("h", 1)})}), "range 1 has slots outside 0..16383"},
        {array({range(0, 16384, {node("h", 1)})}), "range 1 has slots outside 0..16383"},
        {array({range(0, 10, {node("h", 1)}), range(10, 20, {node("h", 2)})}), "slot 10 is in two ranges"},
        {array({range(0, 10, {node("h", 0)})}), "range 1 names no valid master"},
        {array({range(0, 10, {node("h", 70000)})}), "range 1 names no valid master"},
        {array({range(0, 10, {node("bad host", 1)})}), "range 1 names no valid master"},
        {array({range(0, 10, {array({string("h")})})}), "range 1 names no valid master"},
        {array({range(0, 10, {array({integer(1), integer(1)})})}), "range 1 names no valid master"},
    };
    for (const auto& b : bad) {
        CAPTURE(b.error);
        CHECK_FALSE(redis::parse_cluster_slots(b.reply, "127.0.0.1:1", ranges, error));
        CHECK(error == b.error);
    }
    // A bad replica is left out; the range stands.
    REQUIRE(redis::parse_cluster_slots(array({range(0, 1, {node("h", 1), node("bad host", 2)})}), "x:1", ranges, error));
    CHECK(ranges[0].replicas.empty());
}

TEST_CASE("parse_switch_master takes the new address of our master only", "[redis][sentinel]") {
    redis::SwitchMaster to;
    REQUIRE(redis::parse_switch_master("mm 127.0.0.1 7101 127.0.0.1 7102", "mm", to));
    CHECK(to.host == "127.0.0.1");
    CHECK(to.port == 7102);
    REQUIRE(redis::parse_switch_master("mm 10.0.0.1 6379 redis-b.internal 6380", "mm", to));
    CHECK(to.host == "redis-b.internal");
    CHECK_FALSE(redis::parse_switch_master("other 127.0.0.1 7101 127.0.0.1 7102", "mm", to));
    CHECK_FALSE(redis::parse_switch_master("mm 127.0.0.1 7101 127.0.0.1", "mm", to));
    CHECK_FALSE(redis::parse_switch_master("mm 127.0.0.1 7101 127.0.0.1 7102 extra", "mm", to));
    CHECK_FALSE(redis::parse_switch_master("mm 127.0.0.1 7101 127.0.0.1 0", "mm", to));
    CHECK_FALSE(redis::parse_switch_master("mm 127.0.0.1 7101 127.0.0.1 99999", "mm", to));
    CHECK_FALSE(redis::parse_switch_master("mm 127.0.0.1 7101 bad_host! 7102", "mm", to));
    CHECK_FALSE(redis::parse_switch_master("", "mm", to));
    REQUIRE(redis::parse_promoted_replica("slave 127.0.0.1:7102 127.0.0.1 7102 @ mm 127.0.0.1 7101", "mm", to));
    CHECK(to.host == "127.0.0.1");
    CHECK(to.port == 7102);
    CHECK_FALSE(redis::parse_promoted_replica("slave 127.0.0.1:7102 127.0.0.1 7102 @ other 127.0.0.1 7101", "mm", to));
    CHECK_FALSE(redis::parse_promoted_replica("master mm 127.0.0.1 7101", "mm", to));
    CHECK_FALSE(redis::parse_promoted_replica("slave 127.0.0.1:7102 127.0.0.1 0 @ mm 127.0.0.1 7101", "mm", to));
    CHECK_FALSE(redis::parse_promoted_replica("slave 127.0.0.1:7102 127.0.0.1 7102 @ mm 127.0.0.1 7101 x", "mm", to));
    CHECK(redis::is_about_master("master mm 127.0.0.1 7101", "mm"));
    CHECK(redis::is_about_master("master mm 127.0.0.1 7101 12", "mm"));
    CHECK_FALSE(redis::is_about_master("master other 127.0.0.1 7101", "mm"));
    CHECK_FALSE(redis::is_about_master("slave 127.0.0.1:7102 127.0.0.1 7102 @ mm 127.0.0.1 7101", "mm"));
    std::uint16_t port = 0;
    CHECK(redis::parse_port("6379", port));
    CHECK(port == 6379);
    for (const char* bad : {"", "0", "65536", "-1", "+1", "1 ", "123456", "6e3"}) {
        INFO(bad);
        CHECK_FALSE(redis::parse_port(bad, port));
    }
}

TEST_CASE("bounded hiredis replies: the same bound on arrays, plain redisReply objects", "[redis]") {
    ::redisReader* reader = redisReaderCreate();
    redis::build_bounded_hiredis_replies(*reader);
    const std::string ok = "*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n$5\r\nmm 1 \r\n:5\r\n";
    REQUIRE(redisReaderFeed(reader, ok.data(), ok.size()) == REDIS_OK);
    void* reply = nullptr;
    REQUIRE(redisReaderGetReply(reader, &reply) == REDIS_OK);
    REQUIRE(reply != nullptr);
    auto* r = static_cast<::redisReply*>(reply);
    REQUIRE(r->type == REDIS_REPLY_ARRAY);
    REQUIRE(r->elements == 3);
    CHECK(std::string(r->element[1]->str, r->element[1]->len) == "+switch-master");
    CHECK(r->element[2]->str[r->element[2]->len] == '\0');
    const auto copied = redis::copy_reply(*r);
    REQUIRE(copied.ok());
    CHECK(copied.reply.elements[0].text == "message");
    freeReplyObject(reply);
    REQUIRE(redisReaderGetReply(reader, &reply) == REDIS_OK);
    CHECK(static_cast<::redisReply*>(reply)->integer == 5);
    freeReplyObject(reply);
    redisReaderFree(reader);

    reader = redisReaderCreate();
    redis::build_bounded_hiredis_replies(*reader);
    const std::string huge = "*20000000\r\n";
    REQUIRE(redisReaderFeed(reader, huge.data(), huge.size()) == REDIS_OK);
    CHECK(redisReaderGetReply(reader, &reply) == REDIS_ERR);
    redisReaderFree(reader);
}
