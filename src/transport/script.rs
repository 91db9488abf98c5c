//! The Lua scripts under `lua/`, embedded at build time and run with EVALSHA.
//!
//! A script is sent by its SHA1 first; when the server answers NOSCRIPT (a restart, a
//! `SCRIPT FLUSH`, a failover to a replica that never saw it) it is sent once in full with EVAL,
//! which also caches it again. NOSCRIPT means the script did not run, so the fallback can never
//! run an operation twice. For the same reason a call that a cluster node redirected (`MOVED`,
//! `TRYAGAIN`) is sent again, up to 5 times.

use arcstr::ArcStr;
use std::time::Duration;

use fred::bytes::{Bytes, BytesMut};
use fred::clients::Pool;
use fred::error::Error as RedisError;
use fred::interfaces::LuaInterface;
use fred::prelude::Value;
use fred::types::config::Options;
use futures::future::OptionFuture;

use crate::transport::replica_sync::{ReplicaSync, Replicated};

/// `keys` and `args` of one script call, encoded as [`ScriptArgs`] does.
pub(crate) fn encode<K: AsRef<str>, A: AsRef<str>>(keys: &[K], args: &[A]) -> Encoded {
    let bytes = keys.iter().map(|key| key.as_ref().len()).sum::<usize>()
        + args.iter().map(|arg| arg.as_ref().len()).sum::<usize>();
    let mut out = ScriptArgs::with_capacity(keys.len() + args.len(), bytes);
    for key in keys {
        out.key(key.as_ref());
    }
    for arg in args {
        out.arg(arg.as_ref());
    }
    out.finish()
}

/// Declares a primitive's scripts, each assembled at build time (a Lua script cannot include
/// another): the publish prelude `lua/lib/publish.lua`, the primitive's files (paths under
/// `lua/`: its library parts, then the file that defines its operations as functions), and the
/// script's own rest (the line that calls one operation with `KEYS` and `ARGV`, or a file that
/// builds on them).
macro_rules! lua_scripts {
    ($files:tt; $($(#[$meta:meta])* static $id:ident = ($name:literal, $($rest:expr),+);)+) => {
        $($crate::transport::script::lua_scripts!(@one $files; $(#[$meta])* $id, $name, $($rest),+);)+
    };
    (@one [$($file:literal),+]; $(#[$meta:meta])* $id:ident, $name:literal, $($rest:expr),+) => {
        $(#[$meta])*
        static $id: $crate::transport::script::Script = $crate::transport::script::Script::new(
            $name,
            concat!(
                include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/lua/lib/publish.lua")),
                $(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/lua/", $file)),)+
                $($rest),+
            ),
        );
    };
}
pub(crate) use lua_scripts;

/// One Lua file and its SHA1.
pub struct Script {
    name: &'static str,
    lua: &'static str,
    /// Kept as `Bytes` so that each call shares it instead of copying it into its command.
    sha1: std::sync::OnceLock<Bytes>,
}

impl Script {
    /// A script of `lua` (an `include_str!` of its file under `lua/`). A primitive declares its
    /// own scripts as statics in its own file; those not in [`ALL`] are loaded on first use by
    /// the NOSCRIPT fallback instead of at connect.
    pub(crate) const fn new(name: &'static str, lua: &'static str) -> Script {
        Script {
            name,
            lua,
            sha1: std::sync::OnceLock::new(),
        }
    }

    fn sha1(&self) -> &Bytes {
        self.sha1
            .get_or_init(|| Bytes::from(fred::util::sha1_hash(self.lua)))
    }

    /// Runs the script with `keys` and `args`: EVALSHA, then EVAL once on NOSCRIPT. They are
    /// encoded like every other call ([`ScriptArgs`]).
    ///
    /// # Cancel safety
    /// As [`Script::run_encoded`].
    pub(crate) async fn run<K: AsRef<str> + Sync, A: AsRef<str> + Sync>(
        &'static self,
        redis: &Pool,
        options: &Options,
        keys: &[K],
        args: &[A],
    ) -> Result<Value, RedisError> {
        self.run_encoded(redis, options, &encode(keys, args)).await
    }

    /// Runs the script with arguments encoded by [`ScriptArgs`]: EVALSHA, then EVAL once on
    /// NOSCRIPT. Each argument is a slice of the one buffer, so neither the command nor the
    /// fallback copies or allocates per argument.
    ///
    /// # Cancel safety
    /// Not cancel safe on its own: once the command is written, dropping the future does not stop
    /// the script. Callers that change lock state wrap it in [`crate::kit::InFlight`].
    pub(crate) async fn run_encoded(
        &'static self,
        redis: &Pool,
        options: &Options,
        encoded: &Encoded,
    ) -> Result<Value, RedisError> {
        self.run_synced(redis, options, encoded, None)
            .await
            .map(|(value, _)| value)
    }

    /// [`Script::run_encoded`], followed on the same connection by a `WAIT` for the master's
    /// replicas when `sync` is given (`src/transport/replica_sync.rs`). Cancel safety as
    /// [`Script::run_encoded`].
    ///
    /// Sent as custom commands because fred's `WithOptions` wrapper does not apply its options
    /// to the Lua interface; this way `options` (at most one attempt, fail fast, timeout) hold.
    /// The command is routed to the hash slot of the first key, as Redisson does, and sent
    /// again after a redirection that fred could not follow (see [`Redirected`]).
    pub(crate) async fn run_synced(
        &'static self,
        redis: &Pool,
        options: &Options,
        encoded: &Encoded,
        sync: Option<&ReplicaSync>,
    ) -> Result<(Value, Replicated), RedisError> {
        let slot = encoded.first_key().map(fred::util::redis_keyslot);
        resend_redirected(self.name, redis, slot, |route| async move {
            self.send_once(redis, options, &route, sync, encoded).await
        })
        .await
    }

    /// One EVALSHA, with the EVAL fallback on NOSCRIPT, and with `sync` the `WAIT` after it;
    /// after an `ASK`, each preceded by `ASKING` on the migration's target.
    async fn send_once(
        &'static self,
        redis: &Pool,
        options: &Options,
        route: &Route,
        sync: Option<&ReplicaSync>,
        encoded: &Encoded,
    ) -> Result<(Value, Replicated), RedisError> {
        use fred::interfaces::ClientLike;
        use fred::types::CustomCommand;

        let connection = redis.next();
        let options = route.options(options);
        let client = connection.with_options(&options);
        let evalsha = CustomCommand::new_static("EVALSHA", route.hash(), false);
        let evalsha = client
            .custom::<Value, Value>(evalsha, encoded.command(Value::Bytes(self.sha1().clone())));
        let replicas = match sync {
            Some(sync) => sync.replicas(connection, route).await,
            None => 0,
        };
        let wait = sync.filter(|_| replicas > 0).map(|sync| {
            let (wait, args) = sync.wait_command(replicas, route);
            client.custom::<Value, Value>(wait, args)
        });
        // Written back to back on the one connection (`join!` polls, and so queues, them in
        // order): `ASKING` lets the next command in, and the `WAIT` covers the script's writes.
        let (asked, reply, waited) =
            futures::join!(route.asking(&client), evalsha, OptionFuture::from(wait));
        asked.transpose()?;
        let (reply, waited) = match reply {
            Err(err) if err.details().starts_with("NOSCRIPT") => {
                tracing::debug!(
                    script = %self.name,
                    "script not cached by the server; sending it in full"
                );
                let eval = CustomCommand::new_static("EVAL", route.hash(), false);
                let eval = client.custom(eval, encoded.command(Value::from_static_str(self.lua)));
                let (asked, reply) = futures::join!(route.asking(&client), eval);
                asked.transpose()?;
                // The `WAIT` sent with the EVALSHA came before this write: wait again.
                let waited = match (sync, waited) {
                    (Some(sync), Some(_)) if reply.is_ok() => {
                        let (wait, args) = sync.wait_command(replicas, route);
                        Some(client.custom(wait, args).await)
                    }
                    (_, waited) => waited,
                };
                (reply, waited)
            }
            other => (other, waited),
        };
        let value = reply?;
        let replicated = match (sync, waited) {
            (Some(sync), Some(waited)) => sync.judge(connection, route, replicas, waited).await,
            _ => Replicated::NotAsked,
        };
        Ok((value, replicated))
    }
}

/// Where one send of a call goes: the node serving its slot (fred routes by the slot), or,
/// after an `ASK`, the slot's migration target, with `ASKING` first.
#[derive(Clone, Debug, Default)]
pub(crate) struct Route {
    pub(crate) slot: Option<u16>,
    pub(crate) asking: Option<fred::types::config::Server>,
}

impl Route {
    pub(crate) fn hash(&self) -> fred::types::ClusterHash {
        self.slot.map_or(
            fred::types::ClusterHash::Random,
            fred::types::ClusterHash::Custom,
        )
    }

    /// `ASKING`, when asking: to be written on `client` right before the command it lets in.
    pub(crate) fn asking<'a, C: fred::interfaces::ClientLike>(
        &self,
        client: &'a C,
    ) -> OptionFuture<impl std::future::Future<Output = Result<Value, RedisError>> + 'a> {
        let asking = fred::types::CustomCommand::new_static("ASKING", self.hash(), false);
        OptionFuture::from(
            self.asking
                .is_some()
                .then(|| client.custom(asking, Vec::<Value>::new())),
        )
    }

    /// `base`, sent to the migration target when asking.
    pub(crate) fn options(&self, base: &Options) -> Options {
        let mut options = base.clone();
        if let Some(target) = &self.asking {
            options.cluster_node = Some(target.clone());
        }
        options
    }
}

/// How many times one call is sent again after cluster redirections before giving up.
const MAX_REDIRECTS: u32 = 5;

/// Runs `send` until its call was not redirected by a cluster node, at most [`MAX_REDIRECTS`]
/// more times: a redirected call did not run, so sending it again cannot run it twice, although
/// lock-changing scripts otherwise go out with a single write attempt.
///
/// After a `MOVED` fred has refreshed its slot map and the next send goes to the slot's new
/// owner. After an `ASK` (the key has left a migrating slot) the slot's owner names the
/// migration's target in `CLUSTER NODES`, and the next send goes there behind `ASKING`.
/// `TRYAGAIN` (a multi-key call whose keys are split by the migration) only time helps.
pub(crate) async fn resend_redirected<T, F, Fut>(
    what: &str,
    redis: &Pool,
    slot: Option<u16>,
    mut send: F,
) -> Result<T, RedisError>
where
    F: FnMut(Route) -> Fut,
    Fut: std::future::Future<Output = Result<T, RedisError>>,
{
    let mut redirects = 0;
    let mut route = Route { slot, asking: None };
    loop {
        let result = send(route.clone()).await;
        let redirected = result.as_ref().err().and_then(Redirected::of);
        let Some(redirected) = redirected.filter(|_| redirects < MAX_REDIRECTS) else {
            return result;
        };
        redirects += 1;
        let target = match (redirected, slot) {
            (Redirected::Redirection, Some(slot)) => migration_target(redis, slot).await,
            _ => None,
        };
        tracing::debug!(
            %what,
            ?redirected,
            target = %crate::shown::OrNone(target.as_ref()),
            redirects,
            "redirected; sending again"
        );
        if target.is_none() || target == route.asking {
            tokio::time::sleep(Duration::from_millis(20 * redirects as u64)).await;
        }
        route.asking = target;
    }
}

/// The node a migrating `slot` is moving to, as the slot's owner tells in `CLUSTER NODES` (its
/// own line carries `[slot->-target-id]`); `None` when the slot is not migrating.
async fn migration_target(redis: &Pool, slot: u16) -> Option<fred::types::config::Server> {
    use fred::interfaces::ClientLike;
    let nodes: String = redis
        .next()
        .custom(
            fred::types::CustomCommand::new_static(
                "CLUSTER",
                fred::types::ClusterHash::Custom(slot),
                false,
            ),
            vec![Value::from_static_str("NODES")],
        )
        .await
        .ok()?;
    migration_target_in(&nodes, slot)
}

fn migration_target_in(nodes: &str, slot: u16) -> Option<fred::types::config::Server> {
    let marker = format!("[{slot}->-");
    let myself = nodes.lines().find(|line| {
        line.split(' ')
            .nth(2)
            .is_some_and(|flags| flags.contains("myself"))
    })?;
    let target = myself
        .split(' ')
        .find_map(|field| field.strip_prefix(marker.as_str()))?
        .strip_suffix(']')?;
    let address = nodes
        .lines()
        .find(|line| line.split(' ').next() == Some(target))?
        .split(' ')
        .nth(1)?;
    // `ip:port@cport[,hostname]`
    let (host, port) = address.split(['@', ',']).next()?.rsplit_once(':')?;
    Some(fred::types::config::Server::new(host, port.parse().ok()?))
}

/// A call that a cluster node redirected instead of running. The command connections have
/// `max_redirections: 0` (`client.rs`), so fred returns a redirection as an error (after a
/// `MOVED`, with its slot map refreshed): fred 10.1 cannot complete an `ASK`'s `ASKING` under a
/// single write attempt, and that failure tore down the client's router, failing every other
/// call in flight with an unknown outcome. [`resend_redirected`] follows both itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Redirected {
    /// `MOVED` or `ASK`: fred's "Too many redirections".
    Redirection,
    /// `TRYAGAIN`: the slot is being migrated and only some of the keys have moved.
    TryAgain,
}

impl Redirected {
    fn of(err: &RedisError) -> Option<Redirected> {
        match err.details() {
            "Too many redirections." | "Too many failed write attempts." => {
                Some(Redirected::Redirection)
            }
            details if details.starts_with("TRYAGAIN") => Some(Redirected::TryAgain),
            _ => None,
        }
    }
}

/// Builds the keys and arguments of a script call in one buffer.
///
/// Every piece is appended to one `BytesMut` and later sent as a slice of it: one allocation for
/// a whole call (or a whole batch of calls) instead of one per argument, no formatting
/// machinery for numbers and names, and slices that a NOSCRIPT fallback shares again for free.
pub(crate) struct ScriptArgs {
    buf: BytesMut,
    /// The end offset of each piece in `buf`.
    ends: Vec<usize>,
    key_count: usize,
    /// Keys are appended as arguments from here on ([`BATCH_ACROSS_SLOTS`]).
    keys_as_args: bool,
}

impl ScriptArgs {
    /// Room for about `pieces` pieces of `bytes` bytes in all.
    pub(crate) fn with_capacity(pieces: usize, bytes: usize) -> ScriptArgs {
        ScriptArgs {
            buf: BytesMut::with_capacity(bytes),
            ends: Vec::with_capacity(pieces),
            key_count: 0,
            keys_as_args: false,
        }
    }

    /// Appends a key; keys come before every argument.
    pub(crate) fn key(&mut self, key: &str) -> &mut Self {
        self.declare_key();
        self.arg(key)
    }

    /// Appends a key: Redisson's `prefixName(prefix, name)`, `prefix:{name}` (see
    /// [`crate::name::prefix_name`]).
    pub(crate) fn prefixed_key(&mut self, prefix: &str, name: &str) -> &mut Self {
        self.declare_key();
        for part in crate::name::prefix_name_parts(prefix, name) {
            self.buf.extend_from_slice(part.as_bytes());
        }
        self.ends.push(self.buf.len());
        self
    }

    fn declare_key(&mut self) {
        if !self.keys_as_args {
            debug_assert_eq!(self.key_count, self.ends.len(), "keys come first");
            self.key_count += 1;
        }
    }

    /// Appends an argument.
    pub(crate) fn arg(&mut self, arg: &str) -> &mut Self {
        self.bytes(arg.as_bytes())
    }

    /// Appends an argument of raw bytes, not necessarily UTF-8 (the permit-expirable
    /// semaphore's binary permit ids).
    pub(crate) fn bytes(&mut self, arg: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(arg);
        self.ends.push(self.buf.len());
        self
    }

    /// Appends a number in decimal.
    pub(crate) fn number(&mut self, n: u64) -> &mut Self {
        self.arg(itoa::Buffer::new().format(n))
    }

    pub(crate) fn finish(self) -> Encoded {
        Encoded {
            buf: self.buf.freeze(),
            ends: self.ends,
            key_count: self.key_count,
        }
    }
}

/// Keys and arguments built by [`ScriptArgs`].
pub(crate) struct Encoded {
    buf: Bytes,
    ends: Vec<usize>,
    key_count: usize,
}

impl Encoded {
    fn pieces(&self) -> impl Iterator<Item = Bytes> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .map(|(start, end)| self.buf.slice(start..end))
    }

    fn first_key(&self) -> Option<&[u8]> {
        match (self.key_count, self.ends.first()) {
            (1.., Some(&end)) => self.buf.get(..end),
            _ => None,
        }
    }

    /// `head numkeys keys... args...`
    fn command(&self, head: Value) -> Vec<Value> {
        let mut command = Vec::with_capacity(2 + self.ends.len());
        command.push(head);
        command.push(Value::Integer(self.key_count as i64));
        command.extend(self.pieces().map(Value::Bytes));
        command
    }
}

/// A release to perform: one hold of `field` on lock `name`.
#[derive(Clone, Debug)]
pub(crate) struct Release {
    pub(crate) name: ArcStr,
    pub(crate) field: ArcStr,
    pub(crate) lease_ms: u64,
    /// The primitive's own release script; `None` for [`RELEASE`] (the reentrant lock's, which
    /// the fenced lock shares), the only one that is batched.
    pub(crate) script: Option<&'static ReleaseScript>,
}

impl Release {
    /// The channel a full release of this hold announces itself on.
    pub(crate) fn channel(&self) -> String {
        match self.script.and_then(|script| script.hand_off.as_ref()) {
            Some(hand_off) => (hand_off.channel)(&self.name),
            None => crate::name::lock_channel(&self.name),
        }
    }
}

/// A primitive's own release script (the spin lock's, which never publishes; the fair lock's,
/// which tells the queue's head; the read and write locks'), declared as a static in the
/// primitive's file. It runs alone (never batched), synced as every lock write. Whatever the
/// Redisson version it mirrors answers, the script replies as [`RELEASE`] does to its callers:
/// nil (the field held nothing), 0 (a partial release) or 1 (the hold was the last); one that
/// hands over (`hand_off`) replies as [`RELEASE`] does to the kit: -1 after a hand-off, 1 + the
/// unlock message's receivers after a release that freed the lock.
pub struct ReleaseScript {
    pub(crate) script: &'static Script,
    /// The call's keys and arguments for one release, given the publish mode's script argument
    /// (`PUBLISH`, `SPUBLISH` or `BOTH`: see `lua/lib/publish.lua`).
    pub(crate) encode: fn(&Release, &'static str) -> Encoded,
    /// For a script that can hand the lock to a local waiter (the write lock's): how.
    pub(crate) hand_off: Option<ScriptHandOff>,
}

/// The keys and arguments of a release script called as `f(KEYS[1] name, KEYS[2] channel,
/// ARGV[1] lease, ARGV[2] field, ARGV[3] publish mode[, ARGV[4] heir, ARGV[5] heir lease,
/// ARGV[6] own or ''])`: the write lock's and the token lock's releases. With `heir`, `own` is
/// the listener count a conditional hand-off allows (`None`: ''), see [`Heir`].
pub(crate) fn encode_channel_release(
    release: &Release,
    channel: &str,
    publish: &'static str,
    heir: Option<(&Heir, Option<u32>)>,
) -> Encoded {
    let name = &*release.name;
    let lease = release.lease_ms.to_string();
    let Some((heir, own)) = heir else {
        return encode(
            &[name, channel],
            &[lease.as_str(), &*release.field, publish],
        );
    };
    let heir_lease = heir.lease_ms.to_string();
    let own = own.map_or_else(String::new, |own| own.to_string());
    encode(
        &[name, channel],
        &[
            lease.as_str(),
            &*release.field,
            publish,
            &*heir.field,
            heir_lease.as_str(),
            own.as_str(),
        ],
    )
}

/// How a semaphore gives back permits nobody holds (handed to a waiter that left): its release
/// script, declared as a static in the primitive's file.
pub struct GiveBackScript {
    pub(crate) script: &'static Script,
    /// The call's keys and arguments for giving back `permits` of the semaphore `name`, given
    /// the publish mode's script argument.
    pub(crate) encode: fn(name: &str, permits: u64, publish: &'static str) -> Encoded,
}

impl std::fmt::Debug for GiveBackScript {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.script.name)
    }
}

/// How a primitive's own release script hands the lock to a local waiter
/// ([`ReleaseScript::hand_off`]).
pub struct ScriptHandOff {
    /// The call's keys and arguments for a release that names `heir`.
    pub(crate) encode: fn(&Release, &'static str, &Heir) -> Encoded,
    /// The channel its full release announces itself on, given the lock's name.
    pub(crate) channel: fn(&str) -> String,
}

impl std::fmt::Debug for ReleaseScript {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.script.name)
    }
}

/// One call of the acquire or release script: what the dispatcher (`src/transport/dispatch.rs`) runs
/// alone or together with others in one [`BATCH`].
pub(crate) enum LockCall {
    /// `op` (a mode of [`ACQUIRE`]): take (or re-enter) `name` as `field` with a lease of
    /// `lease_ms`.
    Acquire {
        name: ArcStr,
        field: ArcStr,
        lease_ms: u64,
        op: &'static BatchedAcquire,
    },
    /// [`RELEASE`]: release one hold of `release`, announcing a full release as `publish`
    /// (the publish mode's script argument); with `to`, hand the lock to that waiter.
    Release {
        release: Release,
        publish: &'static str,
        to: Option<Heir>,
    },
}

/// An acquire of the reentrant lock's hash that the dispatcher may batch: a mode of
/// `lua/acquire.lua` (a primitive on that hash declares its own as a static).
pub struct BatchedAcquire {
    /// Its call shape in `lua/batch.lua`.
    pub(crate) shape: &'static str,
    /// The script it runs alone.
    pub(crate) alone: &'static Script,
    /// The release of the hold it takes (a synced-writes rollback): the primitive's own, or
    /// `None` for [`RELEASE`].
    pub(crate) release: Option<&'static ReleaseScript>,
}

/// The reentrant lock's acquire.
pub(crate) static REENTRANT_ACQUIRE: BatchedAcquire = BatchedAcquire {
    shape: "acquire",
    alone: &ACQUIRE,
    release: None,
};

/// The local waiter that a full release hands the lock to (`heir` in lua/release.lua).
pub(crate) struct Heir {
    pub(crate) field: ArcStr,
    pub(crate) lease_ms: u64,
    /// The heir's wait time W in its lock's queue (the fair lock's), 0 for other locks: a
    /// hand-off runs the heir's own acquire, which moves those behind it up by W.
    pub(crate) wait_ms: u64,
    /// With `conditional`, hand over only while the unlock channel has no more subscribers
    /// than `own_listeners` (this client's): otherwise the release is a plain one, so that
    /// waiters of other clients get their turn (`src/kit/handoff.rs`). Two fields rather than
    /// an `Option<u32>`, which would make every lock call's future 8 bytes larger.
    pub(crate) conditional: bool,
    pub(crate) own_listeners: u32,
    /// The heir is a fenced lock's waiter: the hand-off takes the next fencing token for it
    /// (the script replies `[-1, token]`).
    pub(crate) fenced: bool,
}

impl Heir {
    /// This client's subscribers of the unlock channel, for a conditional hand-off.
    pub(crate) fn unless_listeners_above(&self) -> Option<u32> {
        self.conditional.then_some(self.own_listeners)
    }
}

impl LockCall {
    /// The name of the lock the call is for.
    pub(crate) fn name(&self) -> ArcStr {
        match self {
            LockCall::Acquire { name, .. } => ArcStr::clone(name),
            LockCall::Release { release, .. } => ArcStr::clone(&release.name),
        }
    }

    /// The script this call runs when it goes alone.
    pub(crate) fn script(&self) -> &'static Script {
        match self {
            LockCall::Acquire { op, .. } => op.alone,
            LockCall::Release { .. } => &RELEASE,
        }
    }

    /// The call's shape inside [`BATCH`] (lua/batch.lua): its operation, which implies its
    /// numbers of keys and arguments; and how many keys and arguments it has.
    fn shape(&self) -> (&'static str, usize) {
        match self {
            LockCall::Acquire { op, .. } => (op.shape, 1 + 2),
            LockCall::Release { to: None, .. } => ("release", 2 + 3),
            LockCall::Release { to: Some(heir), .. } if heir.fenced => ("handoff_token", 3 + 6),
            LockCall::Release { to: Some(heir), .. } => match heir.unless_listeners_above() {
                None => ("handoff", 2 + 5),
                Some(_) => ("handoff_if_alone", 2 + 6),
            },
        }
    }

    /// How many keys the call has (the first pieces of its [`LockCall::shape`] count).
    fn key_count(&self) -> usize {
        match self {
            LockCall::Acquire { .. } => 1,
            LockCall::Release { to, .. } => {
                2 + usize::from(to.as_ref().is_some_and(|heir| heir.fenced))
            }
        }
    }

    /// The hash slot of every key of the call: in a cluster, a client only takes names whose
    /// keys share their slot (`Client::check_name`), so the lock name's slot is all of them.
    pub(crate) fn slot(&self) -> u16 {
        match self {
            LockCall::Acquire { name, .. } => fred::util::redis_keyslot(name.as_bytes()),
            LockCall::Release { release, .. } => fred::util::redis_keyslot(release.name.as_bytes()),
        }
    }

    /// About the bytes this call's keys and arguments take.
    fn size_hint(&self) -> usize {
        match self {
            LockCall::Acquire { name, field, .. } => name.len() + field.len() + 24,
            LockCall::Release { release, to, .. } => {
                2 * release.name.len()
                    + release.field.len()
                    + to.as_ref().map_or(0, |heir| {
                        heir.field.len() + 40 + usize::from(heir.fenced) * (release.name.len() + 24)
                    })
                    + 64
            }
        }
    }

    fn keys(&self, out: &mut ScriptArgs) {
        match self {
            LockCall::Acquire { name, .. } => {
                out.key(name);
            }
            LockCall::Release { release, to, .. } => {
                // The channel is derived here rather than kept per held lock (memory).
                out.key(&release.name)
                    .prefixed_key(crate::name::LOCK_CHANNEL_PREFIX, &release.name);
                if to.as_ref().is_some_and(|heir| heir.fenced) {
                    out.prefixed_key(crate::name::FENCED_TOKEN_PREFIX, &release.name);
                }
            }
        }
    }

    fn args(&self, out: &mut ScriptArgs) {
        match self {
            LockCall::Acquire {
                field, lease_ms, ..
            } => {
                out.number(*lease_ms).arg(field);
            }
            LockCall::Release {
                release,
                publish,
                to,
            } => {
                out.number(release.lease_ms)
                    .arg(&release.field)
                    .arg(publish);
                if let Some(heir) = to {
                    out.arg(&heir.field).number(heir.lease_ms);
                    match heir.unless_listeners_above() {
                        Some(own) => {
                            out.number(u64::from(own));
                        }
                        // A fenced heir's call has a fixed shape: '' for no `own`.
                        None if heir.fenced => {
                            out.arg("");
                        }
                        None => {}
                    }
                }
            }
        }
    }

    /// The keys and arguments of this call run alone, as its own script.
    pub(crate) fn encode(&self) -> Encoded {
        let mut out = ScriptArgs::with_capacity(self.shape().1, self.size_hint());
        self.keys(&mut out);
        self.args(&mut out);
        out.finish()
    }

    /// The keys and arguments of one [`BATCH`] run of `calls`, in their order.
    pub(crate) fn encode_batch<'a>(calls: impl Iterator<Item = &'a LockCall> + Clone) -> Encoded {
        let (mut pieces, mut bytes, mut count) = (1, 8, 0);
        for call in calls.clone() {
            pieces += 1 + call.shape().1;
            bytes += call.size_hint() + 16;
            count += 1;
        }
        let mut out = ScriptArgs::with_capacity(pieces, bytes);
        for call in calls.clone() {
            call.keys(&mut out);
        }
        Self::encode_calls(out, count, calls)
    }

    /// The keys and arguments of one [`BATCH_ACROSS_SLOTS`] run of `calls` (in a cluster, calls
    /// whose slots one node serves), in their order: the first call's lock name as the one key,
    /// which routes the run; every call's keys, counted, as arguments; then the calls as in
    /// [`LockCall::encode_batch`].
    pub(crate) fn encode_batch_across_slots<'a>(
        calls: impl Iterator<Item = &'a LockCall> + Clone,
    ) -> Encoded {
        let (mut pieces, mut bytes, mut count, mut keys) = (3, 24, 0, 0);
        for call in calls.clone() {
            pieces += 1 + call.shape().1;
            bytes += call.size_hint() + 16;
            count += 1;
            keys += call.key_count();
        }
        let mut out = ScriptArgs::with_capacity(pieces, bytes);
        if let Some(first) = calls.clone().next() {
            out.key(&first.name());
        }
        out.number(keys as u64);
        out.keys_as_args = true;
        for call in calls.clone() {
            call.keys(&mut out);
        }
        Self::encode_calls(out, count, calls)
    }

    /// Appends the number of calls and each call's shape and arguments.
    fn encode_calls<'a>(
        mut out: ScriptArgs,
        count: u64,
        calls: impl Iterator<Item = &'a LockCall>,
    ) -> Encoded {
        out.number(count);
        for call in calls {
            out.arg(call.shape().0);
            call.args(&mut out);
        }
        out.finish()
    }
}

/// Acquire or re-enter (protocol §2.2). `lua/acquire.lua` defines the operation as a function of
/// plain values (so that [`BATCH`] calls it without building tables); the script of its own
/// calls it with its keys and arguments.
pub(crate) static ACQUIRE: Script = Script::new(
    "acquire",
    concat!(
        include_str!("../../lua/acquire.lua"),
        "return acquire(KEYS[1], ARGV[1], ARGV[2])\n"
    ),
);
/// Release one hold, publishing on the full release (§2.3), or hand the lock to a local waiter.
pub(crate) static RELEASE: Script = Script::new(
    "release",
    concat!(
        include_str!("../../lua/lib/publish.lua"),
        include_str!("../../lua/release.lua"),
        "return release(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], KEYS[3])\n"
    ),
);
/// `ACQUIRE` and `RELEASE` calls of several callers in one run (`src/transport/dispatch.rs`): the same
/// operation functions, called by `lua/batch.lua` once per call, so a call runs exactly its own
/// script's steps.
pub(crate) static BATCH: Script = Script::new(
    "batch",
    concat!(
        include_str!("../../lua/lib/publish.lua"),
        include_str!("../../lua/acquire.lua"),
        include_str!("../../lua/release.lua"),
        include_str!("../../lua/batch.lua"),
        "return batch(KEYS, 1)\n"
    ),
);
/// [`BATCH`] in a cluster: calls of several hash slots that one node serves, their keys passed
/// as arguments (`lua/batch_across_slots.lua`; `src/transport/dispatch.rs`).
pub(crate) static BATCH_ACROSS_SLOTS: Script = Script::new(
    "batch_across_slots",
    concat!(
        include_str!("../../lua/lib/publish.lua"),
        include_str!("../../lua/acquire.lua"),
        include_str!("../../lua/release.lua"),
        include_str!("../../lua/batch.lua"),
        include_str!("../../lua/batch_across_slots.lua")
    ),
);
/// Delete the lock whoever holds it and publish (§2.4).
pub(crate) static FORCE_RELEASE: Script = Script::new(
    "force_release",
    concat!(
        include_str!("../../lua/lib/publish.lua"),
        include_str!("../../lua/force_release.lua")
    ),
);

/// Read a lock's state for status displays.
pub(crate) static INSPECT: Script = Script::new("inspect", include_str!("../../lua/inspect.lua"));

/// Every script, for loading them once at connect time.
pub(crate) static ALL: [&Script; 6] = [
    &ACQUIRE,
    &RELEASE,
    &BATCH,
    &BATCH_ACROSS_SLOTS,
    &FORCE_RELEASE,
    &INSPECT,
];

/// Loads every script, and the `upper` layers' (the lease layer's upkeep), into the server's
/// cache (on every primary in a cluster), so that the first lock operations need no fallback.
/// Best effort: EVALSHA's fallback covers any failure.
pub(crate) async fn preload(redis: &Pool, clustered: bool, upper: &[&Script]) {
    for script in ALL.iter().chain(upper) {
        let loaded = if clustered {
            redis.next().script_load_cluster::<(), _>(script.lua).await
        } else {
            redis.next().script_load::<(), _>(script.lua).await
        };
        if let Err(err) = loaded {
            tracing::debug!(script = %script.name, error = %err, "could not preload script");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_migration_target_is_read_from_the_owners_cluster_nodes() {
        let nodes = "\
e7d1 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 [93->-292f] [94-<-aaaa]
292f 127.0.0.1:30002@31002,host2 master - 0 1426238316232 2 connected 5461-10922
07c3 127.0.0.1:30004@31004 slave e7d1 0 1426238317239 4 connected
";
        let target = migration_target_in(nodes, 93).map(|server| server.to_string());
        assert_eq!(target.as_deref(), Some("127.0.0.1:30002"));
        assert!(
            migration_target_in(nodes, 94).is_none(),
            "importing, not migrating"
        );
        assert!(migration_target_in(nodes, 95).is_none());
        assert!(migration_target_in("garbage", 93).is_none());
    }

    fn text(encoded: &Encoded) -> Vec<String> {
        encoded
            .pieces()
            .map(|piece| String::from_utf8_lossy(&piece).into_owned())
            .collect()
    }

    fn release(name: &str, to: Option<(&str, u64)>) -> LockCall {
        LockCall::Release {
            release: Release {
                script: None,
                name: name.into(),
                field: "uuid:2".into(),
                lease_ms: 30_000,
            },
            publish: "PUBLISH",
            to: to.map(|(field, lease_ms)| Heir {
                field: field.into(),
                lease_ms,
                wait_ms: 0,
                conditional: false,
                own_listeners: 0,
                fenced: false,
            }),
        }
    }

    /// An acquire of `name` as `uuid:1`.
    fn acquire(name: &str, lease_ms: u64) -> LockCall {
        LockCall::Acquire {
            name: name.into(),
            field: "uuid:1".into(),
            lease_ms,
            op: &REENTRANT_ACQUIRE,
        }
    }

    #[test]
    fn a_lone_call_encodes_its_own_keys_and_arguments() {
        let acquire = acquire("orders:42", 30_000).encode();
        assert_eq!(acquire.key_count, 1);
        assert_eq!(text(&acquire), ["orders:42", "30000", "uuid:1"]);
        assert_eq!(acquire.first_key(), Some(&b"orders:42"[..]));

        let plain = release("orders:42", None).encode();
        assert_eq!(plain.key_count, 2);
        assert_eq!(
            text(&plain),
            [
                "orders:42",
                "redisson_lock__channel:{orders:42}",
                "30000",
                "uuid:2",
                "PUBLISH"
            ]
        );
        // A name with a brace keeps it as it is, like `name::lock_channel`.
        let tagged = release("{orders}:42", Some(("uuid:3", 7))).encode();
        assert_eq!(
            text(&tagged)[1],
            crate::name::lock_channel("{orders}:42").as_str()
        );
        assert_eq!(text(&tagged)[5..], ["uuid:3", "7"]);

        // A fenced heir adds the token key, and '' for no listener bound (a fixed shape).
        let mut fenced = release("orders:42", Some(("uuid:4", 9)));
        if let LockCall::Release { to: Some(heir), .. } = &mut fenced {
            heir.fenced = true;
        }
        assert_eq!(fenced.shape(), ("handoff_token", 9));
        let encoded = fenced.encode();
        assert_eq!(encoded.key_count, 3);
        assert_eq!(
            text(&encoded),
            [
                "orders:42",
                "redisson_lock__channel:{orders:42}",
                "redisson_lock_token:{orders:42}",
                "30000",
                "uuid:2",
                "PUBLISH",
                "uuid:4",
                "9",
                ""
            ]
        );
    }

    #[test]
    fn a_batch_puts_every_key_first_then_each_calls_header_and_arguments() {
        let calls = [acquire("a", 10), release("b", Some(("uuid:3", 20)))];
        let batch = LockCall::encode_batch(calls.iter());
        assert_eq!(batch.key_count, 3);
        assert_eq!(
            text(&batch),
            [
                "a",
                "b",
                "redisson_lock__channel:{b}",
                "2",
                "acquire",
                "10",
                "uuid:1",
                "handoff",
                "30000",
                "uuid:2",
                "PUBLISH",
                "uuid:3",
                "20"
            ]
        );
        let command = batch.command(Value::from_static_str("EVALSHA"));
        assert_eq!(command.len(), 2 + 13);
        assert_eq!(command[1], Value::Integer(3));

        // A conditional hand-off has its own shape and one more argument.
        let mut conditional = release("c", Some(("uuid:4", 30)));
        if let LockCall::Release { to: Some(heir), .. } = &mut conditional {
            (heir.conditional, heir.own_listeners) = (true, 1);
        }
        let batch = LockCall::encode_batch([&conditional].into_iter());
        assert_eq!(
            text(&batch)[2..],
            [
                "1",
                "handoff_if_alone",
                "30000",
                "uuid:2",
                "PUBLISH",
                "uuid:4",
                "30",
                "1"
            ]
        );
    }

    #[test]
    fn a_batch_across_slots_declares_only_the_first_name_and_passes_every_key_as_an_argument() {
        let calls = [acquire("a", 10), release("b", None)];
        let batch = LockCall::encode_batch_across_slots(calls.iter());
        assert_eq!(batch.key_count, 1);
        assert_eq!(batch.first_key(), Some(&b"a"[..]));
        assert_eq!(
            text(&batch),
            [
                "a",
                "3",
                "a",
                "b",
                "redisson_lock__channel:{b}",
                "2",
                "acquire",
                "10",
                "uuid:1",
                "release",
                "30000",
                "uuid:2",
                "PUBLISH"
            ]
        );
        // What follows the keys is exactly a batch's calls, as lua/batch.lua reads them.
        let one_server = LockCall::encode_batch(calls.iter());
        assert_eq!(text(&batch)[5..], text(&one_server)[3..]);
    }

    #[test]
    fn sha1_matches_the_source() {
        assert_eq!(ACQUIRE.sha1().len(), 40);
        assert_ne!(ACQUIRE.sha1(), RELEASE.sha1());
        assert_eq!(
            ACQUIRE.sha1(),
            fred::util::sha1_hash(ACQUIRE.lua).as_bytes()
        );
    }
}
