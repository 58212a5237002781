//! The metrics endpoint of `rdmatrace serve`: `GET /metrics` (Prometheus text format 0.0.4, or
//! OpenMetrics when the scraper's `Accept` asks for it) and `GET /healthz`; any other path is
//! 404 and any other method 405. It listens before the probes load and runs on its own thread,
//! so a scrape during start-up gets a clear 503 instead of a hang.

use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
};

use http_body_util::Full;
use hyper::{
    body::{Bytes, Incoming},
    header::{ACCEPT, CONTENT_TYPE},
    server::conn::http1,
    service::service_fn,
    Method, Request, Response, StatusCode,
};
use hyper_util::rt::TokioIo;
use prometheus_client::{encoding, registry::Registry};

/// `Content-Type` of OpenMetrics text.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug, thiserror::Error)]
pub enum ExporterError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start the metrics thread: {0}")]
    Thread(std::io::Error),
}

/// A running endpoint: its address (the real port when asked for port 0) and whether it
/// says ready.
pub struct Exporter {
    pub addr: SocketAddr,
    ready: Arc<AtomicBool>,
}

impl Exporter {
    /// From now on `/metrics` serves the registry and `/healthz` says ok.
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::SeqCst);
    }
}

/// Binds `addr` now (so a busy port fails before anything loads) and serves `registry` from
/// a thread of its own.
pub fn start(addr: SocketAddr, registry: Arc<Registry>) -> Result<Exporter, ExporterError> {
    let listener = std::net::TcpListener::bind(addr)
        .map_err(|source| ExporterError::Listen { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| ExporterError::Listen { addr, source })?;
    listener
        .set_nonblocking(true)
        .map_err(|source| ExporterError::Listen { addr, source })?;
    let ready = Arc::new(AtomicBool::new(false));
    let state = State {
        registry,
        ready: ready.clone(),
    };
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || serve(listener, state))
        .map_err(ExporterError::Thread)?;
    Ok(Exporter { addr: local, ready })
}

#[derive(Clone)]
struct State {
    registry: Arc<Registry>,
    ready: Arc<AtomicBool>,
}

fn serve(listener: std::net::TcpListener, state: State) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rdmatrace: metrics endpoint off: cannot start its runtime: {e}");
            return;
        }
    };
    rt.block_on(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("rdmatrace: metrics endpoint off: {e}");
                return;
            }
        };
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let state = state.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| {
                    let state = state.clone();
                    async move { Ok::<_, Infallible>(respond(&req, &state)) }
                });
                // A scraper that hangs up mid-request is its own business.
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
}

fn plain(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(text.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn respond(req: &Request<Incoming>, state: &State) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET /metrics and GET /healthz\n",
        );
    }
    let ready = state.ready.load(Ordering::SeqCst);
    match req.uri().path() {
        "/healthz" if ready => plain(StatusCode::OK, "ok\n"),
        "/healthz" => plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "starting: the probes are not attached yet\n",
        ),
        "/metrics" if !ready => plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "rdmatrace is starting: the probes are not attached yet\n",
        ),
        "/metrics" => {
            let openmetrics = req
                .headers()
                .get(ACCEPT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|a| a.contains("application/openmetrics-text"));
            let mut body = String::new();
            let (encoded, content_type) = if openmetrics {
                (
                    encoding::text::encode(&mut body, &state.registry),
                    OPENMETRICS,
                )
            } else {
                (
                    encoding::prometheus_text::encode(&mut body, &state.registry),
                    encoding::prometheus_text::CONTENT_TYPE,
                )
            };
            if let Err(e) = encoded {
                return plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("cannot encode the metrics: {e}\n"),
                );
            }
            let mut r = Response::new(Full::new(Bytes::from(body)));
            r.headers_mut().insert(
                CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(content_type),
            );
            r
        }
        _ => plain(
            StatusCode::NOT_FOUND,
            "not found: rdmatrace serves /metrics and /healthz\n",
        ),
    }
}
