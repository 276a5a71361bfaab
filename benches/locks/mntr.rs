//! The server's four-letter words: `ruok` (is it alive), `mntr` (its version
//! and running totals), and the difference of two `mntr` readings, which is
//! how every request, watch and fsync in the tables is counted: on the
//! server, the same way for every contender. On the bench's ensemble
//! (`--ensemble`) the counts are read from every member and summed: a
//! client's request reaches the one member it is connected to, and each
//! member counts its own clients' requests and watches and its own fsyncs.

use std::collections::HashMap;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::limits::{within, BoxError};

/// The first `host:port` of a connect string (no chroot).
pub(crate) fn first_host(connect: &str) -> Option<String> {
    let hosts = connect.split('/').next()?;
    let first = hosts.split(',').next()?.trim();
    if first.is_empty() {
        None
    } else if first.contains(':') {
        Some(first.to_owned())
    } else {
        Some(format!("{first}:2181"))
    }
}

pub(crate) async fn four_letter(addr: &str, word: &str) -> Result<String, BoxError> {
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream.write_all(word.as_bytes()).await?;
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await?;
        Ok::<_, std::io::Error>(reply)
    };
    Ok(within(Duration::from_secs(5), ask).await??)
}

pub(crate) async fn mntr(addr: &str) -> Result<HashMap<String, String>, BoxError> {
    let reply = four_letter(addr, "mntr").await?;
    Ok(reply
        .lines()
        .filter_map(|line| {
            let (key, value) = line.split_once('\t')?;
            Some((key.trim().to_owned(), value.trim().to_owned()))
        })
        .collect())
}

/// The packets the server has received on the connections of `sessions`
/// so far (`cons`: `recved` of each connection whose `sid` is one of them),
/// summed over the comma-separated servers (a session is connected to
/// one); `None` if a server does not answer or a session is not found.
/// Unlike [`counters`], no other session's traffic, and no idle rate to
/// take off: what these sessions sent, their own pings included (one per
/// third of the session timeout at most, and none while requests flow).
pub(crate) async fn session_packets(addr: Option<&str>, sessions: &[i64]) -> Option<f64> {
    let mut found = vec![false; sessions.len()];
    let mut total = 0.0;
    for one in addr?.split(',') {
        let reply = four_letter(one, "cons").await.ok()?;
        for line in reply.lines() {
            let field = |name: &str| {
                let start = line.find(name)? + name.len();
                let rest = &line[start..];
                let end = rest.find([',', ')']).unwrap_or(rest.len());
                Some(&rest[..end])
            };
            let Some(sid) = field("sid=0x").and_then(|h| u64::from_str_radix(h, 16).ok()) else {
                continue;
            };
            let Some(i) = sessions.iter().position(|&s| s as u64 == sid) else {
                continue;
            };
            total += field("recved=")?.parse::<f64>().ok()?;
            found[i] = true;
        }
    }
    found.iter().all(|&f| f).then_some(total)
}

/// What the server received while `run` ran: its totals less the idle
/// ping rate ([`Traffic::between`]) and, apart, the packets of `sessions`
/// alone ([`session_packets`]); with `run`'s output and how long it took.
pub(crate) async fn counting<T>(
    addr: Option<&str>,
    sessions: &[i64],
    idle: f64,
    run: impl std::future::Future<Output = T>,
) -> (T, Option<Traffic>, Option<f64>, Duration) {
    let before = counters(addr).await;
    let own_before = session_packets(addr, sessions).await;
    let started = std::time::Instant::now();
    let output = run.await;
    let elapsed = started.elapsed();
    let after = counters(addr).await;
    let own_after = session_packets(addr, sessions).await;
    let traffic = Traffic::between(before, after, elapsed, idle);
    let own = own_before.zip(own_after).map(|(b, a)| a - b);
    (output, traffic, own, elapsed)
}

/// The server's running totals (`mntr`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Counters {
    pub(crate) packets: f64,
    pub(crate) deleted: f64,
    pub(crate) children: f64,
    /// NodeCreated and NodeDataChanged notifications sent (a persistent
    /// recursive watch, the tree observer's, is told of creations too), if
    /// the server reports them.
    pub(crate) created: Option<f64>,
    pub(crate) changed: Option<f64>,
    pub(crate) ephemerals: f64,
    /// Watches set now (all kinds, all sessions).
    pub(crate) watches_set: f64,
    /// Transaction-log fsyncs so far (`zk_cnt_fsynctime`: the count of the
    /// server's fsync-time summary, one sample per `FileChannel.force` of
    /// the log, ZooKeeper 3.6+), if the server reports it.
    pub(crate) fsyncs: Option<f64>,
    /// The servers read (1, or the members of the bench's ensemble): each
    /// `mntr` connection is one packet of its server's.
    pub(crate) sources: f64,
}

/// The server's running totals, if it answers `mntr`; with several
/// comma-separated addresses (the bench's ensemble), the sums over all of
/// them, if every one answers. Every member has the whole tree, so the
/// summed ephemerals are N times the ensemble's, and equal to an earlier
/// sum only when every member is back to where it was.
pub(crate) async fn counters(addr: Option<&str>) -> Option<Counters> {
    let mut total: Option<Counters> = None;
    for one in addr?.split(',') {
        let metrics = mntr(one).await.ok()?;
        let get = |key: &str| metrics.get(key).and_then(|v| v.parse::<f64>().ok());
        let read = Counters {
            packets: get("zk_packets_received")?,
            deleted: get("zk_sum_node_deleted_watch_count")?,
            children: get("zk_sum_node_children_watch_count")?,
            created: get("zk_sum_node_created_watch_count"),
            changed: get("zk_sum_node_changed_watch_count"),
            ephemerals: get("zk_ephemerals_count")?,
            watches_set: get("zk_watch_count")?,
            fsyncs: get("zk_cnt_fsynctime"),
            sources: 1.0,
        };
        total = Some(match total {
            None => read,
            Some(t) => Counters {
                packets: t.packets + read.packets,
                deleted: t.deleted + read.deleted,
                children: t.children + read.children,
                created: t.created.zip(read.created).map(|(a, b)| a + b),
                changed: t.changed.zip(read.changed).map(|(a, b)| a + b),
                ephemerals: t.ephemerals + read.ephemerals,
                watches_set: t.watches_set + read.watches_set,
                fsyncs: t.fsyncs.zip(read.fsyncs).map(|(a, b)| a + b),
                sources: t.sources + 1.0,
            },
        });
    }
    total
}

/// What the server saw during one measurement.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Traffic {
    /// Requests from the clients (packets received, less our own `mntr`
    /// and the idle ping rate).
    pub(crate) requests: f64,
    /// NodeDeleted + NodeChildrenChanged notifications sent.
    pub(crate) watches: f64,
    /// Every watch notification sent: those, and NodeCreated and
    /// NodeDataChanged (what a persistent recursive watch adds), if the
    /// server reports them.
    pub(crate) notifications: Option<f64>,
    /// Transaction-log fsyncs (a group commit syncs several writes at once).
    pub(crate) fsyncs: Option<f64>,
}

impl Traffic {
    pub(crate) fn between(
        before: Option<Counters>,
        after: Option<Counters>,
        elapsed: Duration,
        idle: f64,
    ) -> Option<Traffic> {
        let (b, a) = (before?, after?);
        Some(Traffic {
            requests: (a.packets - b.packets - a.sources - idle * elapsed.as_secs_f64()).max(0.0),
            watches: (a.deleted - b.deleted) + (a.children - b.children),
            notifications: a.created.zip(b.created).zip(a.changed.zip(b.changed)).map(
                |((ac, bc), (ah, bh))| {
                    (a.deleted - b.deleted) + (a.children - b.children) + (ac - bc) + (ah - bh)
                },
            ),
            fsyncs: a.fsyncs.zip(b.fsyncs).map(|(a, b)| a - b),
        })
    }
}

/// The client connections each of the comma-separated servers has open
/// (`zk_num_alive_connections`), `None` for one that does not answer.
pub(crate) async fn connections(addrs: &str) -> Vec<Option<f64>> {
    let mut counts = Vec::new();
    for addr in addrs.split(',') {
        counts.push(
            mntr(addr)
                .await
                .ok()
                .and_then(|m| m.get("zk_num_alive_connections")?.parse().ok()),
        );
    }
    counts
}
