//! The simulated network's parts: the server's host, one link host per
//! contender (a forwarder with the faults of the harness's fault proxy), and
//! the dialer that sends every client of the simulation's thread over
//! turmoil's TCP.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::{mpsc, oneshot, watch};
use turmoil::net::{TcpListener, TcpStream};
use zk_curator::framework::zk;
use zk_curator_server::codec::{next_frame, Framed};
use zk_curator_server::EmbeddedServer;

use zk_curator_chaos::{Link, Place, SimServer};

/// The port every simulated host serves on.
pub const PORT: u16 = 2181;
/// The server's host name.
pub const SERVER: &str = "zk";

/// Dials turmoil's TCP: set as the thread's dialer, it carries every
/// ZooKeeper client of the simulation. A connection to a link host is
/// read through a [`Tap`] that tells the link what its client was told.
#[derive(Debug, Default)]
pub struct TurmoilDialer {
    /// Each link host's record, by host name.
    taps: Mutex<BTreeMap<String, Told>>,
}

impl TurmoilDialer {
    /// Taps the connections to `link`'s host into its record.
    pub fn tap(&self, link: &LinkControl) {
        if let Ok(mut taps) = self.taps.lock() {
            taps.insert(link.host.clone(), link.told.clone());
        }
    }
}

impl zk::Dialer for TurmoilDialer {
    fn dial(
        &self,
        host: &str,
        port: u16,
    ) -> BoxFuture<'static, std::io::Result<Box<dyn zk::DialedStream>>> {
        let told = self
            .taps
            .lock()
            .ok()
            .and_then(|taps| taps.get(host).cloned());
        let host = host.to_owned();
        Box::pin(async move {
            let stream = TcpStream::connect((host, port)).await?;
            Ok(match told {
                Some(told) => Box::new(Tap::new(stream, told)) as Box<dyn zk::DialedStream>,
                None => Box::new(stream),
            })
        })
    }
}

/// What a link's connections told their clients: each node whose deletion
/// a watch notification announced, with the harness's
/// [`sequence`](zk_curator_chaos::sequence) number of the moment the
/// client was handed it.
type Told = Arc<Mutex<Vec<(String, u64)>>>;

/// A client's side of a connection, reading the server's frames as the
/// client is handed them (it changes nothing): the client dispatches each
/// notification as it reads it, so the moment it is handed one is the
/// moment its watchers know.
struct Tap<S> {
    stream: S,
    /// Bytes handed to the client that do not make a whole frame yet.
    partial: Vec<u8>,
    /// The first frame (the handshake's answer, without a reply header)
    /// is behind.
    handshaken: bool,
    /// The stream showed a negative frame length: nothing more is read.
    unreadable: bool,
    told: Told,
}

/// ZooKeeper's event type for a deleted node.
const NODE_DELETED: i32 = 2;
/// The xid of a watch notification.
const NOTIFICATION: i32 = -1;

impl<S> Tap<S> {
    fn new(stream: S, told: Told) -> Self {
        Tap {
            stream,
            partial: Vec::new(),
            handshaken: false,
            unreadable: false,
            told,
        }
    }

    /// Reads the whole frames among the bytes handed out so far, cut by
    /// the server's own frame reader. A stream with a negative frame
    /// length is no ZooKeeper stream (the client drops it on the same
    /// bytes): it is no longer read, nor kept.
    fn read_frames(&mut self) {
        loop {
            match next_frame(&mut self.partial, usize::MAX, false) {
                Framed::Frame(frame) => {
                    if !self.handshaken {
                        self.handshaken = true;
                    } else if let Some(path) = deleted_node(frame.body()) {
                        let seq = zk_curator_chaos::sequence();
                        if let Ok(mut told) = self.told.lock() {
                            told.push((path, seq));
                        }
                    }
                }
                Framed::Incomplete => return,
                Framed::TooLong(_) | Framed::FourLetter(_) => {
                    self.partial = Vec::new();
                    self.unreadable = true;
                    return;
                }
            }
        }
    }
}

/// The path of the node a frame says was deleted, if it is that
/// notification: reply header (xid, zxid, error), then the event (type,
/// state, path).
fn deleted_node(frame: &[u8]) -> Option<String> {
    let int = |at: usize| -> Option<i32> {
        Some(i32::from_be_bytes(frame.get(at..at + 4)?.try_into().ok()?))
    };
    if int(0)? != NOTIFICATION || int(16)? != NODE_DELETED {
        return None;
    }
    let len = usize::try_from(int(24)?).ok()?;
    let path = frame.get(28..28 + len)?;
    String::from_utf8(path.to_vec()).ok()
}

impl<S: AsyncRead + Unpin> AsyncRead for Tap<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.stream).poll_read(cx, buf);
        if let (Poll::Ready(Ok(())), false) = (&read, self.unreadable) {
            let this = &mut *self;
            this.partial.extend_from_slice(&buf.filled()[before..]);
            this.read_frames();
        }
        read
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tap<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// What the simulated server's node times count from, whatever the wall
/// clock says: 2027-01-15T08:00:00Z, in seconds since the epoch.
pub(crate) const NODE_TIME_ORIGIN: u64 = 1_800_000_000;

/// The server, once its host has started it.
pub type ServerSlot = Rc<RefCell<Option<Arc<EmbeddedServer>>>>;

/// The server host's software: the embedded server, fed by a turmoil
/// listener. Children come back unsorted (in a seeded order), as from
/// ZooKeeper; node times count from a fixed origin.
pub async fn serve(slot: ServerSlot) -> turmoil::Result {
    let address = SocketAddr::from((Ipv4Addr::UNSPECIFIED, PORT));
    let server = EmbeddedServer::builder()
        .sorted_children(false)
        .node_time_origin(std::time::UNIX_EPOCH + std::time::Duration::from_secs(NODE_TIME_ORIGIN))
        .start_without_listener(address)?;
    let server = Arc::new(server);
    *slot.borrow_mut() = Some(server.clone());
    let listener = TcpListener::bind(address).await?;
    loop {
        let (stream, peer) = listener.accept().await?;
        server.serve_connection(stream, peer);
    }
}

/// A contender's host: it runs what the harness starts there (its
/// framework, its recipes, its holders: see [`Place`]) on a runtime and a
/// clock of its own, and its link's forwarder, through which the
/// framework (dialing the host's own name, a loopback connection) reaches
/// the server.
#[derive(Debug)]
pub struct ContenderHost {
    /// The host's name (its link's).
    name: String,
    jobs: mpsc::UnboundedSender<BoxFuture<'static, ()>>,
    inbox: Mutex<Option<mpsc::UnboundedReceiver<BoxFuture<'static, ()>>>>,
    /// A pause asked for (see [`Place::pause`]): its length, and whom to
    /// tell when the host is continued. The world's driver carries it out.
    pause: Mutex<Option<(Duration, Continued)>>,
}

/// Told when a paused host is continued.
#[derive(Debug)]
struct Continued(Vec<oneshot::Sender<()>>);

/// The world's driver's side of [`Place::pause`]: after each step, it stops
/// the hosts whose pauses were asked for, and continues those whose pauses
/// are over (their clocks then jump: see `turmoil::Sim::pause`).
#[derive(Debug, Default)]
pub struct Stops {
    /// Each host stopped now: which, until when, whom to tell.
    stopped: Vec<(usize, Duration, Continued)>,
}

impl Stops {
    /// Carries out the pauses of `hosts` at `now` (the simulation's time,
    /// between two steps), with a line in `log` for each stop and each
    /// continuation.
    pub fn carry_out(
        &mut self,
        sim: &mut turmoil::Sim<'_>,
        now: Duration,
        hosts: &[Arc<ContenderHost>],
        log: &mut Vec<String>,
    ) {
        for (i, host) in hosts.iter().enumerate() {
            if let Some((length, continued)) = host.take_pause() {
                sim.pause(host.name());
                log.push(format!(
                    "{} pause {} for {}",
                    now.as_micros(),
                    host.name(),
                    length.as_millis()
                ));
                self.stopped.push((i, now + length, continued));
            }
        }
        while let Some(due) = self.stopped.iter().position(|(_, until, _)| now >= *until) {
            let (i, _, continued) = self.stopped.swap_remove(due);
            sim.resume(hosts[i].name());
            for waiter in continued.0 {
                let _ = waiter.send(());
            }
            log.push(format!("{} continue {}", now.as_micros(), hosts[i].name()));
        }
    }
}

impl ContenderHost {
    pub fn new(name: String) -> Arc<Self> {
        let (jobs, inbox) = mpsc::unbounded_channel();
        Arc::new(ContenderHost {
            name,
            jobs,
            inbox: Mutex::new(Some(inbox)),
            pause: Mutex::new(None),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The pause asked for since the last look, if any.
    fn take_pause(&self) -> Option<(Duration, Continued)> {
        self.pause.lock().ok()?.take()
    }

    /// The host's software: `link`'s forwarder, and each job it is given
    /// as a task of its runtime. It runs until the world ends (a host whose
    /// software ended would no longer be ticked, and its tasks with it).
    pub fn software(
        &self,
        link: LinkControl,
    ) -> impl std::future::Future<Output = turmoil::Result> + 'static {
        let inbox = self.inbox.lock().ok().and_then(|mut inbox| inbox.take());
        let jobs = async move {
            if let Some(mut inbox) = inbox {
                while let Some(job) = inbox.recv().await {
                    drop(tokio::spawn(job));
                }
            }
            std::future::pending().await
        };
        async move {
            tokio::select! {
                forwarded = forward(link) => forwarded,
                ended = jobs => ended,
            }
        }
    }
}

impl Place for ContenderHost {
    fn spawn(&self, task: BoxFuture<'static, ()>) {
        // Unsent only once the host's software is gone, with the world.
        let _ = self.jobs.send(task);
    }

    fn pause(&self, length: Duration) -> Option<BoxFuture<'static, ()>> {
        let (tell, told) = oneshot::channel();
        let mut pause = self.pause.lock().ok()?;
        // Two tasks of the host asking in the same instant: one pause, the
        // longer, and both told.
        let (asked, mut waiters) = pause.take().map_or((length, Vec::new()), |(l, c)| (l, c.0));
        waiters.push(tell);
        *pause = Some((asked.max(length), Continued(waiters)));
        Some(Box::pin(async move {
            let _ = told.await;
        }))
    }
}

/// What the harness has asked of a link.
#[derive(Clone, Copy, Debug, Default)]
struct LinkState {
    blackhole: bool,
    /// Bumped to close every connection through the link.
    generation: u64,
}

/// A link host's controls, shared with the harness.
#[derive(Clone, Debug)]
pub struct LinkControl {
    host: String,
    state: Arc<watch::Sender<LinkState>>,
    /// Connections carried now.
    open: Arc<AtomicUsize>,
    /// What its connections told their clients (see [`Tap`]).
    told: Told,
    /// The host of the contender on this link.
    contender: Option<Arc<ContenderHost>>,
    /// Where its connections go (the server's port, or an ensemble's members').
    upstream: Arc<Mutex<Upstream>>,
}

/// Where a link's connections go: to the server (no ports given), or to an ensemble's
/// members in turn, each new connection to the next one, as a ZooKeeper client goes
/// through its server list; or only to one member while it is pinned there.
#[derive(Debug, Default)]
struct Upstream {
    ports: Vec<u16>,
    next: usize,
    pinned: Option<usize>,
    /// The member of the last connection.
    now: Option<usize>,
}

impl Upstream {
    /// The port of the next connection.
    fn next_port(&mut self) -> u16 {
        if self.ports.is_empty() {
            return PORT;
        }
        let member = self.pinned.unwrap_or_else(|| {
            let member = self.next % self.ports.len();
            self.next += 1;
            member
        });
        self.now = Some(member);
        self.ports[member]
    }
}

impl LinkControl {
    pub fn new(host: String) -> Self {
        LinkControl {
            host,
            state: Arc::new(watch::channel(LinkState::default()).0),
            open: Arc::new(AtomicUsize::new(0)),
            told: Told::default(),
            contender: None,
            upstream: Arc::default(),
        }
    }

    /// Sends the link's connections to these ports in turn (an ensemble's members), the
    /// first to `first`'s.
    pub fn route(&self, ports: Vec<u16>, first: usize) {
        if let Ok(mut upstream) = self.upstream.lock() {
            upstream.ports = ports;
            upstream.next = first;
        }
    }

    /// Sends the link's connections only to member `member` (`None`: to each in turn).
    pub fn pin(&self, member: Option<usize>) {
        if let Ok(mut upstream) = self.upstream.lock() {
            upstream.pinned = member;
        }
    }

    /// The member the link's last connection went to, if it is routed to members.
    pub fn member_now(&self) -> Option<usize> {
        self.upstream.lock().ok().and_then(|u| u.now)
    }

    /// The link of the contender that runs on `host`.
    pub fn serving(mut self, host: Arc<ContenderHost>) -> Self {
        self.contender = Some(host);
        self
    }

    pub fn host(&self) -> &str {
        &self.host
    }
}

impl Link for LinkControl {
    fn connect_string(&self) -> String {
        format!("{}:{PORT}", self.host)
    }

    fn blackhole(&self, on: bool) {
        self.state.send_modify(|s| s.blackhole = on);
    }

    fn drop_connections(&self) {
        self.state.send_modify(|s| s.generation += 1);
    }

    fn active_connections(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    fn deletions_told(&self) -> Vec<(String, u64)> {
        self.told
            .lock()
            .map(|told| told.clone())
            .unwrap_or_default()
    }

    fn place(&self) -> Option<Arc<dyn Place>> {
        self.contender.clone().map(|host| host as Arc<dyn Place>)
    }
}

/// A link host's software: accepts the contender's connections and carries
/// each to the server, holding its bytes while blackholed, closing it when
/// the link's connections are dropped.
pub async fn forward(control: LinkControl) -> turmoil::Result {
    let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, PORT)).await?;
    loop {
        let (down, _) = listener.accept().await?;
        let open = control.open.clone();
        open.fetch_add(1, Ordering::SeqCst);
        let state = control.state.subscribe();
        let port = control
            .upstream
            .lock()
            .map_or(PORT, |mut upstream| upstream.next_port());
        tokio::task::spawn_local(async move {
            carry(down, state, port).await;
            open.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

async fn carry(down: TcpStream, mut state: watch::Receiver<LinkState>, port: u16) {
    let generation = state.borrow().generation;
    let Ok(up) = TcpStream::connect((SERVER, port)).await else {
        return;
    };
    let (down_read, down_write) = down.into_split();
    let (up_read, up_write) = up.into_split();
    tokio::select! {
        () = pump(down_read, up_write, state.clone(), generation) => {}
        () = pump(up_read, down_write, state.clone(), generation) => {}
        _ = state.wait_for(move |s| s.generation != generation) => {}
    }
}

async fn pump(
    mut from: turmoil::net::tcp::OwnedReadHalf,
    mut to: turmoil::net::tcp::OwnedWriteHalf,
    mut state: watch::Receiver<LinkState>,
    generation: u64,
) {
    let mut buf = vec![0; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Held while blackholed: the bytes go on when it ends, as over a
        // partition TCP outlives.
        match state
            .wait_for(|s| !s.blackhole || s.generation != generation)
            .await
        {
            Ok(s) if s.generation == generation => {}
            _ => return,
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// The next of a world's `links` the harness asks for, on one server or on
/// an ensemble (`next` counts those handed out).
pub(crate) fn next_link(links: &[LinkControl], next: &Cell<usize>) -> Box<dyn Link> {
    let i = next.get();
    next.set(i + 1);
    // The world makes enough links for the contenders and observers of any
    // scenario; more would be a bug of the simulator's.
    let link = links
        .get(i)
        .unwrap_or_else(|| panic!("link {i} was not made"));
    Box::new(link.clone())
}

/// The harness's view of the simulated server and its links.
#[derive(Debug)]
pub struct SimTarget {
    pub server: ServerSlot,
    pub links: Vec<LinkControl>,
    pub next_link: Cell<usize>,
}

impl SimServer for SimTarget {
    fn connect_string(&self) -> String {
        format!("{SERVER}:{PORT}")
    }

    fn link(&self) -> Box<dyn Link> {
        next_link(&self.links, &self.next_link)
    }

    fn expire_session(&self, id: i64) -> bool {
        self.server
            .borrow()
            .as_ref()
            .is_some_and(|s| s.expire_session(id))
    }

    fn session_ids(&self) -> Vec<i64> {
        self.server
            .borrow()
            .as_ref()
            .map(|s| s.session_ids())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// Dials with tokio's TCP, counting its dials.
    #[derive(Clone, Debug, Default)]
    struct Counting(Arc<AtomicUsize>);

    impl zk::Dialer for Counting {
        fn dial(
            &self,
            host: &str,
            port: u16,
        ) -> BoxFuture<'static, std::io::Result<Box<dyn zk::DialedStream>>> {
            self.0.fetch_add(1, Ordering::SeqCst);
            let address = format!("{host}:{port}");
            Box::pin(async move {
                let stream = tokio::net::TcpStream::connect(address).await?;
                Ok(Box::new(stream) as Box<dyn zk::DialedStream>)
            })
        }
    }

    /// Dials with tokio's TCP through a [`Tap`].
    #[derive(Clone, Debug, Default)]
    struct Tapped(Told);

    impl zk::Dialer for Tapped {
        fn dial(
            &self,
            host: &str,
            port: u16,
        ) -> BoxFuture<'static, std::io::Result<Box<dyn zk::DialedStream>>> {
            let address = format!("{host}:{port}");
            let told = self.0.clone();
            Box::pin(async move {
                let stream = tokio::net::TcpStream::connect(address).await?;
                Ok(Box::new(Tap::new(stream, told)) as Box<dyn zk::DialedStream>)
            })
        }
    }

    /// A tapped client is told of a deletion it watched, before its watcher
    /// wakes, and of nothing else (not a change of data, nor a deletion it
    /// did not watch).
    #[tokio::test]
    async fn a_tap_records_the_deletions_its_client_is_told() {
        let server = EmbeddedServer::start().await.expect("server");
        let other = zk::Client::connect(&server.connect_string())
            .await
            .expect("connect");
        let tapped = Tapped::default();
        zk::set_thread_dialer(Some(Arc::new(tapped.clone())));
        let client = zk::Client::connect(&server.connect_string()).await;
        zk::set_thread_dialer(None);
        let client = client.expect("connect");
        let mode = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        for path in ["/watched", "/changed", "/unwatched"] {
            other.create(path, b"x", &mode).await.expect("create");
        }
        let (_, _, deleted) = client.get_and_watch_data("/watched").await.expect("watch");
        let (_, _, changed) = client.get_and_watch_data("/changed").await.expect("watch");
        other.set_data("/changed", b"y", None).await.expect("set");
        other.delete("/unwatched", None).await.expect("delete");
        other.delete("/watched", None).await.expect("delete");
        changed.changed().await;
        deleted.changed().await;
        let woke = zk_curator_chaos::sequence();
        let told = tapped.0.lock().expect("told").clone();
        let paths: Vec<&str> = told.iter().map(|(path, _)| path.as_str()).collect();
        assert_eq!(paths, ["/watched"], "{told:?}");
        assert!(told[0].1 < woke, "told before the watcher woke: {told:?}");
    }

    /// A stream that shows a negative frame length is let go: the tap keeps
    /// none of what follows (the client drops such a stream).
    #[tokio::test]
    async fn a_tap_keeps_nothing_of_a_stream_it_cannot_read() {
        let (near, mut far) = tokio::io::duplex(1 << 16);
        let mut tap = Tap::new(near, Told::default());
        let mut bytes = vec![0, 0, 0, 1, 7];
        bytes.extend_from_slice(&(-5i32).to_be_bytes());
        bytes.extend(std::iter::repeat_n(9u8, 40_000));
        far.write_all(&bytes).await.expect("write");
        drop(far);
        let mut sink = Vec::new();
        tap.read_to_end(&mut sink).await.expect("read");
        assert_eq!(sink, bytes, "the client gets every byte");
        assert!(tap.handshaken && tap.unreadable);
        assert!(tap.partial.is_empty(), "{} bytes kept", tap.partial.len());
    }

    /// A world of one contender host, `c0`, with a 1 ms tick.
    fn one_host(sim: &mut turmoil::Sim<'_>) -> Arc<ContenderHost> {
        let host = ContenderHost::new("c0".to_owned());
        let link = LinkControl::new("c0".to_owned()).serving(host.clone());
        let software = host.clone();
        sim.host("c0", move || software.software(link.clone()));
        host
    }

    fn world() -> turmoil::Sim<'static> {
        turmoil::Builder::new()
            .tick_duration(Duration::from_millis(1))
            .simulation_duration(Duration::from_secs(10))
            .build()
    }

    /// What the harness starts at a contender's place runs on the
    /// contender's host: a port it listens on is reached at that host's
    /// name (not at the harness's).
    #[test]
    fn a_job_given_to_a_contender_host_runs_there() {
        let mut sim = world();
        let place: Arc<dyn Place> = one_host(&mut sim);
        sim.client("harness", async move {
            place.spawn(Box::pin(async {
                let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 9000))
                    .await
                    .expect("bind");
                let (mut stream, _) = listener.accept().await.expect("accept");
                stream.write_all(b"here").await.expect("write");
            }));
            // The job starts at the host's next tick: a bounded wait.
            let mut dialed = None;
            for _ in 0..100 {
                if let Ok(stream) = TcpStream::connect(("c0", 9000)).await {
                    dialed = Some(stream);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let mut stream = dialed.expect("the job listens on c0");
            let mut said = [0; 4];
            stream.read_exact(&mut said).await?;
            assert_eq!(&said, b"here");
            Ok(())
        });
        sim.run().expect("the world runs");
    }

    /// A host paused through its place runs nothing while the others go on;
    /// continued, its clock has jumped: every timer that came due meanwhile
    /// fires at the same instant, and the pause's future ends.
    #[test]
    fn a_paused_host_does_nothing_then_its_timers_fire_together() {
        type Seen = Arc<Mutex<Vec<(&'static str, Duration)>>>;
        let seen: Seen = Seen::default();
        let note = |seen: &Seen, what| {
            let at = turmoil::sim_elapsed().expect("on a host");
            seen.lock().expect("seen").push((what, at));
        };
        let mut sim = world();
        let host = one_host(&mut sim);
        let place: Arc<dyn Place> = host.clone();
        let ticker = seen.clone();
        place.spawn(Box::pin(async move {
            for _ in 0..100 {
                note(&ticker, "tick");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }));
        for after in [150, 250, 350] {
            let sleeper = seen.clone();
            place.spawn(Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(after)).await;
                note(&sleeper, "due");
            }));
        }
        let (pauser, stopper) = (seen.clone(), place.clone());
        place.spawn(Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            note(&pauser, "asked");
            let continued = stopper
                .pause(Duration::from_millis(300))
                .expect("a host stops");
            continued.await;
            note(&pauser, "continued");
        }));
        let other = seen.clone();
        sim.client("other", async move {
            for _ in 0..60 {
                note(&other, "other");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Ok(())
        });
        let (mut stops, mut log) = (Stops::default(), Vec::new());
        for _ in 0..2_000 {
            if sim.step().expect("a step") {
                break;
            }
            let now = sim.elapsed();
            stops.carry_out(&mut sim, now, std::slice::from_ref(&host), &mut log);
        }
        let seen = seen.lock().expect("seen").clone();
        let at = |what| -> Vec<u128> {
            seen.iter()
                .filter(|(w, _)| *w == what)
                .map(|(_, at)| at.as_millis())
                .collect()
        };
        assert_eq!(at("asked"), [100]);
        assert_eq!(log, ["101000 pause c0 for 300", "401000 continue c0"]);
        let continued = at("continued");
        assert_eq!(continued, [401], "{seen:?}");
        assert!(
            at("tick").iter().all(|&t| t <= 100 || t >= 401),
            "a tick while stopped: {:?}",
            at("tick")
        );
        assert!(at("tick").iter().any(|&t| t > 401), "ticks again after");
        assert_eq!(at("due"), [401, 401, 401], "due together at the jump");
        assert!(
            at("other").iter().any(|&t| (101..401).contains(&t)),
            "the other host went on"
        );
    }

    /// The client's connections on a thread with a dialer are the dialer's;
    /// without one, tokio's own.
    #[tokio::test]
    async fn a_thread_dialer_carries_the_clients_connections() {
        let server = EmbeddedServer::start().await.expect("server");
        let dials = Counting::default();
        let before = zk::set_thread_dialer(Some(Arc::new(dials.clone())));
        assert!(before.is_none());
        let client = zk::Client::connect(&server.connect_string())
            .await
            .expect("connect");
        client
            .create(
                "/dialed",
                b"x",
                &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
            )
            .await
            .expect("create");
        assert_eq!(
            dials.0.load(Ordering::SeqCst),
            1,
            "the dialer opened the connection"
        );
        assert!(zk::set_thread_dialer(None).is_some());
        let plain = zk::Client::connect(&server.connect_string())
            .await
            .expect("connect");
        assert_eq!(plain.get_data("/dialed").await.expect("read").0, b"x");
        assert_eq!(
            dials.0.load(Ordering::SeqCst),
            1,
            "without a dialer, tokio's TCP"
        );
    }
}
