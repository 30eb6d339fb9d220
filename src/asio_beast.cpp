// The one translation unit that compiles Asio (with its OpenSSL layer) and Beast (separate
// compilation).
#include <boost/asio/impl/src.hpp>
#include <boost/asio/ssl/impl/src.hpp>
#include <boost/beast/src.hpp>
