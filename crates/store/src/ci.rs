//! Whether the tests run in CI, where a missing service fails a test instead of skipping it.
//!
//! One definition for every test crate of the workspace (the store's contract suite, the
//! backends' own tests, the end-to-end tests of the binary): the environment variable `CI`
//! set to anything but empty, `0` or `false` (in any case) counts as CI. CI services set
//! `CI=true`, some `CI=1`; both must make the PostgreSQL, Redis and nginx tests mandatory.

use std::ffi::OsStr;

/// Whether the environment variable `CI` says the tests run in CI: set, and neither empty,
/// `0` nor `false` (in any case, surrounding spaces ignored).
///
/// Tests that need an outside service (PostgreSQL, Redis, nginx, `redis-server`) skip with a
/// printed reason when it is missing, unless this is true: then they fail.
pub fn in_ci() -> bool {
    means_ci(std::env::var_os("CI").as_deref())
}

/// `in_ci` on a given value of `CI` (`None`: unset).
fn means_ci(value: Option<&OsStr>) -> bool {
    let Some(value) = value else { return false };
    let value = value.to_string_lossy();
    let value = value.trim();
    !(value.is_empty() || value == "0" || value.eq_ignore_ascii_case("false"))
}

#[cfg(test)]
mod tests {
    use super::means_ci;
    use std::ffi::OsStr;

    fn ci(value: &str) -> bool {
        means_ci(Some(OsStr::new(value)))
    }

    #[test]
    fn ci_1_and_ci_true_both_count_as_ci() {
        assert!(ci("1"), "CI=1 must count as CI");
        assert!(ci("true"));
        assert!(ci("TRUE"));
        assert!(ci("yes"));
        assert!(ci("woodpecker"));
    }

    #[test]
    fn ci_unset_empty_0_or_false_is_not_ci() {
        assert!(!means_ci(None));
        assert!(!ci(""));
        assert!(!ci(" "));
        assert!(!ci("0"));
        assert!(!ci("false"));
        assert!(!ci("False"));
    }
}
