// FunctionRef: a non-owning reference to a callable, for parameters called only during the call
// (the thread pool's regions). Unlike std::function it never allocates: a lambda that captures
// more than a pointer or two would make std::function allocate on every parallel region.
#pragma once

#include <gemma4/abi.hpp>

#include <memory>
#include <type_traits>
#include <utility>

namespace gemma4 {
inline namespace GEMMA4_ABI {
namespace detail {

template <class Signature>
class FunctionRef;

template <class R, class... Args>
class FunctionRef<R(Args...)> {
public:
    /// Refers to `f`, which must outlive every call through this reference.
    template <class F>
        requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> && std::is_invocable_r_v<R, F&, Args...>)
    FunctionRef(F&& f) noexcept  // NOLINT(google-explicit-constructor): converts at the call site, as a callable parameter
        : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
          call_([](void* object, Args... args) -> R {
              return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
          }) {}

    R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

private:
    void* object_;
    R (*call_)(void*, Args...);
};

}  // namespace detail
}  // namespace GEMMA4_ABI
}  // namespace gemma4
