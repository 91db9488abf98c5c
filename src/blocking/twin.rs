//! The methods every blocking twin of a lock on the reentrant lock's hash with the shared
//! [`crate::Guard`] has ([`SpinLock`](super::SpinLock),
//! [`NonReentrantLock`](super::NonReentrantLock)), written once: each is the async method run
//! for the handle's owner on the client's runtime. A twin is a struct
//! `{ lock: blocking::Lock, inner: <async lock> }`; its file adds its constructor on
//! [`Client`](super::Client), its own methods and its `Debug`.

/// `twin_methods!(Twin, AsyncLock)`: the shared methods of `Twin`, the blocking twin of
/// `crate::AsyncLock`.
macro_rules! twin_methods {
    ($twin:ident, $async:ident) => {
        impl $twin {
            /// Runs an operation of the async lock bound to this handle's owner.
            fn run<F: std::future::Future<Output = $crate::Result<T>>, T>(
                &self,
                operation: impl FnOnce($crate::$async) -> F,
            ) -> $crate::Result<T> {
                let bound = self.inner.with_owner(self.owner());
                self.lock.client.block_on(operation(bound))?
            }

            fn guard(
                &self,
                guard: $crate::Guard<$crate::$async>,
            ) -> super::Guard<$crate::$async> {
                super::Guard {
                    held: super::Held::new(guard, &self.lock.client),
                }
            }

            /// The lock's name (the Redis key of its hash).
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(lock: ferrisson::blocking::", stringify!($twin), ") {")]
            /// println!("{}", lock.name());
            /// # }
            /// ```
            pub fn name(&self) -> &str {
                self.inner.name()
            }

            /// The same lock acting for `owner` instead of the calling thread.
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(lock: ferrisson::blocking::", stringify!($twin), ") {")]
            /// let owner = ferrisson::Owner::new();
            /// assert_eq!(lock.with_owner(owner).owner(), owner);
            /// # }
            /// ```
            pub fn with_owner(&self, owner: $crate::Owner) -> $twin {
                $twin {
                    lock: self.lock.with_owner(owner),
                    inner: self.inner.clone(),
                }
            }

            /// The owner this handle acts for: the bound owner, or the calling thread.
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(lock: ferrisson::blocking::", stringify!($twin), ") {")]
            /// let me = lock.owner();
            /// # }
            /// ```
            pub fn owner(&self) -> $crate::Owner {
                self.lock.owner()
            }

            /// The blocking reentrant lock on the same hash and owner, for the queries
            /// (`is_locked`, `hold_count`, `remaining_ttl`, ...).
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(lock: ferrisson::blocking::", stringify!($twin), ") -> ferrisson::Result<()> {")]
            /// let guard = lock.lock()?;
            /// assert_eq!(lock.as_lock().hold_count()?, 1);
            /// # Ok(()) }
            /// ```
            pub fn as_lock(&self) -> &super::Lock {
                &self.lock
            }

            #[doc = concat!("Blocks until the lock is acquired; watchdog lease (see [`crate::", stringify!($async), "::lock`]).")]
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(lock: ferrisson::blocking::", stringify!($twin), ") -> ferrisson::Result<()> {")]
            /// lock.lock()?.unlock()?;
            /// # Ok(()) }
            /// ```
            pub fn lock(&self) -> $crate::Result<super::Guard<$crate::$async>> {
                let guard = self.run(|lock| async move { lock.lock().await })?;
                Ok(self.guard(guard))
            }

            #[doc = concat!("Blocks until the lock is acquired; fixed `lease`, no watchdog (see [`crate::", stringify!($async), "::lock_with_lease`]).")]
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(lock: ferrisson::blocking::", stringify!($twin), ") -> ferrisson::Result<()> {")]
            /// let guard = lock.lock_with_lease(std::time::Duration::from_secs(10))?;
            /// # Ok(()) }
            /// ```
            pub fn lock_with_lease(
                &self,
                lease: std::time::Duration,
            ) -> $crate::Result<super::Guard<$crate::$async>> {
                let guard = self.run(|lock| async move { lock.lock_with_lease(lease).await })?;
                Ok(self.guard(guard))
            }

            #[doc = concat!("One attempt without waiting; watchdog lease (see [`crate::", stringify!($async), "::try_lock`]).")]
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(lock: ferrisson::blocking::", stringify!($twin), ") -> ferrisson::Result<()> {")]
            /// if let Some(guard) = lock.try_lock()?.acquired() { guard.unlock()?; }
            /// # Ok(()) }
            /// ```
            pub fn try_lock(
                &self,
            ) -> $crate::Result<$crate::Attempt<super::Guard<$crate::$async>>> {
                let attempt = self.run(|lock| async move { lock.try_lock().await })?;
                Ok(attempt.map(|guard| self.guard(guard)))
            }

            #[doc = concat!("Waits at most `wait`; `lease`, or the watchdog when `None` (see [`crate::", stringify!($async), "::try_lock_for`]).")]
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(lock: ferrisson::blocking::", stringify!($twin), ") -> ferrisson::Result<()> {")]
            /// let attempt = lock.try_lock_for(std::time::Duration::from_secs(1), None)?;
            /// # Ok(()) }
            /// ```
            pub fn try_lock_for(
                &self,
                wait: std::time::Duration,
                lease: Option<std::time::Duration>,
            ) -> $crate::Result<$crate::Attempt<super::Guard<$crate::$async>>> {
                let attempt =
                    self.run(|lock| async move { lock.try_lock_for(wait, lease).await })?;
                Ok(attempt.map(|guard| self.guard(guard)))
            }

            #[doc = concat!("Releases one hold of this handle's owner without a guard (see [`crate::", stringify!($async), "::unlock`]).")]
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(lock: ferrisson::blocking::", stringify!($twin), ") -> ferrisson::Result<()> {")]
            /// lock.lock()?.detach();
            /// lock.unlock()?;
            /// # Ok(()) }
            /// ```
            pub fn unlock(&self) -> $crate::Result<()> {
                self.run(|lock| async move { lock.unlock().await })
            }

            #[doc = concat!("Deletes the lock whoever holds it (see [`crate::", stringify!($async), "::force_unlock`]).")]
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(lock: ferrisson::blocking::", stringify!($twin), ") -> ferrisson::Result<()> {")]
            /// let existed = lock.force_unlock()?;
            /// # Ok(()) }
            /// ```
            pub fn force_unlock(&self) -> $crate::Result<bool> {
                self.lock.client.block_on(self.inner.force_unlock())?
            }
        }
    };
}

pub(super) use twin_methods;
