// The body type requests are parsed into (session.cc only: it names Beast types).
//
// Beast's string_body reader grows its string with resize(), which zero-fills, and then
// copies each piece over the zeros: two passes over every body, and publish bodies are
// 64 KiB. This reader appends, so each byte is written once.
#pragma once

#include <cstdint>
#include <string>

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/optional/optional.hpp>

namespace sluice::http_api {

struct RequestBody {
  using value_type = std::string;

  static std::uint64_t size(const value_type& b) { return b.size(); }

  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(boost::beast::http::header<isRequest, Fields>&, value_type& b) : body_(b) {}

    // The parser has already held Content-Length to the body limit.
    void init(const boost::optional<std::uint64_t>& length, boost::beast::error_code& ec) {
      ec = {};
      if (!length) return;
      if (*length > body_.max_size()) {
        ec = boost::beast::http::error::buffer_overflow;
        return;
      }
      body_.reserve(static_cast<std::size_t>(*length));
    }

    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, boost::beast::error_code& ec) {
      ec = {};
      std::size_t n = 0;
      for (auto it = boost::asio::buffer_sequence_begin(buffers); it != boost::asio::buffer_sequence_end(buffers);
           ++it) {
        const boost::asio::const_buffer b = *it;
        if (b.size() > body_.max_size() - body_.size()) {
          ec = boost::beast::http::error::buffer_overflow;
          return n;
        }
        body_.append(static_cast<const char*>(b.data()), b.size());
        n += b.size();
      }
      return n;
    }

    void finish(boost::beast::error_code& ec) { ec = {}; }

   private:
    value_type& body_;
  };
};

}  // namespace sluice::http_api
