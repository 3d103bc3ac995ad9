// RFC 9457 problem details for every error response:
//   Content-Type: application/problem+json
//   {"type":"https://sluice.dev/errors/<code>","title":<short>,"status":<int>,
//    "code":"<errc_name>","detail":<message>}
// The status comes from sluice::http_status, the code from sluice::errc_name.
#pragma once

#include <string_view>

#include "http_types.h"
#include "sluice/error.h"

namespace sluice::http_api {

inline constexpr std::string_view kProblemJson = "application/problem+json";

HttpResponse problem(const Error& e);
// For statuses with no Errc (405 method_not_allowed): explicit code/status/title.
HttpResponse problem(int status, std::string_view code, std::string_view title,
                     std::string_view detail);

}  // namespace sluice::http_api
