// Errors of the HTTP API in OpenAI's shape: {"error":{"message","type","param","code"}} with the
// HTTP status that goes with them. Request parsing throws ApiError; the server turns it (and the
// library's own errors) into a response and keeps serving.
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace gemma4::server {

struct ApiError : std::runtime_error {
    int status;
    std::string type;   ///< invalid_request_error, authentication_error, ...
    std::string param;  ///< the request field at fault, or empty
    std::string code;   ///< machine-readable reason, or empty

    ApiError(int status_, std::string message, std::string type_ = "invalid_request_error", std::string param_ = "",
             std::string code_ = "")
        : std::runtime_error(std::move(message)), status(status_), type(std::move(type_)), param(std::move(param_)), code(std::move(code_)) {}
};

/// 400 naming the field: "messages[2].content: expected a string or an array".
inline ApiError bad_field(const std::string& param, const std::string& message) {
    return ApiError(400, param + ": " + message, "invalid_request_error", param);
}

inline nlohmann::json error_body(const std::string& message, const std::string& type, const std::string& param = "",
                                 const std::string& code = "") {
    nlohmann::json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
    if (!param.empty()) e["param"] = param;
    if (!code.empty()) e["code"] = code;
    return {{"error", e}};
}

inline nlohmann::json error_body(const ApiError& e) { return error_body(e.what(), e.type, e.param, e.code); }

/// The OpenAI error type for a status the server produces without an ApiError (routing, limits).
inline std::string error_type_for_status(int status) {
    switch (status) {
        case 401: return "authentication_error";
        case 404: return "not_found_error";
        case 413: return "invalid_request_error";
        case 429: return "rate_limit_error";
        case 503: return "server_unavailable_error";
        default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

}  // namespace gemma4::server
