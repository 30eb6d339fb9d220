// What a listener does when accept() fails. A failure that says the process or the system ran
// out of something (descriptors above all: EMFILE at `ulimit -n`) fails again at once until a
// connection closes; accepting again immediately spun every worker at a full core and wrote
// millions of log lines a second. Such a listener pauses instead (nginx stops accepting for a
// while too) and the warning is written at most once a second for the whole process.
#pragma once

#include <chrono>
#include <string_view>

#include <boost/system/error_code.hpp>

namespace sluice::net {

// Long enough that a spinning loop costs nothing, short enough that connections waiting in
// the listen backlog are taken soon after a descriptor frees.
inline constexpr std::chrono::milliseconds accept_pause{100};

// Whether `ec` (from accept) means a resource ran out: accept again only after accept_pause.
// Other failures (a connection reset before it was taken) concern one connection only.
bool accept_exhausted(const boost::system::error_code& ec);

// Logs "WHERE: accept failed: ..." as a warning, at most once a second across the process,
// with how many failures were not logged since.
void warn_accept_failed(std::string_view where, const boost::system::error_code& ec);

// Raises the soft limit on open descriptors to the hard one (as Go's runtime does: the soft
// default, 1024 on most systems, is far below max_connections) and warns when even the hard
// limit is below `connections`, the client connections allowed. Returns the soft limit now
// (0 when unlimited or unknown).
unsigned long raise_descriptor_limit(std::size_t connections);

}  // namespace sluice::net
