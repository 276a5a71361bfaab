//! The four-letter words: one-word commands a client sends instead of a handshake, answered
//! with text in ZooKeeper 3.8's layout (the line names and order its own tools and other
//! clients parse, such as kazoo's `server_version()` reading `envi`), after which the
//! connection closes. A word ZooKeeper does not know closes the connection without a reply,
//! as ZooKeeper does.
//!
//! Figures the embedded server does not keep (latencies, file descriptors, JVM memory) are
//! reported as 0; the lines are still there so that parsers find them.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt::Write as _;
use std::time::Duration;

use crate::state::State;
use crate::tree::{kind_of, Kind};

/// The version the words report. ZooKeeper's tools parse the part before the first `-`.
pub const VERSION: &str = "3.8.0-embedded, built by zk-curator-server";

/// The configuration the words report.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    /// The plaintext port; `None` (reported as -1, as ZooKeeper does) when only TLS is served.
    pub(crate) client_port: Option<u16>,
    /// The TLS port; `None` (-1) when none is served.
    pub(crate) secure_client_port: Option<u16>,
    pub(crate) tick_time: Duration,
    pub(crate) min_session_timeout: Duration,
    pub(crate) max_session_timeout: Duration,
    pub(crate) max_connections: usize,
}

/// The answer to a four-letter word, or `None` for a word ZooKeeper does not know.
pub(crate) fn answer(word: &[u8; 4], state: &State, config: &Config) -> Option<String> {
    Some(match word {
        b"ruok" => "imok".to_owned(),
        b"isro" => "rw".to_owned(),
        b"srvr" => server_stats(state, None),
        b"stat" => server_stats(state, Some(&connections(state, false))),
        b"envi" => environment(),
        b"conf" => configuration(config),
        b"cons" => connections(state, true) + "\n",
        b"dump" => dump(state),
        b"wchs" => watch_summary(state),
        b"wchc" => watches_by_session(state),
        b"wchp" => watches_by_path(state),
        b"mntr" => monitor(state),
        b"crst" => "Connection stats reset.\n".to_owned(),
        b"srst" => "Server stats reset.\n".to_owned(),
        b"dirs" => "datadir_size: 0\nlogdir_size: 0\n".to_owned(),
        _ => return None,
    })
}

fn server_stats(state: &State, clients: Option<&str>) -> String {
    let mut out = format!("Zookeeper version: {VERSION}\n");
    if let Some(clients) = clients {
        out.push_str("Clients:\n");
        out.push_str(clients);
        out.push('\n');
    }
    let _ = write!(
        out,
        "Latency min/avg/max: 0/0.0/0\nReceived: {received}\nSent: {received}\n\
         Connections: {conns}\nOutstanding: 0\nZxid: {zxid:#x}\nMode: standalone\n\
         Node count: {nodes}\n",
        received = state.received,
        conns = state.conns.len(),
        zxid = state.zxid,
        nodes = state.tree.len(),
    );
    out
}

fn environment() -> String {
    let mut out = String::from("Environment:\n");
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".to_owned());
    let dir = std::env::current_dir()
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    let user = std::env::var("USER").unwrap_or_default();
    let home = std::env::var("HOME").unwrap_or_default();
    let tmp = std::env::temp_dir().display().to_string();
    for (key, value) in [
        ("zookeeper.version", VERSION),
        ("host.name", host.as_str()),
        ("java.version", "<NA>"),
        ("java.vendor", "<NA>"),
        ("java.home", "<NA>"),
        ("java.class.path", "<NA>"),
        ("java.library.path", "<NA>"),
        ("java.io.tmpdir", tmp.as_str()),
        ("java.compiler", "<NA>"),
        ("os.name", std::env::consts::OS),
        ("os.arch", std::env::consts::ARCH),
        ("os.version", "<NA>"),
        ("user.name", user.as_str()),
        ("user.home", home.as_str()),
        ("user.dir", dir.as_str()),
        ("os.memory.free", "0MB"),
        ("os.memory.max", "0MB"),
        ("os.memory.total", "0MB"),
    ] {
        let _ = writeln!(out, "{key}={value}");
    }
    out
}

fn configuration(config: &Config) -> String {
    format!(
        "clientPort={port}\nsecureClientPort={secure}\ndataDir=\ndataDirSize=0\ndataLogDir=\n\
         dataLogSize=0\ntickTime={tick}\nmaxClientCnxns={max}\nminSessionTimeout={min}\n\
         maxSessionTimeout={maxs}\nclientPortListenBacklog=-1\nserverId=0\n",
        port = config.client_port.map_or(-1, i32::from),
        secure = config.secure_client_port.map_or(-1, i32::from),
        tick = config.tick_time.as_millis(),
        max = config.max_connections,
        min = config.min_session_timeout.as_millis(),
        maxs = config.max_session_timeout.as_millis(),
    )
}

/// One line per connection, in connection order (`full` adds the session details `cons`
/// shows).
fn connections(state: &State, full: bool) -> String {
    let mut out = String::new();
    for c in state.conns.values() {
        let queued = c.outbox.queued();
        let _ = write!(
            out,
            " /{peer}[{est}](queued={queued},recved={recv},sent={recv}",
            peer = c.peer,
            est = u8::from(c.session != 0),
            recv = c.received,
        );
        if full && c.session != 0 {
            let timeout = state
                .sessions
                .get(c.session)
                .map_or(0, |s| s.timeout.as_millis());
            let _ = write!(out, ",sid={:#x},to={timeout}", c.session);
        }
        out.push_str(")\n");
    }
    out
}

fn dump(state: &State) -> String {
    let ids = state.sessions.ids();
    let mut out = format!(
        "SessionTracker dump:\nSession Sets ({n})/({n}):\n",
        n = ids.len()
    );
    for id in &ids {
        let _ = write!(out, "1 expire at (unknown):\n\t{id:#x}\n");
    }
    let mut ephemerals: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for id in &ids {
        let mut paths = state.tree.ephemerals(*id);
        if !paths.is_empty() {
            paths.sort();
            ephemerals.insert(*id, paths);
        }
    }
    let _ = writeln!(
        out,
        "ephemeral nodes dump:\nSessions with Ephemerals ({}):",
        ephemerals.len()
    );
    for (id, paths) in ephemerals {
        let _ = writeln!(out, "{id:#x}:");
        for path in paths {
            let _ = writeln!(out, "\t{path}");
        }
    }
    let _ = writeln!(
        out,
        "Connections dump:\nConnections Sets (1)/({}):",
        state.conns.len()
    );
    for c in state.conns.values() {
        let _ = writeln!(out, "\tip: /{} sessionId: {:#x}", c.peer, c.session);
    }
    out
}

/// Every registration as (session, path), data and child tables together.
fn registrations(state: &State) -> Vec<(i64, String)> {
    let mut all = Vec::new();
    for (conn, path) in state
        .watches
        .data
        .registrations()
        .chain(state.watches.child.registrations())
    {
        let session = state.conns.get(&conn).map_or(0, |c| c.session);
        all.push((session, path.to_owned()));
    }
    all
}

fn watch_summary(state: &State) -> String {
    let all = registrations(state);
    // Only counted: their order does not matter.
    let sessions: HashSet<i64> = all.iter().map(|(s, _)| *s).collect();
    let paths: HashSet<&str> = all.iter().map(|(_, p)| p.as_str()).collect();
    format!(
        "{} connections watching {} paths\nTotal watches:{}\n",
        sessions.len(),
        paths.len(),
        all.len()
    )
}

fn watches_by_session(state: &State) -> String {
    let mut by: BTreeMap<i64, BTreeSet<String>> = BTreeMap::new();
    for (session, path) in registrations(state) {
        by.entry(session).or_default().insert(path);
    }
    let mut out = String::new();
    for (session, paths) in by {
        let _ = writeln!(out, "{session:#x}");
        for path in paths {
            let _ = writeln!(out, "\t{path}");
        }
    }
    out + "\n"
}

fn watches_by_path(state: &State) -> String {
    let mut by: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
    for (session, path) in registrations(state) {
        by.entry(path).or_default().insert(session);
    }
    let mut out = String::new();
    for (path, sessions) in by {
        let _ = writeln!(out, "{path}");
        for session in sessions {
            let _ = writeln!(out, "\t{session:#x}");
        }
    }
    out + "\n"
}

fn monitor(state: &State) -> String {
    let ephemerals = state
        .tree
        .paths()
        .filter_map(|p| state.tree.get(p))
        .filter(|n| matches!(kind_of(n.stat.ephemeral_owner), Kind::Ephemeral(_)))
        .count();
    let data_size: usize = state
        .tree
        .paths()
        .map(|p| {
            p.len()
                + state
                    .tree
                    .get(p)
                    .and_then(|n| n.data.as_ref())
                    .map_or(0, Vec::len)
        })
        .sum();
    let watches = registrations(state).len();
    let mut out = String::new();
    for (key, value) in [
        ("zk_version", VERSION.to_owned()),
        ("zk_server_state", "standalone".to_owned()),
        ("zk_ephemerals_count", ephemerals.to_string()),
        ("zk_num_alive_connections", state.conns.len().to_string()),
        ("zk_avg_latency", "0.0".to_owned()),
        ("zk_outstanding_requests", "0".to_owned()),
        ("zk_znode_count", state.tree.len().to_string()),
        ("zk_global_sessions", state.sessions.ids().len().to_string()),
        ("zk_packets_sent", state.received.to_string()),
        ("zk_packets_received", state.received.to_string()),
        ("zk_watch_count", watches.to_string()),
        ("zk_min_latency", "0".to_owned()),
        ("zk_max_latency", "0".to_owned()),
        ("zk_approximate_data_size", data_size.to_string()),
        ("zk_open_file_descriptor_count", "0".to_owned()),
        ("zk_max_file_descriptor_count", "0".to_owned()),
    ] {
        let _ = writeln!(out, "{key}\t{value}");
    }
    out
}
