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
    prefix_name(FENCED_TOKEN_PREFIX, name)
}

/// The prefix of [`fenced_token_key`].
pub(crate) const FENCED_TOKEN_PREFIX: &str = "redisson_lock_token";

// The names of the other primitives (protocol §1.1). Each is used by its primitive's file.

/// The fair lock's queue of waiting fields: `redisson_lock_queue:` + T(N) (§4.1).
pub(crate) fn fair_queue_key(name: &str) -> String {
    prefix_name("redisson_lock_queue", name)
}

/// The fair lock's sorted set of waiter deadlines: `redisson_lock_timeout:` + T(N) (§4.1).
pub(crate) fn fair_timeout_key(name: &str) -> String {
    prefix_name("redisson_lock_timeout", name)
}

/// A fair-lock waiter's own channel: the lock channel + `:` + its field (§4.1).
pub(crate) fn fair_waiter_channel(name: &str, field: &str) -> String {
    format!("{}:{field}", lock_channel(name))
}

/// The read-write lock's channel, shared by both sides: `redisson_rwlock:` + T(N) (§5.1).
pub(crate) fn rwlock_channel(name: &str) -> String {
    prefix_name(RWLOCK_CHANNEL_PREFIX, name)
}

/// The prefix of [`rwlock_channel`].
pub(crate) const RWLOCK_CHANNEL_PREFIX: &str = "redisson_rwlock";

/// The prefix of a read holder's per-hold timeout keys, TP(F) = T(N) + `:` + F +
/// `:rwlock_timeout`; hold k's key is TP(F) + `:` + k (§5.1).
pub(crate) fn read_timeout_prefix(name: &str, field: &str) -> String {
    suffix_name(name, &format!("{field}:rwlock_timeout"))
}

/// The semaphore's channel (also the permit-expirable semaphore's): `redisson_sc:` + T(N)
/// (§10.1).
pub(crate) fn semaphore_channel(name: &str) -> String {
    prefix_name(SEMAPHORE_CHANNEL_PREFIX, name)
}

/// The prefix of [`semaphore_channel`].
pub(crate) const SEMAPHORE_CHANNEL_PREFIX: &str = "redisson_sc";

/// The permit-expirable semaphore's sorted set of permit ids: T(N) + `:timeout` (§11).
pub(crate) fn permit_timeout_key(name: &str) -> String {
    suffix_name(name, "timeout")
}

/// The count-down latch's channel: `redisson_countdownlatch__channel__{` + N + `}`, with braces
/// whatever the name holds (§12.1).
pub(crate) fn latch_channel(name: &str) -> String {
    format!("{LATCH_CHANNEL_PREFIX}{{{name}}}")
}

/// The prefix of [`latch_channel`].
pub(crate) const LATCH_CHANNEL_PREFIX: &str = "redisson_countdownlatch__channel__";

/// The hash of a ferrisson client's wait-for edges: `ferrisson_waits:{<client uuid>}`, one
/// field per wait (`wait_for.rs`). Tagged by the uuid, so that in a cluster each client's
/// edges are one key in one slot. Redisson never reads it.
pub(crate) fn wait_edges_key(client_id: &str) -> String {
    format!("{WAIT_EDGES_PREFIX}:{{{client_id}}}")
}

/// The prefix of [`wait_edges_key`], which a scan for every client's edges matches.
pub(crate) const WAIT_EDGES_PREFIX: &str = "ferrisson_waits";

/// The client uuid of a [`wait_edges_key`]; `None` for another key.
pub(crate) fn wait_edges_client(key: &str) -> Option<&str> {
    key.strip_prefix(WAIT_EDGES_PREFIX)?
        .strip_prefix(":{")?
        .strip_suffix('}')
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_other_primitives_names_follow_the_catalogue() {
        // protocol §1.1, with its examples for `myLock`, `{order}:42` and `job`.
        assert_eq!(fair_queue_key("myLock"), "redisson_lock_queue:{myLock}");
        assert_eq!(fair_timeout_key("myLock"), "redisson_lock_timeout:{myLock}");
        assert_eq!(
            fair_waiter_channel("myLock", "id:7"),
            "redisson_lock__channel:{myLock}:id:7"
        );
        assert_eq!(rwlock_channel("myLock"), "redisson_rwlock:{myLock}");
        assert_eq!(
            read_timeout_prefix("myLock", "4b8f:57"),
            "{myLock}:4b8f:57:rwlock_timeout"
        );
        assert_eq!(
            read_timeout_prefix("{order}:42", "4b8f:57"),
            "{order}:42:4b8f:57:rwlock_timeout"
        );
        assert_eq!(semaphore_channel("sem"), "redisson_sc:{sem}");
        assert_eq!(permit_timeout_key("sem"), "{sem}:timeout");
        assert_eq!(
            latch_channel("job"),
            "redisson_countdownlatch__channel__{job}"
        );
        // Braces are added even when the name has them.
        assert_eq!(
            latch_channel("{job}"),
            "redisson_countdownlatch__channel__{{job}}"
        );
    }

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
