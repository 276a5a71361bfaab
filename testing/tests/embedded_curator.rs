//! Interop: Apache Curator (Java, Debian's `libcurator-recipes-java`) takes and releases an
//! `InterProcessMutex` against the embedded server, while a Rust client watches the lock
//! directory. Skipped with a notice when `javac` or the jars are missing.
#![allow(clippy::unwrap_used, missing_docs)]

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use zk_curator_testing::backend::Prerequisite;
use zk_curator_testing::EmbeddedServer;

const JARS: &[&str] = &[
    "curator-client.jar",
    "curator-framework.jar",
    "curator-recipes.jar",
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "guava.jar",
    "slf4j-api.jar",
    "slf4j-nop.jar",
];

const PROGRAM: &str = r#"
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryOneTime;

public class CuratorLock {
    public static void main(String[] args) throws Exception {
        try (CuratorFramework client = CuratorFrameworkFactory.newClient(
                args[0], 10000, 5000, new RetryOneTime(100))) {
            client.start();
            if (!client.blockUntilConnected(10, TimeUnit.SECONDS)) {
                throw new IllegalStateException("not connected");
            }
            InterProcessMutex mutex = new InterProcessMutex(client, "/curator/lock");
            for (int i = 0; i < 3; i++) {
                if (!mutex.acquire(10, TimeUnit.SECONDS)) {
                    throw new IllegalStateException("lock not acquired");
                }
                mutex.acquire();
                System.out.println("participants " + mutex.getParticipantNodes().size());
                mutex.release();
                mutex.release();
            }
            System.out.println("children " + client.getChildren().forPath("/curator/lock"));
            client.create().creatingParentContainersIfNeeded().withProtection()
                .forPath("/curator/data/node", "x".getBytes());
            System.out.println("data children " + client.getChildren().forPath("/curator/data").size());
            System.out.println("OK");
        }
    }
}
"#;

/// Runs a command on a blocking thread, killing it after two minutes.
async fn run_bounded(mut command: Command) -> Output {
    tokio::task::spawn_blocking(move || {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn curator_mutex_on_embedded_server() {
    let dir = Path::new("/usr/share/java");
    let missing: Vec<&str> = JARS
        .iter()
        .copied()
        .filter(|jar| !dir.join(jar).is_file())
        .collect();
    if !Prerequisite::Curator.check("curator_mutex_on_embedded_server") {
        return;
    }
    assert!(
        missing.is_empty(),
        "Curator is installed but these jars are missing: {missing:?} (apt-get install -y libcurator-recipes-java zookeeper)"
    );
    let server = EmbeddedServer::start().await.unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("CuratorLock.java"), PROGRAM).unwrap();
    let classpath = JARS
        .iter()
        .map(|jar| dir.join(jar).display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    let mut javac = Command::new("javac");
    javac
        .args(["-cp", &classpath, "-d"])
        .arg(work.path())
        .arg(work.path().join("CuratorLock.java"));
    let javac = run_bounded(javac).await;
    assert!(
        javac.status.success(),
        "javac failed: {}",
        String::from_utf8_lossy(&javac.stderr)
    );
    let full_classpath = format!("{}:{classpath}", work.path().display());
    let mut java = Command::new("java");
    java.args([
        "-cp",
        &full_classpath,
        "CuratorLock",
        &server.connect_string(),
    ]);
    let run = run_bounded(java).await;
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && stdout.contains("OK"),
        "Curator failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.contains("participants 1"), "{stdout}");
    assert!(stdout.contains("children []"), "{stdout}");
    assert!(stdout.contains("data children 1"), "{stdout}");
}
