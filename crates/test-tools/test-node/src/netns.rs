//! Sockets in the Docker engine's network namespace.
//!
//! The test cloud runs dockerd in a private network namespace (`scripts/test-cloud.d/zun.sh`),
//! so its bridge networks, the pods' addresses and the Service addresses exist only there,
//! while the Kubernetes API and the external services listen on the host's 127.0.0.1. A
//! socket belongs to the namespace it was created in, whichever thread uses it later; so one
//! thread enters the engine's namespace (`setns`) and only creates sockets there (listeners
//! bound to a Service or relay address, streams the node connects to a pod), and the async
//! code uses them from any thread, next to sockets of the host's namespace.
//!
//! Without a namespace (dockerd in the host's), sockets are plain ones.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use tokio::sync::oneshot;

enum Req {
    Listen(SocketAddr, oneshot::Sender<std::io::Result<TcpListener>>),
    Socket(bool, oneshot::Sender<std::io::Result<OwnedFd>>),
    Run(
        Vec<String>,
        oneshot::Sender<std::io::Result<std::process::Output>>,
    ),
}

/// Where sockets are made.
#[derive(Clone)]
pub struct NetNs {
    path: Option<PathBuf>,
    tx: Option<mpsc::Sender<Req>>,
}

impl std::fmt::Debug for NetNs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NetNs({:?})", self.path)
    }
}

fn new_socket(v6: bool) -> std::io::Result<OwnedFd> {
    let family = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    // SAFETY: socket(2) with constant arguments; the result is checked before use.
    let fd = unsafe {
        libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn serve(path: &Path, rx: mpsc::Receiver<Req>, ready: mpsc::Sender<std::io::Result<()>>) {
    let entered = (|| {
        let f = std::fs::File::open(path)?;
        use std::os::fd::AsRawFd;
        // SAFETY: setns(2) on an open namespace file; affects this thread only.
        if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    })();
    let failed = entered.is_err();
    let _ = ready.send(entered);
    if failed {
        return;
    }
    while let Ok(req) = rx.recv() {
        match req {
            Req::Listen(addr, tx) => {
                let _ = tx.send(TcpListener::bind(addr).and_then(|l| {
                    l.set_nonblocking(true)?;
                    Ok(l)
                }));
            }
            Req::Socket(v6, tx) => {
                let _ = tx.send(new_socket(v6));
            }
            // A child forked from this thread starts in its namespace.
            Req::Run(argv, tx) => {
                let out = match argv.split_first() {
                    Some((cmd, args)) => std::process::Command::new(cmd).args(args).output(),
                    None => Err(std::io::Error::other("empty command")),
                };
                let _ = tx.send(out);
            }
        }
    }
}

impl NetNs {
    /// The host's own namespace.
    pub fn host() -> Self {
        Self {
            path: None,
            tx: None,
        }
    }

    /// The namespace at `path` (`/var/run/netns/x`, `/proc/<pid>/ns/net`); fails when it
    /// cannot be entered (not root, no such file).
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let (rtx, rrx) = mpsc::channel();
        let p = path.to_path_buf();
        std::thread::Builder::new()
            .name("netns".into())
            .spawn(move || serve(&p, rx, rtx))?;
        rrx.recv()
            .map_err(|_| std::io::Error::other("the namespace thread ended"))?
            .map_err(|e| {
                std::io::Error::new(e.kind(), format!("entering {}: {e}", path.display()))
            })?;
        Ok(Self {
            path: Some(path.to_path_buf()),
            tx: Some(tx),
        })
    }

    /// The namespace's path, if not the host's.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    fn send<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<std::io::Result<T>>) -> Req,
    ) -> Result<oneshot::Receiver<std::io::Result<T>>, std::io::Error> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .as_ref()
            .ok_or_else(|| std::io::Error::other("no namespace"))?
            .send(make(tx))
            .map_err(|_| std::io::Error::other("the namespace thread ended"))?;
        Ok(rx)
    }

    /// A listener bound to `addr` in the namespace.
    pub async fn listen(&self, addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
        let std = match self.tx {
            None => {
                let l = TcpListener::bind(addr)?;
                l.set_nonblocking(true)?;
                l
            }
            Some(_) => self
                .send(|tx| Req::Listen(addr, tx))?
                .await
                .map_err(|_| std::io::Error::other("the namespace thread ended"))??,
        };
        tokio::net::TcpListener::from_std(std)
    }

    /// A connection to `addr` from the namespace.
    pub async fn connect(&self, addr: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
        if self.tx.is_none() {
            return tokio::net::TcpStream::connect(addr).await;
        }
        let fd = self
            .send(|tx| Req::Socket(addr.is_ipv6(), tx))?
            .await
            .map_err(|_| std::io::Error::other("the namespace thread ended"))??;
        let sock = tokio::net::TcpSocket::from_std_stream(TcpStream::from(fd));
        sock.connect(addr).await
    }

    /// Runs a command in the namespace (`ip addr add ...`).
    pub async fn run(&self, argv: &[&str]) -> std::io::Result<std::process::Output> {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        if self.tx.is_none() {
            let (cmd, args) = argv
                .split_first()
                .ok_or_else(|| std::io::Error::other("empty command"))?;
            return tokio::process::Command::new(cmd).args(args).output().await;
        }
        self.send(|tx| Req::Run(argv, tx))?
            .await
            .map_err(|_| std::io::Error::other("the namespace thread ended"))?
    }
}
