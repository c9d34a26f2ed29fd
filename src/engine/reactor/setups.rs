//! The threads that set up a reactor's shared-memory links (`shm.rs`): a set-up blocks on a
//! handshake, so it runs off the reactor thread, on a pool that keeps its threads.
//!
//! A thread per set-up cost more than the set-up: a new stack mapped and, at the thread's end,
//! unmapped, and each unmapping in a process whose threads run on every core flushes every
//! core's TLB (a profile of `bench stabilize --transport shm` had a fifth of the job's time
//! in those flushes, while the new tree's links were set up). Threads that stay are started
//! only when every one is busy: a stranger that stalls its handshake holds one thread for the
//! handshake's timeout, not every set-up behind it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

/// One set-up, run to its end on a pool thread.
pub(super) type Job = Box<dyn FnOnce() + Send>;

/// A reactor's set-up threads. Dropped with the reactor: each thread ends after its job.
pub(super) struct Setups {
    jobs: Sender<Job>,
    queue: Arc<Mutex<Receiver<Job>>>,
    /// Threads waiting for a job and not yet taken for one.
    idle: Arc<AtomicUsize>,
}

impl Setups {
    pub(super) fn new() -> Self {
        let (jobs, queue) = channel();
        Self {
            jobs,
            queue: Arc::new(Mutex::new(queue)),
            idle: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Run `job` on a waiting thread, or on a new one if none waits. Handed back if no
    /// thread could be started.
    pub(super) fn run(&self, job: Job) -> Result<(), (Job, std::io::Error)> {
        // A waiting thread is taken for this job now, so no job ever queues behind a busy one.
        let reserved = self
            .idle
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok();
        if !reserved {
            let (queue, idle) = (self.queue.clone(), self.idle.clone());
            let spawned = std::thread::Builder::new()
                .name("weft-shm-setup".into())
                .spawn(move || work(&queue, &idle));
            if let Err(e) = spawned {
                return Err((job, e));
            }
        }
        self.jobs
            .send(job)
            .map_err(|e| (e.0, std::io::Error::other("set-up threads gone")))
    }
}

/// A pool thread: run jobs until the reactor is gone. It starts taken for the job that
/// started it, and says it waits again after each.
fn work(queue: &Mutex<Receiver<Job>>, idle: &AtomicUsize) {
    loop {
        let job = match queue.lock() {
            Ok(q) => q.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else {
            return;
        };
        job();
        idle.fetch_add(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;
    use std::time::Duration;

    /// A job that blocks does not hold up the next: a thread is added for it; and a thread
    /// that finished takes the next job instead of a new one.
    #[test]
    fn a_blocked_set_up_holds_one_thread_not_the_others() {
        let pool = Setups::new();
        let (release, blocked) = channel::<()>();
        let (done, finished) = channel();
        let d = done.clone();
        pool.run(Box::new(move || {
            let _ = blocked.recv();
            let _ = d.send("blocked");
        }))
        .map_err(|e| e.1)
        .unwrap();
        for _ in 0..3 {
            let d = done.clone();
            pool.run(Box::new(move || {
                let _ = d.send("quick");
            }))
            .map_err(|e| e.1)
            .unwrap();
            assert_eq!(finished.recv_timeout(Duration::from_secs(10)), Ok("quick"));
        }
        release.send(()).unwrap();
        assert_eq!(
            finished.recv_timeout(Duration::from_secs(10)),
            Ok("blocked")
        );
    }
}
