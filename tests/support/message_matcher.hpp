// A Catch2 matcher on an exception's message, for CHECK_THROWS_MATCHES(expr, ErrorType, ...):
// checks the type and that the message contains a text (combine with &&).
#pragma once

#include <catch2/catch.hpp>

#include <exception>
#include <string>

namespace gemma4::test {

class MessageHas : public Catch::MatcherBase<std::exception> {
public:
    explicit MessageHas(std::string text) : text_(std::move(text)) {}
    bool match(const std::exception& e) const override { return std::string(e.what()).find(text_) != std::string::npos; }
    std::string describe() const override { return "has a message containing \"" + text_ + "\""; }

private:
    std::string text_;
};

inline MessageHas Has(std::string text) { return MessageHas(std::move(text)); }

}  // namespace gemma4::test
