//! Conformance: one scripted sequence of operations runs against the embedded server and
//! against a real Apache ZooKeeper; the two transcripts must be identical.
#![allow(clippy::unwrap_used, missing_docs)]

use std::future::Future;
use std::time::Duration;

use zk_curator_testing::backend::Prerequisite;
use zk_curator_testing::{EmbeddedServer, FaultProxy, ZooKeeperServer};
use zookeeper_client::{
    Acls, AddWatchMode, Client, CreateMode, CreateOptions, MultiReadResult, MultiWriteResult,
    OneshotWatcher, Stat,
};

const STEP: Duration = Duration::from_secs(10);

async fn bounded<F: Future>(what: &str, future: F) -> F::Output {
    match tokio::time::timeout(STEP, future).await {
        Ok(output) => output,
        Err(_) => panic!("step timed out: {what}"),
    }
}

fn persistent() -> CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

/// Renders the comparable parts of a stat: versions, sizes, ownership and zxid relations.
fn st(stat: &Stat, sessions: &[i64]) -> String {
    let owner = match stat.ephemeral_owner {
        0 => "-".to_owned(),
        o => sessions
            .iter()
            .position(|s| *s == o)
            .map_or_else(|| "other".to_owned(), |i| format!("s{i}")),
    };
    format!(
        "v{} cv{} av{} len{} n{} owner={} c=m:{} p=c:{} p>=m:{}",
        stat.version,
        stat.cversion,
        stat.aversion,
        stat.data_length,
        stat.num_children,
        owner,
        stat.czxid == stat.mzxid,
        stat.pzxid == stat.czxid,
        stat.pzxid >= stat.mzxid,
    )
}

/// Records whether a create succeeded, or how it failed (connection-level failures are
/// reported by class: their text differs with timing).
fn rec_len(
    log: &mut Vec<String>,
    what: &str,
    result: Result<(Stat, zookeeper_client::CreateSequence), zookeeper_client::Error>,
) {
    log.push(match result {
        Ok(_) => format!("{what} -> ok"),
        Err(zookeeper_client::Error::ConnectionLoss | zookeeper_client::Error::Custom(_)) => {
            format!("{what} -> connection lost")
        }
        Err(e) => format!("{what} -> err {e:?}"),
    });
}

async fn event(what: &str, watcher: OneshotWatcher) -> String {
    let e = bounded(what, watcher.changed()).await;
    format!("{:?} {}", e.event_type, e.path)
}

async fn connect(connect_string: &str) -> Client {
    bounded(
        "connect",
        Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .connect(connect_string),
    )
    .await
    .unwrap()
}

async fn connect_with_auth(connect_string: &str, user: &str) -> Client {
    bounded(
        "connect with auth",
        Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .with_auth("digest", format!("{user}:secret").as_bytes())
            .connect(connect_string),
    )
    .await
    .unwrap()
}

/// The script. Every line of the returned transcript must match between the servers.
async fn script(cs: &str) -> Vec<String> {
    let mut log = Vec::new();
    let c1 = connect(cs).await;
    let c2 = connect(cs).await;
    let sessions = vec![c1.session_id().0, c2.session_id().0];
    let s = |stat: &Stat| st(stat, &sessions);
    macro_rules! rec {
        ($label:expr, $fut:expr) => {{
            let r = bounded($label, $fut).await;
            let line = match &r {
                Ok(v) => format!("{} -> ok {}", $label, v),
                Err(e) => format!("{} -> err {:?}", $label, e),
            };
            log.push(line);
        }};
    }

    // Creates, errors and sequences.
    rec!("create /conf", async {
        c1.create("/conf", b"root", &persistent())
            .await
            .map(|(st, _)| s(&st))
    });
    rec!("create /conf/a", async {
        c1.create("/conf/a", b"x", &persistent())
            .await
            .map(|(st, _)| s(&st))
    });
    rec!("create /conf/a again", async {
        c1.create("/conf/a", b"y", &persistent())
            .await
            .map(|(st, _)| s(&st))
    });
    rec!("create under missing parent", async {
        c1.create("/conf/missing/b", b"", &persistent())
            .await
            .map(|(st, _)| s(&st))
    });
    for i in 0..3 {
        rec!(&format!("persistent sequential {i}"), async {
            c1.create(
                "/conf/seq-",
                b"",
                &CreateMode::PersistentSequential.with_acls(Acls::anyone_all()),
            )
            .await
            .map(|(st, seq)| format!("{seq} {}", s(&st)))
        });
    }
    rec!("ephemeral /conf/e by c2", async {
        c2.create(
            "/conf/e",
            b"eph",
            &CreateMode::Ephemeral.with_acls(Acls::anyone_all()),
        )
        .await
        .map(|(st, _)| s(&st))
    });
    rec!("child of ephemeral", async {
        c1.create("/conf/e/child", b"", &persistent())
            .await
            .map(|(st, _)| s(&st))
    });
    rec!("ephemeral sequential by c1", async {
        c1.create(
            "/conf/es-",
            b"",
            &CreateMode::EphemeralSequential.with_acls(Acls::anyone_all()),
        )
        .await
        .map(|(st, seq)| format!("{seq} {}", s(&st)))
    });
    rec!("container", async {
        c1.create(
            "/conf/box",
            b"",
            &CreateMode::Container.with_acls(Acls::anyone_all()),
        )
        .await
        .map(|(st, _)| s(&st))
    });
    rec!("ttl", async {
        c1.create(
            "/conf/ttl",
            b"t",
            &CreateMode::Persistent
                .with_acls(Acls::anyone_all())
                .with_ttl(Duration::from_secs(600)),
        )
        .await
        .map(|(st, _)| s(&st))
    });

    // Data and versions.
    rec!("set /conf/a", async {
        c1.set_data("/conf/a", b"x1", None).await.map(|st| s(&st))
    });
    rec!("set /conf/a bad version", async {
        c1.set_data("/conf/a", b"x2", Some(0))
            .await
            .map(|st| s(&st))
    });
    rec!("set /conf/a good version", async {
        c1.set_data("/conf/a", b"x22", Some(1))
            .await
            .map(|st| s(&st))
    });
    rec!("get /conf/a", async {
        c1.get_data("/conf/a")
            .await
            .map(|(d, st)| format!("{:?} {}", String::from_utf8_lossy(&d), s(&st)))
    });
    rec!("get missing", async {
        c1.get_data("/conf/nope").await.map(|(_, st)| s(&st))
    });
    rec!("set missing", async {
        c1.set_data("/conf/nope", b"", None).await.map(|st| s(&st))
    });
    rec!("stat missing", async {
        c1.check_stat("/conf/nope")
            .await
            .map(|st| st.map_or("none".to_owned(), |st| s(&st)))
    });
    rec!("delete bad version", async {
        c1.delete("/conf/a", Some(7)).await.map(|()| "")
    });
    rec!("delete not empty", async {
        c1.delete("/conf", None).await.map(|()| "")
    });
    rec!("delete missing", async {
        c1.delete("/conf/nope", None).await.map(|()| "")
    });
    rec!("children /conf", async {
        c1.get_children("/conf").await.map(|(mut kids, st)| {
            kids.sort();
            format!("{kids:?} {}", s(&st))
        })
    });
    rec!("delete seq 1", async {
        c1.delete("/conf/seq-0000000003", Some(0))
            .await
            .map(|()| "")
    });
    rec!("stat /conf after delete", async {
        c1.check_stat("/conf")
            .await
            .map(|st| st.map_or("none".to_owned(), |st| s(&st)))
    });
    rec!("sequential after delete", async {
        c1.create(
            "/conf/seq-",
            b"",
            &CreateMode::PersistentSequential.with_acls(Acls::anyone_all()),
        )
        .await
        .map(|(st, seq)| format!("{seq} {}", s(&st)))
    });
    rec!("children missing", async {
        c1.list_children("/conf/nope")
            .await
            .map(|k| format!("{k:?}"))
    });
    rec!("count descendants", async {
        c1.count_descendants_number("/conf")
            .await
            .map(|n| n.to_string())
    });
    rec!("ephemerals of c1", async {
        c1.list_ephemerals("/conf").await.map(|mut e| {
            e.sort();
            format!("{e:?}")
        })
    });
    rec!("sync", async { c1.sync("/conf").await.map(|()| "") });

    // Multi.
    let failing = async {
        let mut multi = c1.new_multi_writer();
        multi.add_create("/conf/m1", b"m", &persistent()).unwrap();
        multi.add_check_version("/conf/a", 99).unwrap();
        multi.add_set_data("/conf/a", b"never", None).unwrap();
        multi.commit().await
    };
    match bounded("failing multi", failing).await {
        Ok(r) => log.push(format!("failing multi -> ok {}", r.len())),
        Err(e) => log.push(format!("failing multi -> err {e:?}")),
    }
    rec!("m1 absent", async {
        c1.check_stat("/conf/m1")
            .await
            .map(|st| st.map_or("none".to_owned(), |st| s(&st)))
    });
    let succeeding = async {
        let mut multi = c1.new_multi_writer();
        multi.add_create("/conf/m2", b"m", &persistent()).unwrap();
        multi
            .add_create(
                "/conf/ms-",
                b"",
                &CreateMode::PersistentSequential.with_acls(Acls::anyone_all()),
            )
            .unwrap();
        multi
            .add_create(
                "/conf/ms-",
                b"",
                &CreateMode::PersistentSequential.with_acls(Acls::anyone_all()),
            )
            .unwrap();
        multi.add_check_version("/conf/a", 2).unwrap();
        multi.add_set_data("/conf/a", b"multi", Some(2)).unwrap();
        multi.add_delete("/conf/m2", None).unwrap();
        multi.commit().await
    };
    match bounded("multi", succeeding).await {
        Ok(results) => {
            for r in results {
                log.push(match r {
                    MultiWriteResult::Create { path, stat } => {
                        format!("multi create {path} {}", s(&stat))
                    }
                    MultiWriteResult::SetData { stat } => format!("multi set {}", s(&stat)),
                    MultiWriteResult::Delete => "multi delete".to_owned(),
                    MultiWriteResult::Check => "multi check".to_owned(),
                    other => format!("multi other {other:?}"),
                });
            }
        }
        Err(e) => log.push(format!("multi -> err {e:?}")),
    }
    let reads = async {
        let mut reader = c1.new_multi_reader();
        reader.add_get_data("/conf/a").unwrap();
        reader.add_get_data("/conf/nope").unwrap();
        reader.add_get_children("/conf/e").unwrap();
        reader.commit().await
    };
    match bounded("multi read", reads).await {
        Ok(results) => {
            for r in results {
                log.push(match r {
                    MultiReadResult::Data { data, stat } => {
                        format!(
                            "read data {:?} {}",
                            String::from_utf8_lossy(&data),
                            s(&stat)
                        )
                    }
                    MultiReadResult::Children { children } => format!("read children {children:?}"),
                    MultiReadResult::Error { err } => format!("read error {err:?}"),
                    other => format!("read other {other:?}"),
                });
            }
        }
        Err(e) => log.push(format!("multi read -> err {e:?}")),
    }

    // Watches across sessions.
    let (_, _, data_watch) = bounded("watch data", c1.get_and_watch_data("/conf/a"))
        .await
        .unwrap();
    let (none, exist_watch) = bounded("watch exist", c1.check_and_watch_stat("/conf/w"))
        .await
        .unwrap();
    log.push(format!("exists /conf/w before: {}", none.is_some()));
    let (_, child_watch) = bounded("watch children", c1.list_and_watch_children("/conf"))
        .await
        .unwrap();
    rec!("c2 sets /conf/a", async {
        c2.set_data("/conf/a", b"w", None).await.map(|st| s(&st))
    });
    log.push(event("data watch", data_watch).await);
    rec!("c2 creates /conf/w", async {
        c2.create("/conf/w", b"", &persistent())
            .await
            .map(|(st, _)| s(&st))
    });
    log.push(event("exist watch", exist_watch).await);
    log.push(event("child watch", child_watch).await);
    let (_, _, delete_watch) = bounded("watch w", c1.get_and_watch_data("/conf/w"))
        .await
        .unwrap();
    rec!("c2 deletes /conf/w", async {
        c2.delete("/conf/w", None).await.map(|()| "")
    });
    log.push(event("delete watch", delete_watch).await);
    let mut persistent_watch = bounded(
        "add watch",
        c1.watch("/conf", AddWatchMode::PersistentRecursive),
    )
    .await
    .unwrap();
    rec!("c2 creates /conf/r", async {
        c2.create("/conf/r", b"", &persistent())
            .await
            .map(|(st, _)| s(&st))
    });
    rec!("c2 sets /conf/r", async {
        c2.set_data("/conf/r", b"1", None).await.map(|st| s(&st))
    });
    rec!("c2 deletes /conf/r", async {
        c2.delete("/conf/r", None).await.map(|()| "")
    });
    for i in 0..3 {
        let e = bounded("persistent event", persistent_watch.changed()).await;
        log.push(format!(
            "recursive event {i}: {:?} {}",
            e.event_type, e.path
        ));
    }
    drop(persistent_watch);

    // Ephemerals go with their session.
    let (_, gone_watch) = bounded("watch e", c1.check_and_watch_stat("/conf/e"))
        .await
        .unwrap();
    drop(c2);
    let e = bounded("ephemeral deleted", gone_watch.changed()).await;
    log.push(format!("after c2 closed: {:?} {}", e.event_type, e.path));
    rec!("e after close", async {
        c1.check_stat("/conf/e")
            .await
            .map(|st| st.map_or("none".to_owned(), |st| s(&st)))
    });

    // ACLs.
    let c3 = connect_with_auth(cs, "alice").await;
    let c4 = connect_with_auth(cs, "bob").await;
    rec!("creator_all by alice", async {
        c3.create(
            "/conf/secure",
            b"s",
            &CreateMode::Persistent.with_acls(Acls::creator_all()),
        )
        .await
        .map(|(st, _)| s(&st))
    });
    rec!("creator_all unauthenticated", async {
        c1.create(
            "/conf/nosecure",
            b"s",
            &CreateMode::Persistent.with_acls(Acls::creator_all()),
        )
        .await
        .map(|(st, _)| s(&st))
    });
    rec!("read secure as nobody", async {
        c1.get_data("/conf/secure").await.map(|(_, st)| s(&st))
    });
    rec!("read secure as bob", async {
        c4.get_data("/conf/secure").await.map(|(_, st)| s(&st))
    });
    rec!("write secure as bob", async {
        c4.set_data("/conf/secure", b"b", None)
            .await
            .map(|st| s(&st))
    });
    rec!("create under secure as bob", async {
        c4.create("/conf/secure/x", b"", &persistent())
            .await
            .map(|(st, _)| s(&st))
    });
    rec!("delete under secure as bob", async {
        c4.delete("/conf/secure/x", None).await.map(|()| "")
    });
    rec!("read secure as alice", async {
        c3.get_data("/conf/secure")
            .await
            .map(|(d, st)| format!("{:?} {}", String::from_utf8_lossy(&d), s(&st)))
    });
    rec!("exists secure as nobody", async {
        c1.check_stat("/conf/secure")
            .await
            .map(|st| st.map_or("none".to_owned(), |st| s(&st)))
    });
    rec!("acl secure as bob", async {
        c4.get_acl("/conf/secure")
            .await
            .map(|(acl, st)| format!("{acl:?} {}", s(&st)))
    });
    rec!("acl secure as alice", async {
        c3.get_acl("/conf/secure")
            .await
            .map(|(acl, st)| format!("{acl:?} {}", s(&st)))
    });
    rec!("read-only acl", async {
        c3.create(
            "/conf/ro",
            b"",
            &CreateMode::Persistent.with_acls(Acls::anyone_read()),
        )
        .await
        .map(|(st, _)| s(&st))
    });
    rec!("write read-only", async {
        c3.set_data("/conf/ro", b"z", None).await.map(|st| s(&st))
    });
    rec!("child of read-only", async {
        c3.create("/conf/ro/kid", b"", &persistent())
            .await
            .map(|(st, _)| s(&st))
    });
    rec!("set acl without admin", async {
        c3.set_acl("/conf/ro", &Acls::anyone_all(), None)
            .await
            .map(|st| s(&st))
    });
    rec!("set acl with admin", async {
        c3.set_acl("/conf/secure", &Acls::anyone_all(), Some(0))
            .await
            .map(|st| s(&st))
    });
    rec!("read secure as nobody after set_acl", async {
        c1.get_data("/conf/secure").await.map(|(_, st)| s(&st))
    });

    // Zxid accounting: failed writes, new sessions and closed sessions each take one.
    let z1 = bounded("z1", c1.create("/conf/z1", b"", &persistent()))
        .await
        .unwrap()
        .0;
    let _ = bounded("z dup", c1.create("/conf/z1", b"", &persistent())).await;
    let _ = bounded("z bad set", c1.set_data("/conf/z1", b"", Some(42))).await;
    let _ = bounded("z read", c1.get_data("/conf/z1")).await;
    let z2 = bounded("z2", c1.create("/conf/z2", b"", &persistent()))
        .await
        .unwrap()
        .0;
    log.push(format!(
        "zxid delta after two failed writes and a read: {}",
        z2.czxid - z1.czxid
    ));
    let extra = connect(cs).await;
    drop(extra);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let z3 = bounded("z3", c1.create("/conf/z3", b"", &persistent()))
        .await
        .unwrap()
        .0;
    log.push(format!(
        "zxid delta around a session open+close: {}",
        z3.czxid - z2.czxid
    ));
    let mut multi = c1.new_multi_writer();
    multi.add_create("/conf/z4", b"", &persistent()).unwrap();
    multi.add_create("/conf/z5", b"", &persistent()).unwrap();
    let _ = bounded("z multi", multi.commit()).await.unwrap();
    let z4 = bounded("z4 stat", c1.check_stat("/conf/z4"))
        .await
        .unwrap()
        .unwrap();
    let z5 = bounded("z5 stat", c1.check_stat("/conf/z5"))
        .await
        .unwrap()
        .unwrap();
    log.push(format!(
        "multi zxids: delta {} same {}",
        z4.czxid - z3.czxid,
        z4.czxid == z5.czxid
    ));

    // A failing multi with sequential creates consumes no sequence numbers.
    let mut multi = c1.new_multi_writer();
    multi
        .add_create(
            "/conf/q-",
            b"",
            &CreateMode::PersistentSequential.with_acls(Acls::anyone_all()),
        )
        .unwrap();
    multi.add_delete("/conf/nope", None).unwrap();
    match bounded("failing seq multi", multi.commit()).await {
        Ok(r) => log.push(format!("failing seq multi -> ok {}", r.len())),
        Err(e) => log.push(format!("failing seq multi -> err {e:?}")),
    }
    let mut multi = c1.new_multi_writer();
    multi.add_check_version("/conf/nope", 0).unwrap();
    multi.add_create("/conf/never", b"", &persistent()).unwrap();
    match bounded("failing first op", multi.commit()).await {
        Ok(r) => log.push(format!("failing first op -> ok {}", r.len())),
        Err(e) => log.push(format!("failing first op -> err {e:?}")),
    }
    rec!("sequence after failed multi", async {
        c1.create(
            "/conf/q-",
            b"",
            &CreateMode::PersistentSequential.with_acls(Acls::anyone_all()),
        )
        .await
        .map(|(st, seq)| format!("{seq} {}", s(&st)))
    });
    let checked = async {
        let mut writer = c1.new_check_writer("/conf/a", Some(1234)).unwrap();
        writer
            .add_create("/conf/checked", b"", &persistent())
            .unwrap();
        writer.commit().await
    };
    match bounded("check writer", checked).await {
        Ok(r) => log.push(format!("check writer -> ok {}", r.len())),
        Err(e) => log.push(format!("check writer -> err {e:?}")),
    }
    rec!("delete with children and bad version", async {
        c1.delete("/conf", Some(99)).await.map(|()| "")
    });
    rec!("stat /zookeeper", async {
        c1.check_stat("/zookeeper")
            .await
            .map(|st| st.map_or("none".to_owned(), |st| s(&st)))
    });
    rec!("children /zookeeper", async {
        c1.list_children("/zookeeper").await.map(|mut k| {
            k.sort();
            format!("{k:?}")
        })
    });
    rec!("acl /zookeeper/config", async {
        c1.get_acl("/zookeeper/config")
            .await
            .map(|(acl, st)| format!("{acl:?} {}", s(&st)))
    });
    rec!("count descendants /", async {
        c1.count_descendants_number("/")
            .await
            .map(|n| n.to_string())
    });
    rec!("ephemerals with other prefix", async {
        c1.list_ephemerals("/zookeeper")
            .await
            .map(|e| format!("{e:?}"))
    });
    rec!("exists watch on missing then delete parent child", async {
        c1.check_stat("/conf/e/none")
            .await
            .map(|st| st.map_or("none".to_owned(), |st| s(&st)))
    });

    // 3.8 only notifies watchers allowed to read the node.
    bounded(
        "hidden",
        c3.create(
            "/conf/hidden",
            b"h",
            &CreateMode::Persistent.with_acls(Acls::creator_all()),
        ),
    )
    .await
    .unwrap();
    let (_, hidden_watch) = bounded("watch hidden", c1.check_and_watch_stat("/conf/hidden"))
        .await
        .unwrap();
    let (_, _, own_watch) = bounded("own watch", c3.get_and_watch_data("/conf/hidden"))
        .await
        .unwrap();
    rec!("alice sets hidden", async {
        c3.set_data("/conf/hidden", b"H", None)
            .await
            .map(|st| s(&st))
    });
    log.push(event("alice's own watch", own_watch).await);
    let mut hidden_changed = std::pin::pin!(hidden_watch.changed());
    let delivered = tokio::time::timeout(Duration::from_millis(500), hidden_changed.as_mut()).await;
    log.push(format!(
        "anonymous watcher told: {:?}",
        delivered.map(|e| format!("{:?}", e.event_type)).ok()
    ));

    // Final listing.
    rec!("final children", async {
        c1.list_children("/conf").await.map(|mut k| {
            k.sort();
            format!("{k:?}")
        })
    });
    log
}

/// Faults through a [`FaultProxy`] in front of either server: missed notifications come back
/// through `setWatches` on reconnect, and session expiry removes ephemerals.
async fn fault_script(cs: &str) -> Vec<String> {
    let proxy = FaultProxy::start(cs.to_owned()).await.unwrap();
    let mut log = Vec::new();
    let direct = connect(cs).await;
    let viaproxy = connect(&proxy.connect_string()).await;
    bounded("base", direct.create("/f", b"", &persistent()))
        .await
        .unwrap();
    bounded("changed", direct.create("/f/changed", b"", &persistent()))
        .await
        .unwrap();
    bounded("deleted", direct.create("/f/deleted", b"", &persistent()))
        .await
        .unwrap();
    bounded("same", direct.create("/f/same", b"", &persistent()))
        .await
        .unwrap();
    let (_, _, w_changed) = bounded("w1", viaproxy.get_and_watch_data("/f/changed"))
        .await
        .unwrap();
    let (_, _, w_deleted) = bounded("w2", viaproxy.get_and_watch_data("/f/deleted"))
        .await
        .unwrap();
    let (_, w_created) = bounded("w3", viaproxy.check_and_watch_stat("/f/created"))
        .await
        .unwrap();
    let (_, w_children) = bounded("w4", viaproxy.list_and_watch_children("/f"))
        .await
        .unwrap();
    let (_, _, w_same) = bounded("w5", viaproxy.get_and_watch_data("/f/same"))
        .await
        .unwrap();
    proxy.set_paused(true);
    bounded("set", direct.set_data("/f/changed", b"x", None))
        .await
        .unwrap();
    bounded("delete", direct.delete("/f/deleted", None))
        .await
        .unwrap();
    bounded("create", direct.create("/f/created", b"", &persistent()))
        .await
        .unwrap();
    proxy.drop_connections();
    proxy.set_paused(false);
    log.push(event("missed data change", w_changed).await);
    log.push(event("missed delete", w_deleted).await);
    log.push(event("missed create", w_created).await);
    log.push(event("missed children", w_children).await);
    // The untouched watch was re-armed: it fires on the next change, once.
    let deadline = std::time::Instant::now() + STEP;
    loop {
        match bounded("reconnected", viaproxy.check_stat("/f/same")).await {
            Ok(_) => break,
            Err(_) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    bounded("set same", direct.set_data("/f/same", b"y", None))
        .await
        .unwrap();
    log.push(event("re-armed watch", w_same).await);

    // Persistent watches across a reconnect (zookeeper-client 0.11.2 re-sends them only
    // through setWatches2, which it never picks: both servers must agree on what happens).
    let mut persistent_watch = bounded(
        "persistent",
        viaproxy.watch("/f/p", AddWatchMode::Persistent),
    )
    .await
    .unwrap();
    proxy.drop_connections();
    let deadline = std::time::Instant::now() + STEP;
    while bounded("reconnect", viaproxy.check_stat("/f"))
        .await
        .is_err()
    {
        assert!(std::time::Instant::now() < deadline, "no reconnect");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    bounded("create p", direct.create("/f/p", b"", &persistent()))
        .await
        .unwrap();
    let mut seen = Vec::new();
    while let Ok(e) =
        tokio::time::timeout(Duration::from_millis(500), persistent_watch.changed()).await
    {
        seen.push(format!("{:?}", e.event_type));
    }
    log.push(format!("persistent watch after reconnect saw {seen:?}"));
    drop(persistent_watch);

    // Limits: just under jute.maxbuffer works, 1 MiB of data closes the connection.
    rec_len(
        &mut log,
        "almost 1 MiB",
        bounded(
            "almost",
            direct.create("/f/almost", &vec![1u8; 1024 * 1024 - 200], &persistent()),
        )
        .await,
    );
    rec_len(
        &mut log,
        "1 MiB",
        bounded(
            "huge",
            viaproxy.create("/f/huge", &vec![1u8; 1024 * 1024], &persistent()),
        )
        .await,
    );
    let deadline = std::time::Instant::now() + STEP;
    let huge = loop {
        match bounded("huge stat", viaproxy.check_stat("/f/huge")).await {
            Ok(stat) => break stat.is_some(),
            Err(_) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("{e:?}"),
        }
    };
    log.push(format!("huge node exists: {huge}"));

    // Expiry removes ephemerals and tells watchers.
    let victim = connect(&proxy.connect_string()).await;
    bounded(
        "eph",
        victim.create(
            "/f/eph",
            b"",
            &CreateMode::Ephemeral.with_acls(Acls::anyone_all()),
        ),
    )
    .await
    .unwrap();
    let (_, gone) = bounded("w eph", direct.check_and_watch_stat("/f/eph"))
        .await
        .unwrap();
    let states = victim.state_watcher();
    bounded("expire", zk_curator_testing::expire_session(cs, &victim))
        .await
        .unwrap();
    log.push(event("expired ephemeral", gone).await);
    let state = bounded("victim state", async {
        loop {
            let state = states.peek_state();
            if state.is_terminated() {
                return state;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    log.push(format!("victim state {state:?}"));
    let stat = bounded("f stat", direct.check_stat("/f"))
        .await
        .unwrap()
        .unwrap();
    log.push(format!("f {}", st(&stat, &[])));
    log
}

#[tokio::test(flavor = "multi_thread")]
async fn embedded_matches_real_zookeeper() {
    let embedded = EmbeddedServer::builder()
        .extended_types(true)
        .start()
        .await
        .unwrap();
    let mut ours = script(&embedded.connect_string()).await;
    ours.extend(fault_script(&embedded.connect_string()).await);
    // The real half: a missing ZooKeeper fails the test, unless ZK_SKIP_MISSING asks to skip.
    if !Prerequisite::ZooKeeper.check("embedded_matches_real_zookeeper") {
        return;
    }
    let real = ZooKeeperServer::start_async().await.unwrap();
    let mut theirs = script(&real.connect_string()).await;
    theirs.extend(fault_script(&real.connect_string()).await);
    let mut mismatches = Vec::new();
    for i in 0..ours.len().max(theirs.len()) {
        let a = ours.get(i).map_or("<missing>", String::as_str);
        let b = theirs.get(i).map_or("<missing>", String::as_str);
        if a != b {
            mismatches.push(format!("embedded: {a}\n    real: {b}"));
        }
    }
    for line in &theirs {
        println!("{line}");
    }
    assert!(
        mismatches.is_empty(),
        "transcripts differ:\n{}",
        mismatches.join("\n")
    );
}
