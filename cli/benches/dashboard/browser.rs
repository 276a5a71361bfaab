//! The page in headless Chromium, driven over WebDriver (Debian's
//! `chromium` and `chromium-driver`, through fantoccini, as
//! `tests/dashboard_browser.rs` drives it). A probe installed in the page
//! watches `#paths` with a `MutationObserver`: when the path the bench
//! names has a row naming the node it expects (as holder, for a hand-off),
//! the probe takes `performance.timeOrigin + performance.now()`, the
//! machine's wall clock in milliseconds, as the bench's commit instant is.
//! It also keeps when the `/events` message that brought the change reached
//! the page (the message event's `timeStamp`), so that the page's own share
//! (parsing and rendering) shows apart from the server's and the network's.

use std::net::TcpListener;
use std::process::Stdio;
use std::time::{Duration, Instant};

use fantoccini::wd::TimeoutConfiguration;
use fantoccini::{Client, ClientBuilder};
use serde_json::{json, Value};
use tokio::process::{Child, Command};
use zk_curator_testing::backend::Prerequisite;

use super::BoxError;

/// How long chromedriver may take to answer its first session request.
const DRIVER_LIMIT: Duration = Duration::from_secs(30);

/// The probe: `window.__zkBench`, with `expect(path, name, holder)`,
/// `wait(limit, done)` and `now()`. The page puts each view in `#paths`
/// afresh (one `section` per path, its title starting with the path, one
/// table row per participant: ROLE second, NODE ninth).
const PROBE: &str = r#"
const box = document.getElementById("paths");
let target = null;
const clock = () => performance.timeOrigin + performance.now();
function finish(t) {
  if (t.finished) return;
  t.finished = true;
  if (t.done) t.done({ dom: t.at, message: t.message });
}
function check() {
  const t = target;
  if (!t || t.at !== null) return;
  const now = clock();
  for (const section of box.children) {
    const title = section.querySelector("h2");
    if (!title || !title.textContent.startsWith(t.path + " ")) continue;
    for (const row of section.querySelectorAll("tr")) {
      const cells = row.children;
      if (cells.length < 9 || cells[0].tagName !== "TD") continue;
      if (cells[8].textContent === t.name && (!t.holder || cells[1].textContent === "holder")) {
        t.at = now;
        setTimeout(() => finish(t), 0);
        return;
      }
    }
    return;
  }
}
new MutationObserver(check).observe(box, { childList: true, subtree: true, characterData: true });
// Runs after the page's own listener (registered first) has rendered the
// message, and after the observer's check of that render.
if (typeof source !== "undefined") {
  const seen = (event) => {
    const t = target;
    if (t && t.at !== null && t.message === null && !t.finished) {
      t.message = performance.timeOrigin + event.timeStamp;
      finish(t);
    }
  };
  // The whole view, and each change after it.
  source.addEventListener("view", seen);
  source.addEventListener("change", seen);
}
window.__zkBench = {
  expect(path, name, holder) {
    target = { path, name, holder, at: null, message: null, finished: false, done: null };
    check();
  },
  wait(limit, done) {
    const t = target;
    if (!t) return done(null);
    if (t.finished) return done({ dom: t.at, message: t.message });
    t.done = done;
    setTimeout(() => { if (!t.finished) { t.done = null; done(null); } }, limit);
  },
  now: clock,
};
"#;

/// What the page showed for one expectation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shown {
    /// When the DOM showed it (ms since the epoch, the page's clock).
    pub(crate) dom_ms: f64,
    /// When the `/events` message that brought it reached the page.
    pub(crate) message_ms: Option<f64>,
}

/// Headless Chromium on the dashboard's page, and its chromedriver.
pub(crate) struct Browser {
    driver: Child,
    client: Client,
}

impl std::fmt::Debug for Browser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Browser").finish_non_exhaustive()
    }
}

/// A free port on loopback (bound, read, released).
fn free_port() -> Result<u16, BoxError> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Browser {
    /// chromedriver, headless Chromium on `url`, and the probe in the page.
    /// `None` (with a notice) when they are not installed.
    pub(crate) async fn start(url: &str) -> Result<Option<Browser>, BoxError> {
        if !Prerequisite::Chromium.is_available() {
            println!(
                "DOM figure skipped: it needs {} (apt-get install -y {})",
                Prerequisite::Chromium.description(),
                Prerequisite::Chromium.packages()
            );
            return Ok(None);
        }
        let port = free_port()?;
        let mut driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        match Self::connect(port, url).await {
            Ok(client) => Ok(Some(Browser { driver, client })),
            Err(err) => {
                let _ = driver.start_kill();
                let _ = driver.wait().await;
                Err(err)
            }
        }
    }

    async fn connect(port: u16, url: &str) -> Result<Client, BoxError> {
        let capabilities: serde_json::Map<String, Value> = serde_json::from_value(json!({
            "goog:chromeOptions": {
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=1280,900", "--disable-background-timer-throttling",
                    "--disable-renderer-backgrounding", "--disable-backgrounding-occluded-windows"
                ]
            }
        }))?;
        let deadline = Instant::now() + DRIVER_LIMIT;
        let client = loop {
            match ClientBuilder::rustls()?
                .capabilities(capabilities.clone())
                .connect(&format!("http://127.0.0.1:{port}"))
                .await
            {
                Ok(client) => break client,
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(err) => return Err(format!("chromedriver never answered: {err}").into()),
            }
        };
        client
            .update_timeouts(TimeoutConfiguration::new(
                Some(Duration::from_secs(300)),
                Some(Duration::from_secs(60)),
                None,
            ))
            .await?;
        client.goto(url).await?;
        client.execute(PROBE, vec![]).await?;
        Ok(client)
    }

    /// From now on, waits for `path`'s section to have a row naming the
    /// node `name` (as holder, if `holder`).
    pub(crate) async fn expect(
        &self,
        path: &str,
        name: &str,
        holder: bool,
    ) -> Result<(), BoxError> {
        self.client
            .execute(
                "window.__zkBench.expect(arguments[0], arguments[1], arguments[2]);",
                vec![json!(path), json!(name), json!(holder)],
            )
            .await?;
        Ok(())
    }

    /// When the page showed what [`Browser::expect`] named (at most
    /// `limit` from now).
    pub(crate) async fn wait(&self, limit: Duration) -> Result<Shown, BoxError> {
        let shown = self
            .client
            .execute_async(
                "window.__zkBench.wait(arguments[0], arguments[1]);",
                vec![json!(limit.as_millis() as u64)],
            )
            .await?;
        let dom_ms = shown["dom"]
            .as_f64()
            .ok_or_else(|| format!("the page did not show it within {limit:?}"))?;
        Ok(Shown {
            dom_ms,
            message_ms: shown["message"].as_f64(),
        })
    }

    /// The page's clock (ms since the epoch).
    pub(crate) async fn now_ms(&self) -> Result<f64, BoxError> {
        let now = self
            .client
            .execute("return window.__zkBench.now();", vec![])
            .await?;
        Ok(now.as_f64().ok_or("the page's clock is no number")?)
    }

    /// Closes the browser, then stops chromedriver through its handle.
    pub(crate) async fn stop(mut self) {
        let _ = tokio::time::timeout(DRIVER_LIMIT, self.client.close()).await;
        let _ = self.driver.start_kill();
        let _ = self.driver.wait().await;
    }
}
