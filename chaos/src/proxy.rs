//! A TCP proxy the chaos runner controls, put between an agent and what it
//! talks to (NATS, its API server), so that network faults can be injected
//! without root, network namespaces or clocks: every fault is a state of the
//! proxy, switched at once for every connection through it.
//!
//! The faults are the ones real networks produce:
//! - [`Fault::Cut`]: every connection is closed and new ones are closed as
//!   soon as they are accepted (a peer that went away, a firewall's RST);
//! - [`Fault::Stall`]: connections stay open but nothing moves in either
//!   direction (a partition without RST: the client finds out by timeout);
//! - [`Fault::HalfOpen`]: the client's bytes still arrive, the answers never
//!   come back;
//! - [`Fault::Delay`]: every chunk waits before it is forwarded (latency);
//! - [`Fault::Latency`]: only the client's chunks wait (a request, which is
//!   one chunk, is answered that much later; answers and watch streams flow
//!   at full speed): a slow or distant API server;
//! - [`Fault::Throttle`]: at most so many bytes a second each way;
//! - [`Fault::Drop`]: chunks are read and thrown away (loss that TCP did not
//!   repair: the protocol above sees a corrupt stream and reconnects);
//! - [`Fault::DropAcks`]: on a NATS link, JetStream's acknowledgements alone
//!   are left out (consumer acks and publish acks, see [`acks`]), so that
//!   consumers get messages again and publishers publish again.
//!
//! Bytes are never reordered: one task per direction forwards chunk after
//! chunk. A stalled direction stops reading, so TCP's own back-pressure holds
//! the sender; when the fault ends, the held bytes flow on, none lost.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinHandle};

mod acks;

/// What the proxy does to the traffic through it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fault {
    /// Forward everything as it comes.
    #[default]
    Pass,
    /// Close every connection; close new ones at once.
    Cut,
    /// Keep connections open, forward nothing either way.
    Stall,
    /// Forward client → upstream; hold upstream → client.
    HalfOpen,
    /// Forward every chunk after this long.
    Delay(Duration),
    /// Forward client → upstream chunks after this long, the rest at once.
    Latency(Duration),
    /// Forward at most this many bytes a second in each direction.
    Throttle(u64),
    /// Read and discard everything, both ways.
    Drop,
    /// Forward everything but JetStream acknowledgements (NATS links only;
    /// other protocols pass untouched).
    DropAcks,
}

/// Which way a chunk goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    /// Client → upstream.
    Up,
    /// Upstream → client.
    Down,
}

/// What a direction does with its next chunk under `fault`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Forward,
    /// Forward after waiting this long.
    After(Duration),
    /// Do not read until the fault changes.
    Hold,
    /// Read and throw away.
    Discard,
    /// End the connection.
    Close,
}

/// The pure decision: what one direction does under one fault, for a chunk
/// of `len` bytes.
fn verdict(fault: Fault, way: Way, len: usize) -> Verdict {
    match fault {
        Fault::Pass => Verdict::Forward,
        Fault::Cut => Verdict::Close,
        Fault::Stall => Verdict::Hold,
        Fault::HalfOpen if way == Way::Down => Verdict::Hold,
        Fault::HalfOpen => Verdict::Forward,
        Fault::Delay(d) => Verdict::After(d),
        Fault::Latency(d) if way == Way::Up => Verdict::After(d),
        Fault::Latency(_) => Verdict::Forward,
        Fault::Throttle(0) => Verdict::Hold,
        Fault::Throttle(rate) => Verdict::After(Duration::from_secs_f64(len as f64 / rate as f64)),
        Fault::Drop => Verdict::Discard,
        // The protocol reader of each direction leaves the acks out.
        Fault::DropAcks => Verdict::Forward,
    }
}

/// What went through the proxy, for a scenario's report.
#[derive(Debug, Default)]
pub struct Counters {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Bytes forwarded client → upstream.
    pub up: AtomicU64,
    /// Bytes forwarded upstream → client.
    pub down: AtomicU64,
    /// Bytes read and thrown away ([`Fault::Drop`]).
    pub dropped: AtomicU64,
    /// JetStream acknowledgements left out ([`Fault::DropAcks`]).
    pub acks_dropped: AtomicU64,
}

/// A running proxy: listens on a loopback port, forwards to `upstream`.
/// Stops (and closes every connection) when dropped.
pub struct Proxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    fault: watch::Sender<Fault>,
    counters: Arc<Counters>,
    conns: Arc<Mutex<Vec<AbortHandle>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Starts a proxy on `127.0.0.1:0` to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (fault, _) = watch::channel(Fault::Pass);
        let counters = Arc::new(Counters::default());
        let conns = Arc::new(Mutex::new(Vec::new()));
        let accept = tokio::spawn(accept_loop(
            listener,
            upstream,
            fault.clone(),
            counters.clone(),
            conns.clone(),
        ));
        Ok(Proxy {
            addr,
            upstream,
            fault,
            counters,
            conns,
            accept,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where the proxy forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Switches every connection (and every new one) to `fault` at once.
    pub fn set(&self, fault: Fault) {
        // Under the connection list's lock, like the accept loop's check and
        // push: a connection accepted while the cut is being set is either
        // in the list (and closed here) or sees the cut (and is refused).
        let mut conns = lock(&self.conns);
        self.fault.send_replace(fault);
        if fault == Fault::Cut {
            // Closed now, not when their next chunk arrives.
            for c in conns.drain(..) {
                c.abort();
            }
        }
    }

    /// The fault in force.
    pub fn fault(&self) -> Fault {
        *self.fault.borrow()
    }

    /// What went through so far.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        for c in lock(&self.conns).drain(..) {
            c.abort();
        }
    }
}

/// The connection list survives a panicking holder (nothing it guards can be
/// left half-changed: a Vec push or drain).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    fault: watch::Sender<Fault>,
    counters: Arc<Counters>,
    conns: Arc<Mutex<Vec<AbortHandle>>>,
) {
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            // Out of file descriptors and the like: the condition lasts, so
            // wait a little instead of spinning on it.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        counters.connections.fetch_add(1, Ordering::Relaxed);
        // See `Proxy::set`: checked and registered under the list's lock.
        let mut list = lock(&conns);
        if *fault.borrow() == Fault::Cut {
            drop(client);
            continue;
        }
        let task = tokio::spawn(connection(
            client,
            upstream,
            fault.subscribe(),
            counters.clone(),
        ));
        list.retain(|c| !c.is_finished());
        list.push(task.abort_handle());
    }
}

/// One client connection: connects upstream, then forwards both ways until
/// either side closes or the proxy cuts it.
async fn connection(
    client: TcpStream,
    upstream: SocketAddr,
    fault: watch::Receiver<Fault>,
    counters: Arc<Counters>,
) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_r, client_w) = client.into_split();
    let (server_r, server_w) = server.into_split();
    let up = pump(client_r, server_w, Way::Up, fault.clone(), counters.clone());
    let down = pump(server_r, client_w, Way::Down, fault, counters);
    // Either direction ending ends the connection (both halves dropped).
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}

/// Forwards one direction chunk by chunk, asking [`verdict`] before each read.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    way: Way,
    mut fault: watch::Receiver<Fault>,
    counters: Arc<Counters>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    // Follows the protocol at all times, so that it knows where frames
    // start when DropAcks is set in the middle of the stream.
    let mut reader = acks::Reader::default();
    loop {
        // Held: do not read (back-pressure) until the fault changes.
        if verdict(*fault.borrow(), way, 0) == Verdict::Hold {
            if fault.changed().await.is_err() {
                return;
            }
            continue;
        }
        let n = tokio::select! {
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            // A new fault (e.g. Stall) applies before the next chunk.
            changed = fault.changed() => {
                if changed.is_err() {
                    return;
                }
                continue;
            }
        };
        // The fault may have changed while we waited for the chunk.
        let mut v = verdict(*fault.borrow(), way, n);
        while v == Verdict::Hold {
            if fault.changed().await.is_err() {
                return;
            }
            v = verdict(*fault.borrow(), way, n);
        }
        match v {
            Verdict::Close => return,
            Verdict::Discard => {
                counters.dropped.fetch_add(n as u64, Ordering::Relaxed);
                continue;
            }
            Verdict::After(d) => tokio::time::sleep(d).await,
            Verdict::Forward | Verdict::Hold => {}
        }
        let fed = reader.feed(&buf[..n], *fault.borrow() == Fault::DropAcks);
        counters
            .acks_dropped
            .fetch_add(fed.dropped, Ordering::Relaxed);
        if to.write_all(&fed.forward).await.is_err() {
            return;
        }
        let counter = match way {
            Way::Up => &counters.up,
            Way::Down => &counters.down,
        };
        counter.fetch_add(fed.forward.len() as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::timeout;

    /// An echo server on loopback: what it reads, it writes back.
    async fn echo() -> SocketAddr {
        let l = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn roundtrip(s: &mut TcpStream, msg: &[u8], within: Duration) -> Option<Vec<u8>> {
        s.write_all(msg).await.ok()?;
        let mut got = vec![0u8; msg.len()];
        timeout(within, s.read_exact(&mut got)).await.ok()?.ok()?;
        Some(got)
    }

    const SOON: Duration = Duration::from_secs(5);
    const NOT: Duration = Duration::from_millis(200);

    #[test]
    fn verdicts() {
        assert_eq!(verdict(Fault::Pass, Way::Up, 10), Verdict::Forward);
        assert_eq!(verdict(Fault::Cut, Way::Down, 10), Verdict::Close);
        assert_eq!(verdict(Fault::Stall, Way::Up, 10), Verdict::Hold);
        assert_eq!(verdict(Fault::HalfOpen, Way::Up, 10), Verdict::Forward);
        assert_eq!(verdict(Fault::HalfOpen, Way::Down, 10), Verdict::Hold);
        assert_eq!(verdict(Fault::Drop, Way::Down, 10), Verdict::Discard);
        let d = Duration::from_millis(50);
        assert_eq!(verdict(Fault::Latency(d), Way::Up, 10), Verdict::After(d));
        assert_eq!(verdict(Fault::Latency(d), Way::Down, 10), Verdict::Forward);
        assert_eq!(
            verdict(Fault::Throttle(1000), Way::Up, 500),
            Verdict::After(Duration::from_millis(500))
        );
        assert_eq!(verdict(Fault::Throttle(0), Way::Up, 1), Verdict::Hold);
    }

    #[tokio::test]
    async fn passes_then_stalls_then_resumes_without_loss() {
        let p = Proxy::start(echo().await).await.unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut s, b"one", SOON).await.unwrap(), b"one");

        p.set(Fault::Stall);
        assert!(roundtrip(&mut s, b"two", NOT).await.is_none(), "stalled");
        p.set(Fault::Pass);
        // The held bytes arrive once the stall ends: nothing was lost.
        let mut got = [0u8; 3];
        timeout(SOON, s.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&got, b"two");
        assert!(p.counters().up.load(Ordering::Relaxed) >= 6);
    }

    #[tokio::test]
    async fn cut_closes_connections_and_refuses_new_ones() {
        let p = Proxy::start(echo().await).await.unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        assert!(roundtrip(&mut s, b"x", SOON).await.is_some());
        p.set(Fault::Cut);
        let mut buf = [0u8; 1];
        let r = timeout(SOON, s.read(&mut buf)).await.unwrap();
        assert!(matches!(r, Ok(0) | Err(_)), "closed: {r:?}");
        let mut fresh = TcpStream::connect(p.addr()).await.unwrap();
        assert!(roundtrip(&mut fresh, b"y", NOT).await.is_none());
        p.set(Fault::Pass);
        let mut healed = TcpStream::connect(p.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut healed, b"z", SOON).await.unwrap(), b"z");
    }

    #[tokio::test]
    async fn half_open_delivers_requests_but_no_answers() {
        let p = Proxy::start(echo().await).await.unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        p.set(Fault::HalfOpen);
        assert!(roundtrip(&mut s, b"ping", NOT).await.is_none());
        // It reached the server (which echoed it): only the answer was held.
        assert!(p.counters().up.load(Ordering::Relaxed) >= 4);
        assert_eq!(p.counters().down.load(Ordering::Relaxed), 0);
        p.set(Fault::Pass);
        let mut got = [0u8; 4];
        timeout(SOON, s.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&got, b"ping");
    }

    #[tokio::test]
    async fn drop_acks_leaves_out_only_the_acks_of_a_nats_stream() {
        let p = Proxy::start(echo().await).await.unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        let ack = b"PUB $JS.ACK.S.c.1.9.9.1.0 4\r\n+ACK\r\n";
        let ping = b"PING\r\n";
        assert_eq!(roundtrip(&mut s, ping, SOON).await.unwrap(), ping);
        p.set(Fault::DropAcks);
        s.write_all(&[&ack[..], ping].concat()).await.unwrap();
        let mut got = [0u8; 6];
        timeout(SOON, s.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            &got, ping,
            "the ack was left out, what follows it went through"
        );
        assert_eq!(p.counters().acks_dropped.load(Ordering::Relaxed), 1);
        p.set(Fault::Pass);
        assert_eq!(roundtrip(&mut s, ack, SOON).await.unwrap(), ack);
    }

    #[tokio::test]
    async fn drop_discards_and_delay_delays() {
        let p = Proxy::start(echo().await).await.unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        p.set(Fault::Drop);
        assert!(roundtrip(&mut s, b"lost", NOT).await.is_none());
        assert!(p.counters().dropped.load(Ordering::Relaxed) >= 4);

        p.set(Fault::Delay(Duration::from_millis(150)));
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        let t0 = tokio::time::Instant::now();
        assert_eq!(roundtrip(&mut s, b"late", SOON).await.unwrap(), b"late");
        // Both directions wait: at least two delays.
        assert!(
            t0.elapsed() >= Duration::from_millis(300),
            "{:?}",
            t0.elapsed()
        );
    }
}
