//! Redisson's naming rules: the hash-tag form of a name and the keys and channels built from it
//! (protocol §0.2, §1.1). Pure functions, so that every primitive derives names one way.

/// The tagged form T(N): the name itself when it contains `{` anywhere, otherwise `{N}`.
///
/// Only the character `{` is tested, exactly as Redisson does, so that Rust and Java derive the
/// same auxiliary names even for names whose braces do not form a valid hash tag.
pub(crate) fn tagged(name: &str) -> String {
    tagged_parts(name).concat()
}

/// The pieces of [`tagged`]: the braces to put around the name, empty when it has one already.
fn tagged_parts(name: &str) -> [&str; 3] {
    if name.contains('{') {
        ["", name, ""]
    } else {
        ["{", name, "}"]
    }
}

/// `prefix + ":" + T(name)`, Redisson's `prefixName`.
pub(crate) fn prefix_name(prefix: &str, name: &str) -> String {
    prefix_name_parts(prefix, name).concat()
}

/// The pieces of [`prefix_name`] in order, for writers that append them to a buffer.
pub(crate) fn prefix_name_parts<'a>(prefix: &'a str, name: &'a str) -> [&'a str; 5] {
    let [open, name, close] = tagged_parts(name);
    [prefix, ":", open, name, close]
}

/// `T(name) + ":" + suffix`, Redisson's `suffixName`.
#[allow(dead_code)] // used by the read-write and semaphore primitives
pub(crate) fn suffix_name(name: &str, suffix: &str) -> String {
    format!("{}:{suffix}", tagged(name))
}

/// The channel on which a reentrant lock's full release is announced.
pub(crate) fn lock_channel(name: &str) -> String {
    prefix_name(LOCK_CHANNEL_PREFIX, name)
}

/// The prefix of [`lock_channel`].
pub(crate) const LOCK_CHANNEL_PREFIX: &str = "redisson_lock__channel";

/// The fenced lock's token counter: `redisson_lock_token:` + T(N) (protocol §7).
pub(crate) fn fenced_token_key(name: &str) -> String {
    prefix_name("redisson_lock_token", name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_wrapped_in_braces() {
        assert_eq!(tagged("myLock"), "{myLock}");
        assert_eq!(lock_channel("myLock"), "redisson_lock__channel:{myLock}");
        assert_eq!(fenced_token_key("myLock"), "redisson_lock_token:{myLock}");
        assert_eq!(
            suffix_name("res", "x:rwlock_timeout"),
            "{res}:x:rwlock_timeout"
        );
    }

    #[test]
    fn names_with_an_opening_brace_are_used_as_is() {
        assert_eq!(tagged("{order}:42"), "{order}:42");
        assert_eq!(
            lock_channel("{order}:42"),
            "redisson_lock__channel:{order}:42"
        );
        assert_eq!(
            fenced_token_key("{order}:42"),
            "redisson_lock_token:{order}:42"
        );
        // Any `{` counts, even when it does not start a valid tag (protocol §15.1 edge cases).
        assert_eq!(tagged("a{b"), "a{b");
        assert_eq!(tagged("x{}y"), "x{}y");
    }

    #[test]
    fn a_closing_brace_alone_does_not_count() {
        assert_eq!(tagged("a}b"), "{a}b}");
    }
}
