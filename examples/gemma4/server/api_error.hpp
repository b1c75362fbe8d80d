// Errors of the HTTP API in OpenAI's shape, {"error":{"message","type","param","code"}}, or on
// Anthropic's routes in Anthropic's, {"type":"error","error":{"type","message"}}, with the HTTP
// status that goes with them. Request parsing throws ApiError; the server turns it (and the
// library's own errors) into a response and keeps serving.
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>
#include <string_view>

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

/// The error type Anthropic's API gives a status (its `message` names the parameter at fault).
inline std::string anthropic_error_type(int status) {
    switch (status) {
        case 400: return "invalid_request_error";
        case 401: return "authentication_error";
        case 403: return "permission_error";
        case 404: return "not_found_error";
        case 413: return "request_too_large";
        case 429: return "rate_limit_error";
        case 503: return "overloaded_error";
        default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

inline nlohmann::json anthropic_error_body(int status, const std::string& message) {
    return {{"type", "error"}, {"error", {{"type", anthropic_error_type(status)}, {"message", message}}}};
}

/// Which API's error shape a response takes: Anthropic's on its routes, OpenAI's elsewhere.
enum class ErrorShape { OpenAI, Anthropic };

inline ErrorShape error_shape_for_path(std::string_view path) {
    return path == "/v1/messages" || path.starts_with("/v1/messages/") ? ErrorShape::Anthropic : ErrorShape::OpenAI;
}

inline nlohmann::json error_body(const ApiError& e, ErrorShape shape) {
    return shape == ErrorShape::Anthropic ? anthropic_error_body(e.status, e.what()) : error_body(e);
}

}  // namespace gemma4::server
