//! The accept loop: hyper's HTTP/1 server under the limits a service on a network needs,
//! which `axum::serve` does not set (written here because axum offers no hook for them):
//!
//! - **Slow clients** (slowloris): a request's head must arrive within
//!   [`ConnLimits::header_timeout`], on every request of a kept-alive connection too, or the
//!   connection is closed. A slow *body* is bounded by the request timeout of the routes.
//! - **Connections**: at most [`ConnLimits::max_connections`] at once; the next waits in the
//!   kernel's backlog until one closes, so many idle sockets cannot exhaust file
//!   descriptors.
//! - **The peer's address** is put on each request (axum's `ConnectInfo`), for the limit on
//!   failed keys ([`crate::auth::Failures`]) and the log.
//!
//! On shutdown the listener closes, open connections finish the request in hand, and the
//! loop returns once they have.

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

/// Limits of the connections themselves (a request's own are [`crate::Limits`]).
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    /// How long a request's head (request line and headers) may take to arrive.
    pub header_timeout: Duration,
    /// How many connections may be open at once.
    pub max_connections: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            header_timeout: Duration::from_secs(10),
            max_connections: 1024,
        }
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then waits for the open
/// connections to finish.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let (closing, closed) = watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            s = Arc::clone(&slots).acquire_owned() => match s {
                Ok(s) => s,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait, do not spin.
                    tracing::warn!("cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let app = app.clone();
        let mut closed = closed.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                let mut app = app.clone();
                async move { tower_service::Service::call(&mut app, req).await }
            });
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .keep_alive(true);
            let conn = http.serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!("connection from {peer}: {e}");
                    }
                }
                _ = async { closed.wait_for(|c| *c).await.map(|_| ()) } => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    drop(listener);
    let _ = closing.send(true);
    // Every connection holds a slot until it ends.
    let _ = slots
        .acquire_many(limits.max_connections.max(1) as u32)
        .await;
    Ok(())
}
