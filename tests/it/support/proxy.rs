//! A small TCP proxy for fault tests: the service connects to PostgreSQL through it, and the
//! test can stall the traffic or cut every connection. Upstream is the cluster's unix socket.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixStream};
use tokio::sync::watch;
use tokio::task::AbortHandle;

/// A running proxy.
pub struct Proxy {
    pub port: u16,
    stalled: watch::Sender<bool>,
    conns: Arc<Mutex<Vec<AbortHandle>>>,
    accept: AbortHandle,
}

impl Proxy {
    /// A fresh migrated database on the shared cluster, and a proxy in front of it. Returns the
    /// proxy, the direct connection string (for the test's own sessions) and the one through
    /// the proxy (for the service).
    pub async fn to_fresh_database() -> (Proxy, String, String) {
        let cluster = super::pg::shared_cluster();
        let direct = cluster.fresh_database().await;
        let dbname = direct
            .split("dbname=")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .expect("a connection string names its database")
            .to_owned();
        let proxy = Proxy::start(
            cluster
                .socket_dir()
                .join(format!(".s.PGSQL.{}", cluster.port())),
        )
        .await;
        let through = proxy.url(&dbname);
        (proxy, direct, through)
    }

    /// Listens on a free loopback port and forwards each connection to `upstream` (a unix socket).
    pub async fn start(upstream: PathBuf) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (stalled, stall_rx) = watch::channel(false);
        let conns: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let c2 = conns.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let Ok(server) = UnixStream::connect(&upstream).await else {
                    continue;
                };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                let a = tokio::spawn(pump(cr, sw, stall_rx.clone()));
                let b = tokio::spawn(pump(sr, cw, stall_rx.clone()));
                let mut v = c2.lock().unwrap();
                v.push(a.abort_handle());
                v.push(b.abort_handle());
            }
        })
        .abort_handle();
        Proxy {
            port,
            stalled,
            conns,
            accept,
        }
    }

    /// A tokio-postgres connection string through the proxy to `dbname`.
    pub fn url(&self, dbname: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname={dbname} connect_timeout=2",
            self.port
        )
    }

    /// Stops forwarding bytes (connections stay open) until [`Proxy::resume`].
    pub fn stall(&self) {
        let _ = self.stalled.send(true);
    }

    /// Forwards bytes again.
    pub fn resume(&self) {
        let _ = self.stalled.send(false);
    }

    /// Cuts every open connection (both directions closed at once).
    pub fn cut(&self) {
        for h in self.conns.lock().unwrap().drain(..) {
            h.abort();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

async fn pump(
    mut from: impl AsyncReadExt + Unpin,
    mut to: impl AsyncWriteExt + Unpin,
    mut stalled: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while *stalled.borrow() {
            if stalled.changed().await.is_err() {
                return;
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
