//! Who holds a lock: the `threadId` half of Redisson's holder field `<client uuid>:<threadId>`.

use arcstr::ArcStr;
use std::cell::RefCell;
use std::fmt;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// Identity spaces, so that task ids, thread ids and explicit owners never collide. All stay
/// below 2^63 so that the decimal id is also a valid positive Java `long`.
const THREAD_SPACE: u64 = 1 << 62;
const EXPLICIT_SPACE: u64 = 1 << 61;

static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);
static NEXT_EXPLICIT: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD_OWNER: u64 = THREAD_SPACE | NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

/// The identity that holds a lock, Redisson's `threadId`.
///
/// A lock is reentrant per owner: the same owner may take it again and must release it as many
/// times. There are two kinds of owner:
///
/// * **implicit** ([`Owner::current`]): the current tokio task, or the OS thread outside a task.
///   Nested acquisitions inside one task re-enter, as on a Java thread, even when the task moves
///   between worker threads.
/// * **explicit** ([`Owner::new`]): a fresh identity you pass around, for work that spans tasks
///   or runs concurrent branches inside one task (see the crate docs on `join!`/`select!`).
///
/// On the wire the holder field is always `<client uuid>:<decimal id>`, so Java sees an ordinary
/// holder.
///
/// ```
/// use ferrisson::Owner;
///
/// let a = Owner::new();
/// let b = Owner::new();
/// assert_ne!(a, b);
/// assert_eq!(Owner::current(), Owner::current());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Owner(NonZeroU64);

impl Owner {
    /// A new explicit owner, distinct from every other owner in this process.
    ///
    /// ```
    /// assert_ne!(ferrisson::Owner::new(), ferrisson::Owner::current());
    /// ```
    #[allow(clippy::new_without_default)] // a default would suggest a shared value; each call is unique
    pub fn new() -> Owner {
        Owner::of(EXPLICIT_SPACE | NEXT_EXPLICIT.fetch_add(1, Ordering::Relaxed))
    }

    /// The owner whose id is `id`: Redisson's explicit `threadId` argument (`lockAsync(leaseTime,
    /// unit, threadId)`, `unlockAsync(threadId)`, `isHeldByThread(threadId)`), to act for an
    /// owner whose [`id`](Owner::id) was recorded elsewhere.
    ///
    /// The holder field is still `<this client's uuid>:<id>`, as with Redisson: the same id from
    /// another client is another holder. Ids this process hands out ([`Owner::new`],
    /// [`Owner::current`]) lie in disjoint ranges, so an id of your own numbering (a small
    /// number, say) never collides with them by accident.
    ///
    /// Fails with [`Error::InvalidArgument`] for 0 or an id above `i64::MAX`: Java peers read the
    /// id as a positive `long`.
    ///
    /// ```
    /// use ferrisson::Owner;
    ///
    /// let worker = Owner::from_id(42)?;
    /// assert_eq!(worker.id(), 42);
    /// assert_eq!(Owner::from_id(worker.id())?, worker);
    /// assert!(Owner::from_id(0).is_err());
    /// assert!(Owner::from_id(1 << 63).is_err());
    /// # Ok::<(), ferrisson::Error>(())
    /// ```
    pub fn from_id(id: u64) -> Result<Owner> {
        if id == 0 || id > i64::MAX as u64 {
            return Err(Error::InvalidArgument(format!(
                "owner id {id} is not a positive Java long (1..={})",
                i64::MAX
            )));
        }
        Ok(Owner::of(id))
    }

    /// The implicit owner: the current tokio task, or the current OS thread outside a task.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let outer = ferrisson::Owner::current();
    /// let inner = tokio::spawn(async { ferrisson::Owner::current() }).await.unwrap();
    /// assert_ne!(outer, inner);
    /// # }
    /// ```
    pub fn current() -> Owner {
        match tokio::task::try_id() {
            Some(task) => Owner::of(task_number(task)),
            None => Owner::current_thread(),
        }
    }

    /// The current OS thread as owner, even inside a tokio task: the identity of the
    /// [`blocking`](crate::blocking) API, exactly Java's thread model.
    pub(crate) fn current_thread() -> Owner {
        Owner::of(THREAD_OWNER.with(|id| *id))
    }

    /// The numeric id, as it appears after the client uuid in the holder field.
    ///
    /// ```
    /// let owner = ferrisson::Owner::new();
    /// assert!(owner.id() < (1 << 63));
    /// ```
    pub fn id(&self) -> u64 {
        self.0.get()
    }

    /// The owner of a nonzero `id`: every id handed out or accepted is (a space bit, a task
    /// number from 1, or `from_id`'s check). Nonzero, so that an `Option<Owner>`, which every
    /// handle and guard keeps, is 8 bytes rather than 16.
    fn of(id: u64) -> Owner {
        Owner(NonZeroU64::new(id).unwrap_or(NonZeroU64::MIN))
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.0.get() & THREAD_SPACE != 0 {
            "thread"
        } else if self.0.get() & EXPLICIT_SPACE != 0 {
            "explicit"
        } else {
            "task"
        };
        write!(f, "Owner({kind} {})", self.0.get())
    }
}

/// Tokio documents task ids as unique numbers and prints them in decimal; read that number
/// without allocating.
fn task_number(task: tokio::task::Id) -> u64 {
    let number = on_stack(format_args!("{task}"), |text| text.parse().ok()).flatten();
    match number.filter(|number| *number < EXPLICIT_SPACE) {
        Some(number) => number,
        None => {
            // Never seen in practice; hash into the task space rather than fail.
            use std::hash::{Hash, Hasher};
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            task.hash(&mut hasher);
            hasher.finish() % EXPLICIT_SPACE
        }
    }
}

thread_local! {
    /// The last holder field built on this thread, by owner id: an owner's holds share one
    /// allocation, on the acquire and release paths and in the lease table.
    static LAST_FIELD: RefCell<Option<(u64, ArcStr)>> = const { RefCell::new(None) };
}

/// The holder field `<client uuid>:<owner id>`: the one this thread built last when it matches,
/// otherwise built in place (one allocation, no formatted `String` copied into an `Arc`).
pub(crate) fn holder_field(client_id: &str, owner: Owner) -> ArcStr {
    LAST_FIELD.with(|last| {
        let mut last = last.borrow_mut();
        if let Some((id, field)) = &*last {
            // Same owner id, so the field ends in ":<that id>"; same length and prefix, so the
            // client id before it is this one.
            if *id == owner.id()
                && field.len() == client_id.len() + 1 + digit_count(owner.id())
                && field.starts_with(client_id)
            {
                return ArcStr::clone(field);
            }
        }
        let field = build_holder_field(client_id, owner);
        *last = Some((owner.id(), ArcStr::clone(&field)));
        field
    })
}

/// Decimal digits of `value`.
fn digit_count(value: u64) -> usize {
    value.checked_ilog10().map_or(1, |log| log as usize + 1)
}

fn build_holder_field(client_id: &str, owner: Owner) -> ArcStr {
    let mut digits = itoa::Buffer::new();
    let id = digits.format(owner.id());
    on_stack(format_args!("{client_id}:{id}"), |field| {
        ArcStr::from(field)
    })
    .unwrap_or_else(|| ArcStr::from(format!("{client_id}:{id}"))) // a client id longer than a uuid
}

/// `with` the text of `args`, formatted in a buffer on the stack; `None` if it takes more than
/// 96 bytes.
fn on_stack<T>(args: std::fmt::Arguments<'_>, with: impl FnOnce(&str) -> T) -> Option<T> {
    use std::io::Write as _;
    let mut buf = [0u8; 96];
    let mut rest = &mut buf[..];
    rest.write_fmt(args).ok()?;
    let len = 96 - rest.len();
    std::str::from_utf8(&buf[..len]).ok().map(with)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_get_distinct_owners_outside_tasks() {
        let here = Owner::current();
        let there = std::thread::spawn(Owner::current).join().expect("thread");
        assert_ne!(here, there);
        assert_eq!(here, Owner::current());
        assert!(format!("{here:?}").contains("thread"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_task_keeps_its_owner_across_awaits() {
        let (before, after) = tokio::spawn(async {
            let before = Owner::current();
            for _ in 0..100 {
                tokio::task::yield_now().await;
            }
            (before, Owner::current())
        })
        .await
        .expect("task");
        assert_eq!(before, after);
        assert!(
            before.id() < EXPLICIT_SPACE,
            "a task id, not a thread id: {before:?}"
        );
    }

    #[test]
    fn field_is_uuid_colon_decimal() {
        let owner = Owner::new();
        assert_eq!(&*holder_field("abc", owner), format!("abc:{}", owner.id()));
        let long = "x".repeat(200);
        assert_eq!(
            &*holder_field(&long, owner),
            format!("{long}:{}", owner.id())
        );
    }

    #[test]
    fn the_last_field_is_reused_only_for_the_same_client_and_owner() {
        let (owner, other) = (Owner::new(), Owner::new());
        let first = holder_field("abc", owner);
        assert!(ArcStr::ptr_eq(&first, &holder_field("abc", owner)));
        // A client id that the cached one merely starts with, or that starts with it, and
        // another owner, each get their own field.
        assert_eq!(&*holder_field("ab", owner), format!("ab:{}", owner.id()));
        assert_eq!(&*holder_field("abc", owner), format!("abc:{}", owner.id()));
        assert_eq!(
            &*holder_field("abcd", owner),
            format!("abcd:{}", owner.id())
        );
        assert_eq!(&*holder_field("abc", other), format!("abc:{}", other.id()));
        for value in [0, 9, 10, 99, 100, u64::MAX] {
            assert_eq!(digit_count(value), value.to_string().len());
        }
    }
}
