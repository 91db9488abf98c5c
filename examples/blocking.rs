//! The blocking API: plain threads, no async runtime in sight. Each OS thread is an owner, as a
//! Java thread is for Redisson, so a thread re-enters its own hold and the others wait.
//!
//! ```text
//! cargo run --example blocking                          # redis://127.0.0.1:6379
//! cargo run --example blocking -- redis://host:6379/0   # or REDIS_URL=...
//! ```

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ferrisson::blocking::Client;
use ferrisson::Attempt;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("REDIS_URL").ok())
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url)?;
    let lock = client.lock("example:blocking");

    // Reentrant per thread: the second `lock()` on this thread re-enters.
    let outer = lock.lock()?;
    let inner = lock.lock()?;
    println!("main thread holds it {} times", lock.hold_count()?);

    // Another thread finds it busy, then waits its turn once main releases both holds.
    let other = lock.clone();
    let waiter = std::thread::spawn(move || -> ferrisson::Result<bool> {
        let busy = match other.try_lock()? {
            Attempt::Busy => true,
            Attempt::Acquired(_guard) => false, // released when `_guard` drops
        };
        let guard = other.lock()?;
        guard.unlock()?;
        Ok(busy)
    });
    std::thread::sleep(Duration::from_millis(100));
    inner.unlock()?;
    outer.unlock()?;
    let was_busy = waiter.join().map_err(|_| "waiter thread panicked")??;
    println!("the other thread saw it busy: {was_busy}; then it took and released it");

    // Four threads increment a shared counter under the lock; none overlaps another.
    let inside = Arc::new(AtomicU32::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (lock, inside) = (lock.clone(), Arc::clone(&inside));
            std::thread::spawn(move || -> ferrisson::Result<u32> {
                let mut most = 0;
                for _ in 0..5 {
                    let guard = lock.lock()?;
                    most = most.max(inside.fetch_add(1, Ordering::SeqCst) + 1);
                    std::thread::sleep(Duration::from_millis(2));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.unlock()?;
                }
                Ok(most)
            })
        })
        .collect();
    let mut most = 0;
    for thread in threads {
        most = most.max(thread.join().map_err(|_| "worker thread panicked")??);
    }
    println!("4 threads x 5 critical sections; at most {most} thread inside at once");
    client.shutdown()?;
    Ok(())
}
