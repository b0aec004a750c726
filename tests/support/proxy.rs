//! A TCP proxy between one client and the API server that can stall the way a dead link
//! does: while stalled it relays nothing and answers nothing, but keeps every connection
//! open (new ones are accepted and left hanging too); healed, it drops the connections it
//! held (as a reset link would, so nothing stalled is delivered late) and relays new ones.
//! Its connections to the server come from 127.0.0.2, so the API server's audit log tells
//! the requests of its client from everyone else's by source address.

use std::net::SocketAddr;

use anyhow::{Context, Result};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The source address of everything the proxy sends to the server.
pub const SOURCE_IP: &str = "127.0.0.2";

pub struct StallingProxy {
    pub addr: SocketAddr,
    stalled: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl StallingProxy {
    /// Listens on a free loopback port and relays to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Result<StallingProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (stalled, watch_rx) = watch::channel(false);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, upstream, watch_rx.clone()));
            }
        });
        Ok(StallingProxy {
            addr,
            stalled,
            task,
        })
    }

    pub fn stall(&self) {
        let _ = self.stalled.send(true);
    }

    pub fn heal(&self) {
        let _ = self.stalled.send(false);
    }
}

impl Drop for StallingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn connect_from_second_loopback(upstream: SocketAddr) -> Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(format!("{SOURCE_IP}:0").parse()?)?;
    socket
        .connect(upstream)
        .await
        .context("connecting to the API server")
}

/// Relays one connection until either side closes it or the proxy stalls; a stalled
/// connection is held, silent, until the proxy heals, then dropped.
async fn relay(mut client: TcpStream, upstream: SocketAddr, stalled: watch::Receiver<bool>) {
    let hold = |mut stalled: watch::Receiver<bool>| async move {
        let _ = stalled.wait_for(|s| !*s).await;
    };
    let stalled_now = *stalled.borrow();
    if stalled_now {
        return hold(stalled).await;
    }
    let Ok(mut server) = connect_from_second_loopback(upstream).await else {
        return;
    };
    let mut watching = stalled.clone();
    let stalled_midway = tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => false,
        r = watching.wait_for(|s| *s) => r.is_ok(),
    };
    if stalled_midway {
        hold(stalled).await;
    }
}
