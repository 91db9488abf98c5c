//! Read-only inspection of a lock's state on Redis, whoever wrote it (ferrisson or Redisson):
//! what `ferrisson status` and `ferrisson watch` display.

use std::time::Duration;

use fred::prelude::Value;

use crate::error::{Error, Result};
use crate::kit::Client;
use crate::lock::RemainingTtl;
use crate::name;
use crate::transport::script;

/// What kind of Redisson primitive a key holds, as far as its Redis value tells.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockKind {
    /// The key does not exist: nobody holds the lock.
    Free,
    /// A hash of holder fields: `RLock`, spin or fenced lock (indistinguishable on Redis).
    Reentrant,
    /// A hash of holder fields with a waiter queue `redisson_lock_queue:{name}`: a fair lock.
    Fair,
    /// A hash with a `mode` field: a read-write lock in `read` or `write` mode.
    ReadWrite {
        /// `read` or `write`, as stored.
        mode: String,
    },
    /// Any other Redis type (for example a semaphore's or latch's string counter).
    Other {
        /// The Redis type name (`string`, `list`, ...).
        redis_type: String,
    },
}

/// One holder field of a hash lock and its hold count.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The field, `<client uuid>:<thread id>` (`...:write` for a write holder).
    pub field: String,
    /// The hold count stored in the field.
    pub count: i64,
}

impl Holder {
    /// The client uuid part of the field (everything before the first `:`).
    ///
    /// ```
    /// # use ferrisson::Holder;
    /// # fn demo(holder: &Holder) {
    /// println!("held by client {}", holder.client_id());
    /// # }
    /// ```
    pub fn client_id(&self) -> &str {
        self.field.split(':').next().unwrap_or_default()
    }
}

/// A snapshot of one lock, read atomically.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock's name (its Redis key).
    pub name: String,
    /// What the key holds.
    pub kind: LockKind,
    /// Holder fields with their counts (empty unless the key is a hash lock).
    pub holders: Vec<Holder>,
    /// The key's remaining time to live.
    pub ttl: RemainingTtl,
    /// Waiters queued in a fair lock's queue (0 for other kinds).
    pub queued: u64,
}

impl LockInfo {
    /// Whether the key exists (someone holds the lock).
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let info = client.inspect("orders:42").await?;
    /// println!("{} is {}", info.name, if info.is_locked() { "locked" } else { "free" });
    /// # Ok(()) }
    /// ```
    pub fn is_locked(&self) -> bool {
        self.kind != LockKind::Free
    }
}

impl Client {
    /// Reads the state of the lock `name` in one atomic step, without changing it: kind, holder
    /// fields and counts, TTL, fair-queue length. Works on locks written by Java Redisson too.
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let info = client.inspect("orders:42").await?;
    /// for holder in &info.holders {
    ///     println!("{} holds it {} time(s)", holder.field, holder.count);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, name: &str) -> Result<LockInfo> {
        let inner = &self.inner;
        inner.ensure_open()?;
        if name.is_empty() {
            return Err(Error::InvalidArgument(
                "a lock name must not be empty".into(),
            ));
        }
        let keys = vec![
            name.to_owned(),
            name::prefix_name("redisson_lock_queue", name),
        ];
        let reply = script::INSPECT
            .run(
                &inner.redis.pool,
                &inner.redis.read_options,
                &keys,
                &[] as &[&str],
            )
            .await
            .map_err(|err| inner.redis_error(name, err))?;
        parse(name, reply)
    }
}

fn parse(name: &str, reply: Value) -> Result<LockInfo> {
    let unexpected = |what: &str| {
        Error::Redis(fred::error::Error::new(
            fred::error::ErrorKind::Protocol,
            format!("unexpected reply to the inspect script ({what})"),
        ))
    };
    let Value::Array(parts) = reply else {
        return Err(unexpected("not an array"));
    };
    let [redis_type, pttl, fields, queued] =
        <[Value; 4]>::try_from(parts).map_err(|_| unexpected("length"))?;
    let redis_type = redis_type.as_string().ok_or_else(|| unexpected("type"))?;
    let pttl = pttl.as_i64().ok_or_else(|| unexpected("pttl"))?;
    let queued = queued.as_u64().unwrap_or(0);
    let fields = match fields {
        Value::Array(fields) => fields,
        _ => Vec::new(),
    };
    let mut mode = None;
    let mut holders = Vec::new();
    for pair in fields.chunks(2) {
        let [field, value] = pair else { continue };
        let (Some(field), Some(value)) = (field.as_string(), value.as_string()) else {
            continue;
        };
        if field == "mode" {
            mode = Some(value);
        } else {
            // Non-numeric values are not hold counts; show them as 0 rather than fail a display.
            holders.push(Holder {
                field,
                count: value.parse().unwrap_or(0),
            });
        }
    }
    holders.sort_by(|a, b| a.field.cmp(&b.field));
    let kind = match (redis_type.as_str(), mode) {
        ("none", _) => LockKind::Free,
        ("hash", Some(mode)) => LockKind::ReadWrite { mode },
        ("hash", None) if queued > 0 => LockKind::Fair,
        ("hash", None) => LockKind::Reentrant,
        (other, _) => LockKind::Other {
            redis_type: other.to_owned(),
        },
    };
    let ttl = match pttl {
        -2 => RemainingTtl::NotLocked,
        ttl if ttl < 0 => RemainingTtl::NoExpiry,
        ttl => RemainingTtl::Expires(Duration::from_millis(ttl as u64)),
    };
    Ok(LockInfo {
        name: name.to_owned(),
        kind,
        holders,
        ttl,
        queued,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(kind: &str, pttl: i64, fields: &[&str], queued: i64) -> Value {
        Value::Array(vec![
            kind.into(),
            Value::Integer(pttl),
            Value::Array(fields.iter().map(|f| Value::from(*f)).collect()),
            Value::Integer(queued),
        ])
    }

    #[test]
    fn a_missing_key_is_free() {
        let info = parse("x", reply("none", -2, &[], 0)).expect("parse");
        assert_eq!(info.kind, LockKind::Free);
        assert_eq!(info.ttl, RemainingTtl::NotLocked);
        assert!(!info.is_locked());
    }

    #[test]
    fn holders_and_kinds_are_read_from_the_hash() {
        let info = parse("x", reply("hash", 1500, &["u:1", "2"], 0)).expect("parse");
        assert_eq!(info.kind, LockKind::Reentrant);
        assert_eq!(
            info.holders,
            vec![Holder {
                field: "u:1".into(),
                count: 2
            }]
        );
        assert_eq!(info.holders[0].client_id(), "u");
        assert_eq!(info.ttl, RemainingTtl::Expires(Duration::from_millis(1500)));

        let rw = parse(
            "x",
            reply("hash", 10, &["mode", "write", "u:1:write", "1"], 0),
        )
        .expect("parse");
        assert_eq!(
            rw.kind,
            LockKind::ReadWrite {
                mode: "write".into()
            }
        );
        assert_eq!(rw.holders.len(), 1);

        let fair = parse("x", reply("hash", 10, &["u:1", "1"], 3)).expect("parse");
        assert_eq!((fair.kind, fair.queued), (LockKind::Fair, 3));

        let other = parse("x", reply("string", -1, &[], 0)).expect("parse");
        assert_eq!(
            other.kind,
            LockKind::Other {
                redis_type: "string".into()
            }
        );
        assert_eq!(other.ttl, RemainingTtl::NoExpiry);
    }

    #[test]
    fn malformed_replies_are_errors_not_panics() {
        assert!(parse("x", Value::Null).is_err());
        assert!(parse("x", Value::Array(vec![Value::Null])).is_err());
    }
}
