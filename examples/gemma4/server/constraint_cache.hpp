// The server's compiled grammars, by grammar text: a schema that many requests send is compiled
// once, and its automaton keeps the masks it has computed for the next request (grammar/
// automaton.hpp). Least recently used entries go first; any connection thread may ask.
#pragma once

#include "api_error.hpp"

#include <gemma4/error.hpp>
#include <gemma4/grammar/constraint.hpp>
#include <gemma4/grammar/token_vocabulary.hpp>

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace gemma4::server {

class ConstraintCache {
public:
    ConstraintCache(std::shared_ptr<const TokenVocabulary> vocabulary, std::size_t capacity)
        : vocabulary_(std::move(vocabulary)), capacity_(capacity) {}

    /// The constraint of `gbnf`; a grammar that does not fit the vocabulary (a special token it
    /// does not have) is a 400 naming `param`.
    std::shared_ptr<const Constraint> get(const std::string& gbnf, const std::string& param) {
        {
            std::lock_guard lock(mutex_);
            if (const auto it = index_.find(gbnf); it != index_.end()) {
                order_.splice(order_.begin(), order_, it->second);
                return it->second->second;
            }
        }
        std::shared_ptr<const Constraint> compiled;
        try {
            compiled = Constraint::from_gbnf(gbnf, vocabulary_);
        } catch (const GrammarError& e) {
            throw bad_field(param, e.what());
        }
        std::lock_guard lock(mutex_);
        if (index_.count(gbnf)) return index_[gbnf]->second;  // compiled meanwhile by another request
        order_.emplace_front(gbnf, compiled);
        index_[gbnf] = order_.begin();
        while (order_.size() > capacity_) {
            index_.erase(order_.back().first);
            order_.pop_back();
        }
        return compiled;
    }

    std::size_t size() const {
        std::lock_guard lock(mutex_);
        return order_.size();
    }

private:
    using Entry = std::pair<std::string, std::shared_ptr<const Constraint>>;
    std::shared_ptr<const TokenVocabulary> vocabulary_;
    std::size_t capacity_;
    mutable std::mutex mutex_;
    std::list<Entry> order_;  ///< most recently used first
    std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

}  // namespace gemma4::server
