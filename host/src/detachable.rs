//! A future awaited in place with what its own task would give it.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Work polled by whoever awaits it, with what spawning it would give: a panic
/// in it ends this work only (`None`), and a caller that stops waiting (a
/// timeout, a client that gives up, a run that is stopped) does not cut it short
/// — what is left is spawned and runs to its end.
///
/// Why not spawn it: a task spawned and awaited at once woke the other worker
/// thread, which took the task over, so a request's work went back and forth
/// between the threads (a demo run at c=1: p50 0.98–1.01 ms spawned, 0.90–0.93
/// ms awaited in place).
pub(crate) struct Detachable<F: Future + Send + 'static>(Option<Pin<Box<F>>>)
where
    F::Output: Send;

impl<F: Future + Send + 'static> Detachable<F>
where
    F::Output: Send,
{
    pub(crate) fn new(work: F) -> Self {
        Self(Some(Box::pin(work)))
    }
}

impl<F: Future + Send + 'static> Future for Detachable<F>
where
    F::Output: Send,
{
    type Output = Option<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(work) = self.0.as_mut() else {
            return Poll::Ready(None);
        };
        match std::panic::catch_unwind(AssertUnwindSafe(|| work.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(done)) => {
                self.0 = None;
                Poll::Ready(Some(done))
            }
            // Work that panicked is dropped, never polled again.
            Err(_) => {
                self.0 = None;
                Poll::Ready(None)
            }
        }
    }
}

impl<F: Future + Send + 'static> Drop for Detachable<F>
where
    F::Output: Send,
{
    fn drop(&mut self) {
        if let Some(rest) = self.0.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(rest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[tokio::test]
    async fn work_given_up_on_runs_to_its_end() {
        let finished = Arc::new(AtomicBool::new(false));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let work = {
            let finished = finished.clone();
            Detachable::new(async move {
                let _ = rx.await;
                finished.store(true, Ordering::SeqCst);
            })
        };
        let waited = tokio::time::timeout(std::time::Duration::from_millis(20), work).await;
        assert!(waited.is_err(), "the work cannot end before it is let go");
        tx.send(()).unwrap();
        for _ in 0..100 {
            if finished.load(Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        panic!("the work was cut short when its caller stopped waiting");
    }

    #[tokio::test]
    async fn a_panic_ends_the_work_not_its_caller() {
        let work = Detachable::new(async {
            if std::hint::black_box(true) {
                panic!("a handler's bug");
            }
            1
        });
        assert_eq!(work.await, None);
        assert_eq!(Detachable::new(async { 2 }).await, Some(2));
    }
}
