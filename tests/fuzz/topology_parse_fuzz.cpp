// libFuzzer target: what Redis nodes and sentinels say about the topology.
// Sources: src/redis/topology_parse.cpp src/redis/redis_reply.cpp src/config/endpoint.cpp ...
//
// The input's first byte picks the reader; the rest is RESP from a "node". Every reply is
// read as a CLUSTER SLOTS answer (the slot map must then be consistent: no slot twice,
// every range inside 0..16383, every master an address that splits and joins back to
// itself), and its strings as +switch-master messages, MOVED addresses and keys.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <hiredis/hiredis.h>

#include "redis/redis_reply.hpp"
#include "redis/topology_parse.hpp"

namespace {

using sluice::redis::RedisReply;

void check_strings(const RedisReply& reply, int depth) {
    if (depth > 4) return;
    if (reply.type == RedisReply::Type::string || reply.type == RedisReply::Type::status) {
        sluice::redis::SwitchMaster to;
        if (sluice::redis::parse_switch_master(reply.text, "mm", to)) {
            if (to.port == 0 || !sluice::redis::acceptable_host(to.host)) std::abort();
        }
        if (sluice::redis::parse_promoted_replica(reply.text, "mm", to)) {
            if (to.port == 0 || !sluice::redis::acceptable_host(to.host)) std::abort();
        }
        (void)sluice::redis::is_about_master(reply.text, "mm");
        std::string host;
        std::uint16_t port = 0;
        if (sluice::redis::split_address(reply.text, host, port)) {
            std::string again;
            std::uint16_t again_port = 0;
            if (!sluice::redis::split_address(sluice::redis::join_address(host, port), again, again_port) ||
                again != host || again_port != port)
                std::abort();
        }
        if (sluice::redis::key_slot(reply.text) >= sluice::redis::cluster_slots) std::abort();
    }
    for (const auto& e : reply.elements) check_strings(e, depth + 1);
}

void check(const RedisReply& reply) {
    std::vector<sluice::redis::SlotRange> ranges;
    std::string error;
    if (sluice::redis::parse_cluster_slots(reply, "127.0.0.1:7000", ranges, error)) {
        std::vector<bool> seen(sluice::redis::cluster_slots, false);
        for (const auto& r : ranges) {
            if (r.first > r.last || r.last >= sluice::redis::cluster_slots) std::abort();
            for (std::size_t s = r.first; s <= r.last; ++s) {
                if (seen[s]) std::abort();
                seen[s] = true;
            }
            std::string host;
            std::uint16_t port = 0;
            if (!sluice::redis::split_address(r.master, host, port)) std::abort();
        }
    } else if (error.empty()) {
        std::abort();
    }
    check_strings(reply, 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    const bool plain = data[0] & 1;  // the Sentinel watcher's reader, or the connection's
    redisReader* reader = redisReaderCreate();
    if (plain)
        sluice::redis::build_bounded_hiredis_replies(*reader);
    else
        sluice::redis::build_owned_replies(*reader);
    if (redisReaderFeed(reader, reinterpret_cast<const char*>(data) + 1, size - 1) == REDIS_OK) {
        while (true) {
            void* reply = nullptr;
            if (redisReaderGetReply(reader, &reply) != REDIS_OK || reply == nullptr) break;
            if (plain) {
                auto result = sluice::redis::copy_reply(*static_cast<::redisReply*>(reply));
                if (result.ok()) check(result.reply);
                freeReplyObject(reply);
            } else {
                auto result = sluice::redis::take_reply(reply);
                if (result.ok()) check(result.reply);
                reader->fn->freeObject(reply);
            }
        }
    }
    redisReaderFree(reader);
    return 0;
}
