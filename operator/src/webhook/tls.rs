//! HTTPS for the webhook: a rustls server whose certificate is swapped in place when the
//! Secret (or OLM's mounted files) change, so a rotation needs no restart and drops no
//! connection.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::Semaphore;
use tokio_rustls::rustls::crypto::{ring, CryptoProvider};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::debug;

/// What one client may hold of the server. The API server opens a few keep-alive
/// connections and sends small reviews; anything slower or more is not it, and must not
/// starve it (the eviction webhook fails closed: a starved server blocks drains).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// A client that opens a connection and never finishes the handshake is dropped.
    pub handshake: Duration,
    /// A request whose headers take longer is dropped (a slow client holding a slot).
    pub header_read: Duration,
    /// A connection is closed after this long, between two requests (the API server
    /// opens a new one); it bounds an idle keep-alive connection.
    pub max_age: Duration,
    /// Connections served at once; more wait in the listen backlog.
    pub connections: usize,
    /// On shutdown, how long the reviews under way may take to be answered.
    pub drain: Duration,
}

pub const LIMITS: Limits = Limits {
    handshake: Duration::from_secs(10),
    header_read: Duration::from_secs(10),
    max_age: Duration::from_secs(300),
    connections: 256,
    // The API server gives up on a review after at most 5 s (the disruption webhook's
    // timeout): an answer later than that reaches nobody.
    drain: Duration::from_secs(5),
};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("the certificate is not PEM: {0}")]
    Certificate(String),
    #[error("the private key is not PEM: {0}")]
    Key(String),
    #[error("the key does not go with the certificate: {0}")]
    Mismatch(#[from] tokio_rustls::rustls::Error),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(ring::default_provider())
}

/// A certificate and key, checked to belong together.
pub fn certified_key(crt_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, TlsError> {
    let chain = CertificateDer::pem_slice_iter(crt_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Certificate(e.to_string()))?;
    if chain.is_empty() {
        return Err(TlsError::Certificate("no CERTIFICATE block".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::Key(e.to_string()))?;
    Ok(CertifiedKey::from_der(chain, key, &provider())?)
}

/// The certificate the server presents; empty until the first one is loaded, and then a
/// handshake fails (the API server, with `failurePolicy: Ignore`, goes on without us).
#[derive(Debug, Default)]
pub struct CertSlot(RwLock<Option<Arc<CertifiedKey>>>);

impl CertSlot {
    pub fn set(&self, key: CertifiedKey) {
        // A poisoned lock only means a writer panicked between two whole values.
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(key));
    }

    pub fn is_set(&self) -> bool {
        self.0.read().unwrap_or_else(|e| e.into_inner()).is_some()
    }
}

impl ResolvesServerCert for CertSlot {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

pub fn server_config(slot: Arc<CertSlot>) -> Result<ServerConfig, TlsError> {
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(slot);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Serves `router` over TLS on `listener`, within `limits`, until `stop`: then it
/// accepts no more connections (the listener closes, so new ones are refused), closes
/// the idle ones, lets each review under way be answered and returns once every
/// connection has closed, or after `limits.drain`. An API server cut off in the middle
/// of a review counts it as the webhook failing: for the disruption webhook, which fails
/// closed, a refused eviction that `kubectl drain` does not retry.
pub async fn serve(
    listener: tokio::net::TcpListener,
    slot: Arc<CertSlot>,
    router: Router,
    limits: Limits,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let config = server_config(slot).map_err(std::io::Error::other)?;
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let slots = Arc::new(Semaphore::new(limits.connections));
    let connections = TaskTracker::new();
    loop {
        // Waiting for a free slot leaves new connections in the kernel's backlog.
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = stop.cancelled() => break,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.cancelled() => break,
        };
        let (tcp, peer) = match accepted {
            Ok(c) => c,
            // Out of file descriptors and the like: the listener itself still works.
            Err(e) => {
                debug!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let (acceptor, router, stop) = (acceptor.clone(), router.clone(), stop.clone());
        connections.spawn(async move {
            let _permit = permit;
            let tls = match tokio::time::timeout(limits.handshake, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => return debug!(%peer, "TLS handshake timed out"),
            };
            let service = TowerToHyperService::new(router);
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read)
                .serve_connection(TokioIo::new(tls), service);
            tokio::pin!(conn);
            let ended = tokio::select! {
                ended = conn.as_mut() => ended,
                // Closes now if idle, else after the request under way.
                _ = tokio::time::sleep(limits.max_age) => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
                _ = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = ended {
                debug!(%peer, error = %e, "webhook connection ended with an error");
            }
        });
    }
    drop(listener);
    connections.close();
    if tokio::time::timeout(limits.drain, connections.wait())
        .await
        .is_err()
    {
        debug!(
            "webhook connections still open after {:?}; closing them",
            limits.drain
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::certs::{carry_out, CertAction, Certs, LIFETIMES};
    use rustls_pki_types::ServerName;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::rustls::{ClientConfig, RootCertStore};
    use tokio_rustls::TlsConnector;

    const NOW: i64 = 1_800_000_000;

    fn issue(hosts: &[&str]) -> Certs {
        let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(NOW, |d| i64::try_from(d.as_secs()).unwrap_or(NOW));
        carry_out(&CertAction::Create, now, None, &hosts, &LIFETIMES)
            .expect("issues")
            .expect("some")
    }

    /// A TLS handshake, as the API server makes it: trusting only `ca_bundle`, for `host`.
    async fn handshake(slot: Arc<CertSlot>, ca_bundle: &str, host: &str) -> Result<(), String> {
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca_bundle.as_bytes()) {
            roots
                .add(c.map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        }
        let client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let server = TlsAcceptor::from(Arc::new(server_config(slot).map_err(|e| e.to_string())?));
        let (a, b) = tokio::io::duplex(64 * 1024);
        let served = tokio::spawn(async move {
            let mut s = server.accept(b).await.map_err(|e| e.to_string())?;
            s.write_all(b"ok").await.map_err(|e| e.to_string())?;
            s.shutdown().await.map_err(|e| e.to_string())
        });
        let name = ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
        let mut c = TlsConnector::from(Arc::new(client))
            .connect(name, a)
            .await
            .map_err(|e| e.to_string())?;
        let mut got = Vec::new();
        c.read_to_end(&mut got).await.map_err(|e| e.to_string())?;
        served.await.map_err(|e| e.to_string())??;
        (got == b"ok")
            .then_some(())
            .ok_or_else(|| "no reply".into())
    }

    #[tokio::test]
    async fn the_issued_certificate_is_trusted_through_the_bundle_only() {
        let certs = issue(&["wh.op.svc", "127.0.0.1"]);
        let slot = Arc::new(CertSlot::default());
        slot.set(
            certified_key(certs.tls_crt.as_bytes(), certs.tls_key.as_bytes()).expect("key matches"),
        );
        handshake(slot.clone(), &certs.ca_bundle(), "wh.op.svc")
            .await
            .expect("trusted by name");
        handshake(slot.clone(), &certs.ca_bundle(), "127.0.0.1")
            .await
            .expect("trusted by IP");
        let e = handshake(slot.clone(), &certs.ca_bundle(), "other.op.svc").await;
        assert!(e.is_err(), "a host not in the certificate must fail");
        let stranger = issue(&["wh.op.svc"]);
        let e = handshake(slot, &stranger.ca_bundle(), "wh.op.svc").await;
        assert!(e.is_err(), "another CA must not be trusted");
    }

    /// Verified at the real time (rustls checks validity against the clock): the old CA
    /// was issued long enough ago that its rotation is due now.
    #[tokio::test]
    async fn a_rotated_ca_still_trusts_the_old_certificate_and_then_the_new_one() {
        let hosts = vec!["wh.op.svc".to_string()];
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(NOW, |d| i64::try_from(d.as_secs()).unwrap_or(NOW));
        let step = |action, at, c: Option<Certs>| {
            carry_out(&action, at, c, &hosts, &LIFETIMES)
                .expect("issues")
                .expect("some")
        };
        let long_ago = now - (LIFETIMES.ca_secs - LIFETIMES.ca_secs / 3) - 60;
        let old = step(
            CertAction::IssueServing,
            now,
            Some(step(CertAction::Create, long_ago, None)),
        );
        let rotated = step(CertAction::RotateCa, now, Some(old.clone()));
        let slot = Arc::new(CertSlot::default());
        slot.set(certified_key(old.tls_crt.as_bytes(), old.tls_key.as_bytes()).expect("key"));
        handshake(slot.clone(), &rotated.ca_bundle(), "wh.op.svc")
            .await
            .expect("old cert, new bundle");
        let reissued = step(CertAction::IssueServing, now, Some(rotated.clone()));
        slot.set(
            certified_key(reissued.tls_crt.as_bytes(), reissued.tls_key.as_bytes()).expect("key"),
        );
        handshake(slot.clone(), &rotated.ca_bundle(), "wh.op.svc")
            .await
            .expect("new cert, bundle of both");
        handshake(slot.clone(), &rotated.ca_crt, "wh.op.svc")
            .await
            .expect("signed by the new CA");
        let e = handshake(slot, &old.ca_crt, "wh.op.svc").await;
        assert!(
            e.is_err(),
            "the new certificate is not signed by the old CA"
        );
    }

    #[test]
    fn a_key_that_does_not_match_is_refused() {
        let a = issue(&["a"]);
        let b = issue(&["a"]);
        assert!(certified_key(a.tls_crt.as_bytes(), b.tls_key.as_bytes()).is_err());
        assert!(certified_key(b"junk", a.tls_key.as_bytes()).is_err());
    }

    /// A TLS client of `addr`, trusting `ca_bundle`.
    async fn connect(
        addr: std::net::SocketAddr,
        ca_bundle: &str,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca_bundle.as_bytes()) {
            roots.add(c.expect("pem")).expect("root");
        }
        let client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        let name = ServerName::try_from("127.0.0.1").expect("name");
        TlsConnector::from(Arc::new(client))
            .connect(name, tcp)
            .await
    }

    /// A certificate for 127.0.0.1, loaded, and a listener on a free loopback port.
    async fn serving() -> (
        Certs,
        Arc<CertSlot>,
        tokio::net::TcpListener,
        std::net::SocketAddr,
    ) {
        let certs = issue(&["127.0.0.1"]);
        let slot = Arc::new(CertSlot::default());
        slot.set(certified_key(certs.tls_crt.as_bytes(), certs.tls_key.as_bytes()).expect("key"));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        (certs, slot, listener, addr)
    }

    /// A client that sends no request is dropped after the header timeout, and while
    /// the only slot is held a second client is not served: a slow client cannot hold
    /// the server longer than that, nor take more than the slots.
    #[tokio::test]
    async fn slow_clients_are_dropped_and_connections_are_capped() {
        let (certs, slot, listener, addr) = serving().await;
        let limits = Limits {
            handshake: Duration::from_secs(5),
            header_read: Duration::from_millis(300),
            max_age: Duration::from_secs(60),
            connections: 1,
            drain: Duration::from_secs(1),
        };
        let router = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let server = tokio::spawn(serve(
            listener,
            slot,
            router,
            limits,
            CancellationToken::new(),
        ));
        let bundle = certs.ca_bundle();
        let started = std::time::Instant::now();
        let mut silent = connect(addr, &bundle).await.expect("first client");
        // The only slot is taken: a second client's handshake is not answered meanwhile.
        let second = tokio::time::timeout(Duration::from_millis(150), connect(addr, &bundle)).await;
        assert!(
            second.is_err(),
            "a second connection was served beside the first"
        );
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(3), silent.read(&mut buf)).await;
        let closed_after = started.elapsed();
        assert!(
            matches!(read, Ok(Ok(0)) | Ok(Err(_))),
            "the silent client was not dropped: {read:?}"
        );
        assert!(
            closed_after >= Duration::from_millis(250) && closed_after < Duration::from_secs(2),
            "dropped after {closed_after:?}"
        );
        // The slot is free again: a client that asks is answered.
        let mut c = connect(addr, &bundle).await.expect("third client");
        c.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .expect("write");
        let mut reply = Vec::new();
        let _ = c.read_to_end(&mut reply).await;
        assert!(String::from_utf8_lossy(&reply).ends_with("ok"), "{reply:?}");
        server.abort();
    }

    /// Reads one HTTP/1.1 response with a `content-length` body from `c`.
    async fn response<S: tokio::io::AsyncRead + Unpin>(c: &mut S) -> String {
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            let text = String::from_utf8_lossy(&got).to_string();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length: ")
                            .map(String::from)
                    })
                    .and_then(|n| n.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if body.len() >= length {
                    return text;
                }
            }
            match c.read(&mut buf).await {
                Ok(0) | Err(_) => return String::from_utf8_lossy(&got).to_string(),
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    }

    /// On stop, the server refuses new connections, closes an idle keep-alive one, and
    /// still answers the review under way before it returns.
    #[tokio::test]
    async fn a_stopped_server_answers_the_review_under_way_and_takes_no_more() {
        let (certs, slot, listener, addr) = serving().await;
        let (arrived_tx, arrived) = tokio::sync::oneshot::channel::<()>();
        let arrived_tx = Arc::new(std::sync::Mutex::new(Some(arrived_tx)));
        let release = Arc::new(tokio::sync::Notify::new());
        let held = release.clone();
        let router = Router::new()
            .route("/fast", axum::routing::get(|| async { "fast" }))
            .route(
                "/slow",
                axum::routing::get(move || {
                    let (arrived_tx, held) = (arrived_tx.clone(), held.clone());
                    async move {
                        if let Some(tx) = arrived_tx.lock().expect("lock").take() {
                            let _ = tx.send(());
                        }
                        held.notified().await;
                        "answered"
                    }
                }),
            );
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, slot, router, LIMITS, stop.clone()));
        let bundle = certs.ca_bundle();
        // An idle keep-alive connection, as the API server keeps them.
        let mut idle = connect(addr, &bundle).await.expect("idle client");
        idle.write_all(b"GET /fast HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .expect("write");
        assert!(response(&mut idle).await.ends_with("fast"));
        // A review under way.
        let mut busy = connect(addr, &bundle).await.expect("busy client");
        busy.write_all(b"GET /slow HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .expect("write");
        arrived.await.expect("the slow request arrived");
        stop.cancel();
        let mut buf = [0u8; 16];
        let closed = tokio::time::timeout(Duration::from_secs(3), idle.read(&mut buf)).await;
        assert!(
            matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
            "the idle connection stays open: {closed:?}"
        );
        let refused = tokio::time::timeout(Duration::from_secs(3), connect(addr, &bundle)).await;
        assert!(
            matches!(refused, Ok(Err(_))),
            "a new connection was accepted after the stop"
        );
        assert!(
            !server.is_finished(),
            "the server returned with a review under way"
        );
        release.notify_one();
        assert!(response(&mut busy).await.ends_with("answered"));
        tokio::time::timeout(Duration::from_secs(3), server)
            .await
            .expect("the server returns once the review is answered")
            .expect("task")
            .expect("served");
    }
}
