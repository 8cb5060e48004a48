//! The previews' own thread. A preview of a rule over thousands of objects
//! computes every candidate copy: a good part of a second of CPU, with a
//! yield only every few dozen objects. On the agent's runtime, two previews
//! at once held both of its worker threads for milliseconds at a time, and
//! the engine's loop and the watches waited for a worker (BENCHMARKS 2c:
//! the propagation of unrelated changes slowed while a client previewed at
//! the command rate). So previews run here: one at a time, on a thread of
//! their own with a runtime of its own, at a lower CPU priority, so that
//! whatever sync has to do runs first. A few wait their turn; more are
//! refused with when to ask again, and nothing else happens.
//!
//! The thread does no IO of its own: the Kubernetes and NATS clients it
//! calls run their connections on the agent's runtime.

use std::future::Future;
use std::pin::Pin;

use tokio::sync::mpsc;

/// What a preview is: made on the worker's thread (it need not be `Send`).
pub type Job = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()>>> + Send>;

/// Previews waiting their turn, beyond the one running: at the command
/// rate (5/s) a preview taking longer than 200 ms queues the next, and a
/// queue that only grows answers nothing in time.
const QUEUE: usize = 2;

/// How much less the thread weighs with the kernel's scheduler than sync's
/// threads (a nice value: 10 gives it about a tenth of their share when
/// both want the CPU, all of it when sync is idle).
const NICE: i32 = 10;

/// Hands previews to the thread; cheap to clone.
#[derive(Clone)]
pub struct Worker {
    tx: mpsc::Sender<Job>,
}

/// The queue is full (or the thread is gone): ask again later.
#[derive(Debug, thiserror::Error)]
#[error("previews are busy here (one runs, {QUEUE} wait): ask again shortly")]
pub struct Busy;

impl Worker {
    /// Starts the thread; it ends when every `Worker` is dropped.
    pub fn start() -> std::io::Result<Worker> {
        let (tx, rx) = mpsc::channel::<Job>(QUEUE);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name("fleetbus-preview".to_owned())
            .spawn(move || {
                lower_priority();
                runtime.block_on(run(rx));
            })?;
        Ok(Worker { tx })
    }

    /// Queues `job`, or says the queue is full.
    pub fn submit(&self, job: Job) -> Result<(), Busy> {
        self.tx.try_send(job).map_err(|_| Busy)
    }
}

/// Runs the jobs in turn. A job that panics (a bug) is logged and its
/// requester gets no reply (its server answers "ask again"); the thread
/// goes on, so one bad preview does not refuse every later one as busy.
async fn run(mut rx: mpsc::Receiver<Job>) {
    while let Some(job) = rx.recv().await {
        let preview = std::panic::AssertUnwindSafe(job());
        if futures::FutureExt::catch_unwind(preview).await.is_err() {
            tracing::error!("a preview panicked; the previews' thread goes on");
        }
    }
}

/// Lowers this thread's priority (Linux: a thread's nice value is its
/// own). A failure costs only the priority: logged, not fatal.
fn lower_priority() {
    let tid = rustix::thread::gettid();
    if let Err(e) = rustix::process::setpriority_process(Some(tid), NICE) {
        tracing::warn!(error = %e, "could not lower the preview thread's priority");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use tokio::sync::oneshot;

    /// One runs at a time, in order, off the caller's thread; beyond the
    /// queue the caller is told at once, not made to wait.
    #[tokio::test]
    async fn previews_run_one_at_a_time_off_the_runtime_and_a_full_queue_refuses() {
        let worker = Worker::start().unwrap();
        let running = Arc::new(AtomicUsize::new(0));
        let (gate_tx, gate_rx) = oneshot::channel::<()>();
        let mut gate = Some(gate_rx);
        let mut done = Vec::new();
        let caller = std::thread::current().id();
        for i in 0..=QUEUE {
            let (tx, rx) = oneshot::channel();
            done.push(rx);
            let (counter, gate) = (running.clone(), gate.take());
            let job: Job = Box::new(move || {
                Box::pin(async move {
                    assert_eq!(counter.fetch_add(1, Ordering::SeqCst), 0, "two at once");
                    if let Some(gate) = gate {
                        let _ = gate.await;
                    }
                    counter.fetch_sub(1, Ordering::SeqCst);
                    let _ = tx.send((i, std::thread::current().id()));
                })
            });
            worker.submit(job).unwrap();
            if i == 0 {
                // The first holds the thread before the others queue.
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                while running.load(Ordering::SeqCst) == 0 {
                    assert!(std::time::Instant::now() < deadline, "the first never ran");
                    tokio::task::yield_now().await;
                }
            }
        }
        let more: Job = Box::new(|| Box::pin(async {}));
        assert!(worker.submit(more).is_err(), "a full queue must refuse");
        gate_tx.send(()).unwrap();
        for (i, rx) in done.into_iter().enumerate() {
            let (n, thread) = rx.await.unwrap();
            assert_eq!(n, i);
            assert_ne!(thread, caller);
        }
    }

    /// A preview that panics takes neither the thread nor the next one.
    #[tokio::test]
    async fn a_panicking_preview_leaves_the_thread_serving() {
        let worker = Worker::start().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let bad: Job = Box::new(move || {
            Box::pin(async move {
                let _unanswered = tx;
                panic!("a bug in a preview");
            })
        });
        worker.submit(bad).unwrap();
        assert!(rx.await.is_err(), "the panicking job's reply is dropped");
        let (tx, rx) = oneshot::channel();
        let good: Job = Box::new(move || {
            Box::pin(async move {
                let _ = tx.send(42);
            })
        });
        worker.submit(good).unwrap();
        assert_eq!(rx.await.unwrap(), 42);
    }
}
