//! Tests of `ZooKeeperServer`: lifecycle, restart, container/TTL tuning and process cleanup.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{
    available, bounded, connect, ephemeral, eventually, persistent, shared_server, unique,
};
use zk_curator_testing::{Error, ZooKeeperServer};
use zookeeper_client::{Acls, CreateMode, SessionState};

fn process_exists(pid: u32) -> bool {
    let out = Command::new("ps")
        .args(["-o", "stat=", "-p", &pid.to_string()])
        .output()
        .unwrap();
    let stat = String::from_utf8_lossy(&out.stdout);
    // A zombie is dead already, it only waits for its parent to collect it.
    !stat.trim().is_empty() && !stat.trim().starts_with('Z')
}

fn wait_process_gone(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while process_exists(pid) {
        assert!(Instant::now() < deadline, "JVM {pid} still alive");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn four_letter(port: u16, word: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(word.as_bytes()).ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    Some(reply)
}

#[test]
fn not_found_error_names_install_command() {
    let err = Error::ZooKeeperNotFound {
        missing: "java".to_owned(),
    };
    assert!(err
        .to_string()
        .starts_with("ZooKeeper not found: install it with `apt-get install -y zookeeper`"));
}

#[test]
fn builder_rejects_inverted_session_timeouts() {
    let err = ZooKeeperServer::builder()
        .min_session_timeout(Duration::from_secs(5))
        .max_session_timeout(Duration::from_secs(1))
        .start()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_stop_restart_and_drop() {
    if !available("lifecycle_stop_restart_and_drop") {
        return;
    }
    let started = Instant::now();
    let server = ZooKeeperServer::builder()
        .tick_time(Duration::from_millis(50))
        .start_async()
        .await
        .unwrap();
    eprintln!("server start took {:?}", started.elapsed());
    assert!(server.is_running());
    let port = server.port();
    assert_eq!(server.connect_string(), format!("127.0.0.1:{port}"));
    let conf = four_letter(port, "conf").unwrap();
    assert!(conf.contains("tickTime=50"), "{conf}");
    assert!(conf.contains("minSessionTimeout=400"), "{conf}");
    assert!(conf.contains("maxSessionTimeout=60000"), "{conf}");

    let log = server.log_tail(1000);
    assert!(
        log.contains(&format!("binding to port /127.0.0.1:{port}")),
        "{log}"
    );

    let client = connect(&server.connect_string()).await;
    bounded(client.create("/kept", b"data", &persistent()))
        .await
        .unwrap();
    drop(client);

    let pid = server.pid().unwrap();
    let stopped = Instant::now();
    server.stop();
    eprintln!("server stop took {:?}", stopped.elapsed());
    assert!(!server.is_running());
    assert_eq!(server.pid(), None);
    assert!(!process_exists(pid), "stop returned while the JVM is alive");
    assert!(four_letter(port, "srvr").is_none());
    server.stop(); // stopping twice is harmless

    let restarted = Instant::now();
    server.restart_async().await.unwrap();
    eprintln!("server restart took {:?}", restarted.elapsed());
    assert!(server.is_running());
    assert_eq!(server.port(), port);
    let client = connect(&server.connect_string()).await;
    let (data, _) = bounded(client.get_data("/kept")).await.unwrap();
    assert_eq!(data, b"data");
    drop(client);

    // A server that dies on its own is noticed, and can be restarted.
    let pid = server.pid().unwrap();
    Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.is_running() {
        assert!(Instant::now() < deadline, "crash not noticed");
        std::thread::sleep(Duration::from_millis(20));
    }
    server.restart().unwrap();
    assert!(four_letter(port, "srvr")
        .unwrap()
        .contains("Mode: standalone"));

    let dir = server.data_dir();
    let pid = server.pid().unwrap();
    assert!(dir.exists());
    drop(server);
    assert!(!process_exists(pid));
    assert!(!dir.exists(), "temporary directory left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_survives_quick_restart() {
    if !available("session_survives_quick_restart") {
        return;
    }
    let server = ZooKeeperServer::start_async().await.unwrap();
    let client = connect(&server.connect_string()).await;
    let session = client.session_id();
    bounded(client.create("/eph", b"", &ephemeral()))
        .await
        .unwrap();

    server.restart_async().await.unwrap();

    let mut state = client.state_watcher();
    bounded(async {
        while state.state() != SessionState::SyncConnected {
            state.changed().await;
        }
    })
    .await;
    // The request goes out only after the client has reconnected, so it must succeed.
    let stat = bounded(client.check_stat("/eph"))
        .await
        .unwrap()
        .expect("ephemeral node lost");
    assert_eq!(stat.ephemeral_owner, session.0);
    bounded(client.create("/eph2", b"", &ephemeral()))
        .await
        .unwrap();
    assert_eq!(client.state(), SessionState::SyncConnected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_and_ttl_nodes_are_reaped_quickly() {
    if !available("container_and_ttl_nodes_are_reaped_quickly") {
        return;
    }
    let server = shared_server();
    let client = connect(&server.connect_string()).await;

    let container = unique("container");
    bounded(client.create(
        &container,
        b"",
        &CreateMode::Container.with_acls(Acls::anyone_all()),
    ))
    .await
    .unwrap();
    let child = format!("{container}/child");
    bounded(client.create(&child, b"", &persistent()))
        .await
        .unwrap();
    bounded(client.delete(&child, None)).await.unwrap();
    let deleted = Instant::now();
    eventually("empty container to be deleted", || async {
        bounded(client.check_stat(&container))
            .await
            .unwrap()
            .is_none()
    })
    .await;
    eprintln!("empty container reaped after {:?}", deleted.elapsed());
    assert!(deleted.elapsed() < Duration::from_secs(5));

    let ttl = unique("ttl");
    let options = CreateMode::Persistent
        .with_acls(Acls::anyone_all())
        .with_ttl(Duration::from_millis(200));
    bounded(client.create(&ttl, b"", &options)).await.unwrap();
    let created = Instant::now();
    eventually("TTL node to be deleted", || async {
        bounded(client.check_stat(&ttl)).await.unwrap().is_none()
    })
    .await;
    eprintln!("TTL node reaped after {:?}", created.elapsed());
    assert!(created.elapsed() < Duration::from_secs(5));
}

const HELPER_ENV: &str = "ZK_TESTING_STATIC_HELPER";

/// Not a test by itself: run in a child process by `static_server_dies_with_test_process`.
#[test]
#[ignore = "helper, run in a child process by static_server_dies_with_test_process"]
fn helper_holds_static_server() {
    let Ok(mode) = std::env::var(HELPER_ENV) else {
        return;
    };
    let server = shared_server();
    println!("JAVA_PID={}", server.pid().unwrap());
    println!("PORT={}", server.port());
    println!("DIR={}", server.data_dir().parent().unwrap().display());
    std::io::stdout().flush().unwrap();
    if mode == "abort" {
        // Dies without unwinding, destructors or atexit handlers.
        std::process::abort();
    }
}

/// Runs the helper in a child test process; returns the server directory it left behind.
fn run_helper(mode: &str) -> std::path::PathBuf {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "helper_holds_static_server",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_ENV, mode)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| -> String {
        stdout
            .lines()
            .find_map(|line| line.find(name).map(|at| &line[at + name.len()..]))
            .unwrap_or_else(|| {
                panic!(
                    "helper printed no {name}: {stdout}\n{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            })
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned()
    };
    let pid: u32 = field("JAVA_PID=").parse().unwrap();
    let port: u16 = field("PORT=").parse().unwrap();
    let exited = Instant::now();
    wait_process_gone(pid);
    eprintln!(
        "{mode}: JVM {pid} gone {:?} after the test process exited",
        exited.elapsed()
    );
    assert!(four_letter(port, "srvr").is_none());
    field("DIR=").into()
}

#[test]
fn static_server_dies_with_test_process() {
    if !available("static_server_dies_with_test_process") {
        return;
    }
    let dirs = [run_helper("exit"), run_helper("abort")];
    // The directories of the never-dropped servers stay until the next server starts.
    let server = ZooKeeperServer::start().unwrap();
    for dir in dirs {
        assert!(!dir.exists(), "{} was not swept", dir.display());
    }
    drop(server);
}

const ENV_HELPER_ENV: &str = "ZK_TESTING_ENV_HELPER";

/// Not a test by itself: run with a doctored environment by `environment_problems_are_reported`.
#[test]
#[ignore = "helper, run in a child process by environment_problems_are_reported"]
fn helper_reports_environment_problem() {
    let Ok(mode) = std::env::var(ENV_HELPER_ENV) else {
        return;
    };
    let err = ZooKeeperServer::start().unwrap_err();
    match mode.as_str() {
        "no-java" => {
            assert!(!zk_curator_testing::zookeeper_available());
            assert!(matches!(err, Error::ZooKeeperNotFound { .. }), "{err}");
            assert!(
                err.to_string().contains("apt-get install -y zookeeper"),
                "{err}"
            );
        }
        "bad-classpath" => {
            assert!(zk_curator_testing::zookeeper_available());
            assert!(matches!(err, Error::ServerExited { .. }), "{err}");
            assert!(err.to_string().contains("QuorumPeerMain"), "{err}");
        }
        other => panic!("unknown mode {other}"),
    }
    println!("HELPER_OK {err}");
}

#[test]
fn environment_problems_are_reported() {
    if !available("environment_problems_are_reported") {
        return;
    }
    let run = |configure: &dyn Fn(&mut Command)| {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command.args([
            "helper_reports_environment_problem",
            "--exact",
            "--ignored",
            "--nocapture",
        ]);
        configure(&mut command);
        let out = command.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("HELPER_OK"),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!(
            "{}",
            stdout.lines().find(|l| l.contains("HELPER_OK")).unwrap()
        );
    };
    run(&|command| {
        command
            .env(ENV_HELPER_ENV, "no-java")
            .env("PATH", "/nonexistent")
            .env_remove("JAVA_HOME");
    });
    run(&|command| {
        command
            .env(ENV_HELPER_ENV, "bad-classpath")
            .env("ZOOKEEPER_CLASSPATH", "/nonexistent/zookeeper.jar");
    });
}
