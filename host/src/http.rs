//! Serving HTTP/1.1 with the limits a public listener needs: a client gets a bounded
//! time to send its headers and its body, an idle keep-alive connection is closed,
//! and connections past a limit are answered 503 at once instead of waiting unseen
//! in the accept queue. Shutdown stops accepting and lets open requests finish.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// Per-listener limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// From a connection's first byte (or the end of its last request) to the end
    /// of the next request's headers.
    pub header_read: Duration,
    /// A request body must have arrived within this (see [`read_body`]).
    pub body_read: Duration,
    /// A connection with no bytes either way for this long is closed once no
    /// request is in flight on it.
    pub idle: Duration,
    /// Open connections at most; more get `503` and are closed.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read: Duration::from_secs(10),
            body_read: Duration::from_secs(10),
            idle: Duration::from_secs(60),
            max_connections: default_max_connections(),
        }
    }
}

/// Half the soft file-descriptor limit (two listeners share it, and the database
/// and the MCP client need some), at most 4096.
pub fn default_max_connections() -> usize {
    let soft = raise_fd_limit();
    ((soft.saturating_sub(128)) / 2).clamp(64, 4096) as usize
}

/// `(soft, hard)` RLIMIT_NOFILE.
// `rlim_t` is u64 here but not on every target.
#[allow(clippy::unnecessary_cast)]
fn nofile_limit() -> (u64, u64) {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit through a valid pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } == 0 {
        (l.rlim_cur as u64, l.rlim_max as u64)
    } else {
        (1024, 1024)
    }
}

/// Raises the soft file-descriptor limit to the hard one (many systems start
/// processes at 1,024 while allowing far more); returns the soft limit now in force.
pub fn raise_fd_limit() -> u64 {
    let (soft, hard) = nofile_limit();
    if soft < hard {
        let l = libc::rlimit {
            rlim_cur: hard as libc::rlim_t,
            rlim_max: hard as libc::rlim_t,
        };
        // SAFETY: setrlimit reads one rlimit through a valid pointer.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) } == 0 {
            return hard;
        }
    }
    soft
}

/// A server task and the token that stops it accepting connections.
pub struct Server {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    pub fn spawn(
        name: &'static str,
        listener: TcpListener,
        router: Router,
        limits: Limits,
    ) -> Self {
        let stop = CancellationToken::new();
        let task = tokio::spawn(accept_loop(name, listener, router, limits, stop.clone()));
        Server { stop, task }
    }

    /// Stops accepting; open connections finish their request and close.
    pub fn stop_accepting(&self) {
        self.stop.cancel();
    }

    /// Stops accepting, then waits (at most `within`) for open requests to end.
    pub async fn stop(self, within: Duration) {
        self.stop.cancel();
        let mut task = self.task;
        if tokio::time::timeout(within, &mut task).await.is_err() {
            task.abort();
        }
    }
}

async fn accept_loop(
    name: &'static str,
    listener: TcpListener,
    router: Router,
    limits: Limits,
    stop: CancellationToken,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let connections = tokio_util::task::TaskTracker::new();
    let mut last_warning: Option<Instant> = None;
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            a = listener.accept() => a,
        };
        let stream = match accepted {
            Ok((s, _)) => s,
            Err(e) => {
                // Out of descriptors, most likely: back off instead of spinning.
                tracing::warn!("caseops: {name} cannot accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if last_warning.is_none_or(|t| t.elapsed() > Duration::from_secs(1)) {
                tracing::warn!(
                    "caseops: {name} has {} connections open, its limit: refusing new ones with 503",
                    limits.max_connections
                );
                last_warning = Some(Instant::now());
            }
            tokio::spawn(refuse(stream));
            continue;
        };
        let _ = stream.set_nodelay(true);
        let stop = stop.clone();
        let router = router.clone();
        connections.spawn(async move {
            serve_connection(stream, router, limits, stop).await;
            drop(slot);
        });
    }
    connections.close();
    connections.wait().await;
}

async fn refuse(mut stream: TcpStream) {
    let answer = b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\ncontent-type: application/problem+json\r\ncontent-length: 96\r\nconnection: close\r\n\r\n{\"title\":\"Service Unavailable\",\"status\":503,\"detail\":\"too many open connections; retry later\"}";
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(answer)).await;
}

async fn serve_connection(
    stream: TcpStream,
    router: Router,
    limits: Limits,
    stop: CancellationToken,
) {
    let started = Instant::now();
    let activity = Arc::new(AtomicU64::new(0));
    let io = TokioIo::new(Watched {
        inner: stream,
        started,
        activity: activity.clone(),
    });
    let service = TowerToHyperService::new(router);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read)
        .keep_alive(true);
    let conn = builder.serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    let mut closing = false;
    let tick = (limits.idle / 4).max(Duration::from_millis(100));
    loop {
        tokio::select! {
            _ = conn.as_mut() => return,
            () = stop.cancelled(), if !closing => {
                conn.as_mut().graceful_shutdown();
                closing = true;
            }
            () = tokio::time::sleep(tick), if !closing => {
                let quiet = (started.elapsed().as_millis() as u64)
                    .saturating_sub(activity.load(Ordering::Relaxed));
                if quiet >= limits.idle.as_millis() as u64 {
                    // Closes at once when idle; a request in flight finishes first.
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
            }
        }
    }
}

/// A stream that records when bytes last moved either way.
struct Watched {
    inner: TcpStream,
    started: Instant,
    activity: Arc<AtomicU64>,
}

impl Watched {
    fn touch(&self) {
        self.activity
            .store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.touch();
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Whether a request's `Content-Type` is `application/json` (parameters allowed,
/// any letter case) — and nothing that merely starts like it.
pub fn is_json(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

/// Why a body could not be read.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyError {
    TooLarge,
    TooSlow,
    Broken,
}

/// Reads a request body of at most `limit` bytes within `within`.
pub async fn read_body(
    body: axum::body::Body,
    limit: usize,
    within: Duration,
) -> Result<axum::body::Bytes, BodyError> {
    match tokio::time::timeout(within, axum::body::to_bytes(body, limit)).await {
        Err(_) => Err(BodyError::TooSlow),
        Ok(Ok(b)) => Ok(b),
        Ok(Err(e)) => {
            // `to_bytes` reports an overrun as a length-limit error in its chain.
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
            while let Some(s) = source {
                if s.is::<http_body_util::LengthLimitError>() {
                    return Err(BodyError::TooLarge);
                }
                source = s.source();
            }
            Err(BodyError::Broken)
        }
    }
}
