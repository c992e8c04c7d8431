// Clang thread-safety annotations (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html) for the
// allocator's lock rules. Clang checks them with -Wthread-safety (cmake/MemcommWarnings.cmake turns it
// on for clang); on other compilers every macro expands to nothing.
//
// Note [Annotated lock rules]
// The allocator's rules were comments ("called with mu held", "locks mu itself"); a missed lock showed
// up, if at all, as a TSan report in CI. As annotations the compiler checks every call: state under the
// lock is GUARDED_BY(mu), helpers that need the lock say REQUIRES(mu), and the slow-path steps that make
// source calls and take the lock themselves say EXCLUDES(mu). libstdc++'s std::mutex and
// std::lock_guard carry no annotations, so the allocator locks through AllocatorMutex (a CAPABILITY)
// and AllocatorLock (SCOPED_CAPABILITY) instead.
#pragma once

#if defined(__clang__)
#define MEMCOMM_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define MEMCOMM_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) MEMCOMM_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY MEMCOMM_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) MEMCOMM_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) MEMCOMM_THREAD_ANNOTATION(pt_guarded_by(x))
#define REQUIRES(...) MEMCOMM_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) MEMCOMM_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) MEMCOMM_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) MEMCOMM_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) MEMCOMM_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS MEMCOMM_THREAD_ANNOTATION(no_thread_safety_analysis)
