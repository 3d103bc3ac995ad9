# Writes OUT, a C++ file defining sluice::http_api::openapi_document() from IN.
file(READ ${IN} doc)
file(WRITE ${OUT} "// Generated from docs/openapi.yaml by embed_openapi.cmake. Do not edit.\n"
  "#include <string_view>\n"
  "namespace sluice::http_api {\n"
  "std::string_view openapi_document() {\n"
  "  static constexpr std::string_view doc = R\"SLUICE_OPENAPI(${doc})SLUICE_OPENAPI\";\n"
  "  return doc;\n"
  "}\n"
  "}  // namespace sluice::http_api\n")
