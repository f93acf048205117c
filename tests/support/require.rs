//! The one way a test skips for want of a tool (Landlock, seccomp, tmux, Neovim, the reference
//! Pi): [`require`]. Under `CI=true` (which `.ci/run` exports) a missing tool FAILS the test,
//! so CI never passes by skipping; elsewhere the test says why it skips and returns.
//! Shared by `pi-e2e` (`pi_e2e::require`) and `pi-core`'s integration tests (included by path).

/// `true` when `available`; otherwise panics under `CI=true`, or prints why `test` skips
/// (`what` is missing) and returns `false`.
#[allow(dead_code, clippy::print_stderr)]
pub fn require(available: bool, test: &str, what: &str) -> bool {
    if available {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0") {
        panic!("{test}: CI=true requires {what}; it is missing (see .ci/run)");
    }
    eprintln!("SKIP {test}: {what} is missing here (CI=true fails instead)");
    false
}
