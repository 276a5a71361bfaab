//! The dashboard's page in a real browser (issue 45): Debian's headless
//! Chromium, driven over WebDriver (chromedriver, through fantoccini),
//! reads the page's DOM, not the JSON: a lock's rows appear, change holder
//! after a hand-off, and disappear when the lock goes; node data that
//! holds markup is shown as text and no script of it runs. A screenshot is
//! saved beside the test's output (its path is printed). Needs `chromium`
//! and `chromium-driver` (or `ZK_SKIP_MISSING=chromium`).
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::net::TcpListener;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{make, raw, zkc};
use fantoccini::{ClientBuilder, Locator};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use zk_curator_testing::backend::Prerequisite;

const TEST_LIMIT: Duration = Duration::from_secs(180);
const WAIT: Duration = Duration::from_secs(20);
const UUID: &str = "0f8fad5b-d9cb-469f-a165-70867728950e";

/// A free port on loopback (bound, read, released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The page's sections as text: one string per lock or election.
async fn sections(browser: &fantoccini::Client) -> Vec<String> {
    let mut texts = Vec::new();
    for section in browser
        .find_all(Locator::Css("#paths section"))
        .await
        .unwrap_or_default()
    {
        texts.push(section.text().await.unwrap_or_default());
    }
    texts
}

/// Waits until the page's sections satisfy `check`; returns them.
async fn page_where(
    browser: &fantoccini::Client,
    what: &str,
    check: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + WAIT;
    loop {
        let now = sections(browser).await;
        if check(&now) {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "the page never showed {what}: {now:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The holder row's HOLDER cell text of the section for `path`.
fn holder_in(sections: &[String], path: &str) -> Option<String> {
    let section = sections
        .iter()
        .find(|s| s.lines().next().is_some_and(|l| l.starts_with(path)))?;
    section
        .lines()
        .find(|line| line.split_whitespace().nth(1) == Some("holder"))
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_follows_locks_in_a_real_browser() {
    if !Prerequisite::Chromium.check("the_page_follows_locks_in_a_real_browser") {
        return;
    }
    tokio::time::timeout(TEST_LIMIT, async {
        let root = format!("/cli-browser/root-{}", std::process::id());
        let client = raw().await;
        let lock = format!("{root}/locks/orders");
        let node = |seq: u32| format!("{lock}/_c_{UUID}-lock-{seq:010}");
        make(&client, &node(1), b"first-holder").await;
        make(&client, &node(2), b"second-holder").await;
        let evil = format!("{root}/locks/evil");
        let markup = r#"<img src=x onerror="document.title='pwned'"><script>document.title='pwned'</script>"#;
        make(&client, &format!("{evil}/_c_{UUID}-lock-0000000001"), markup.as_bytes()).await;
        // A node no recipe writes, named with markup: shown as unknown, as text.
        let stray = r#"<img src=x onerror="document.title='stray'">"#;
        make(&client, &format!("{evil}/{stray}"), b"").await;

        let mut dashboard = zkc(&["dashboard", &root, "--bind", "127.0.0.1:0"]).spawn().unwrap();
        let mut out = BufReader::new(dashboard.stdout.take().unwrap());
        let mut line = String::new();
        tokio::time::timeout(WAIT, out.read_line(&mut line)).await.unwrap().unwrap();
        let url = line
            .split_whitespace()
            .find(|word| word.starts_with("http://"))
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_owned();

        let port = free_port();
        let _driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let capabilities: serde_json::Map<String, serde_json::Value> = serde_json::from_value(serde_json::json!({
            "goog:chromeOptions": {
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900"]
            }
        }))
        .unwrap();
        let deadline = Instant::now() + WAIT;
        let browser = loop {
            match ClientBuilder::rustls()
                .unwrap()
                .capabilities(capabilities.clone())
                .connect(&format!("http://127.0.0.1:{port}"))
                .await
            {
                Ok(browser) => break browser,
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(err) => panic!("chromedriver never answered: {err}"),
            }
        };
        browser.goto(&url).await.unwrap();

        // Rows appear.
        let shown = page_where(&browser, "the lock's holder", |s| {
            holder_in(s, &lock).is_some_and(|row| row.contains("first-holder"))
        })
        .await;
        assert!(
            shown.iter().any(|s| s.contains("second-holder") && s.contains("waiter")),
            "{shown:#?}"
        );
        // Markup in node data is text, and none of it ran.
        let evil_section = shown.iter().find(|s| s.starts_with(&evil)).expect("the evil lock's section");
        assert!(evil_section.contains("<img src=x"), "{evil_section}");
        assert!(evil_section.contains(&format!("1 unknown node(s), no recipe's: {stray}")), "{evil_section}");
        assert!(evil_section.contains("unknown"), "{evil_section}");
        assert_eq!(browser.title().await.unwrap(), "zk-curator dashboard");
        let images = browser.find_all(Locator::Css("#paths img, #paths script")).await.unwrap();
        assert!(images.is_empty(), "markup from node data became elements");

        // A hand-off: the holder changes on the page.
        let started = Instant::now();
        client.delete(&node(1), None).await.unwrap();
        page_where(&browser, "the new holder", |s| {
            holder_in(s, &lock).is_some_and(|row| row.contains("second-holder"))
        })
        .await;
        println!("hand-off to the DOM: {:.1} ms", started.elapsed().as_secs_f64() * 1000.0);
        let png = browser.screenshot().await.unwrap();
        let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
        std::fs::write(&shot, &png).unwrap();
        println!("screenshot: {}", shot.display());
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");

        // The lock goes: its rows disappear.
        client.delete(&node(2), None).await.unwrap();
        client.delete(&lock, None).await.unwrap();
        page_where(&browser, "the lock gone", |s| !s.iter().any(|t| t.starts_with(&lock))).await;
        assert_eq!(browser.title().await.unwrap(), "zk-curator dashboard");
        browser.close().await.unwrap();
        dashboard.start_kill().unwrap();
        let _ = dashboard.wait().await;
    })
    .await
    .expect("test timed out");
}
