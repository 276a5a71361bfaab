//! How the bench opens a session in this process: a zk-curator `Framework`
//! built the way a contender's row asks ([`Tune`]), or a bare
//! zookeeper-client `Client`. A `tcp+tls://` connect string gets the TLS
//! client settings that the TLS workload hands over once it has made its
//! certificates.

use std::sync::OnceLock;
use std::time::Duration;

use zk_curator::framework::{zk, TlsConfig};
use zk_curator::{CohortPolicy, Framework, FrameworkBuilder};

use super::limits::{within, BoxError, CONNECT_LIMIT};

/// Every contender's session timeout (the peers use the same): long enough
/// that idle sessions ping rarely, which keeps the request counts clean.
const SESSION_TIMEOUT: Duration = Duration::from_secs(30);

/// zk-curator with the in-process queue off (`FrameworkBuilder::local_queue(false)`):
/// every waiting task keeps a node of its own in ZooKeeper, as Curator's, and
/// as the library did before issue 9.
fn per_task_node(builder: FrameworkBuilder) -> Option<FrameworkBuilder> {
    Some(builder.local_queue(false))
}

/// How a zk-curator `Framework` is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tune {
    /// The library's defaults.
    Plain,
    /// Through [`per_task_node`].
    PerTaskNode,
    /// `FrameworkBuilder::release_before_reply(true)`: a release returns
    /// once its delete is queued, without waiting for the answer.
    ReleaseBeforeReply,
    /// `FrameworkBuilder::cohort(policy)`: a release passes the node to a
    /// task of the same framework waiting for the lock, with no request.
    Cohort(CohortPolicy),
}

impl Tune {
    fn apply(self, builder: FrameworkBuilder) -> Result<FrameworkBuilder, BoxError> {
        match self {
            Tune::Plain => Ok(builder),
            Tune::PerTaskNode => per_task_node(builder)
                .ok_or_else(|| "the per-task-node option does not exist yet".into()),
            Tune::ReleaseBeforeReply => Ok(builder.release_before_reply(true)),
            Tune::Cohort(policy) => Ok(builder.cohort(policy)),
        }
    }

    pub(crate) fn available(self) -> bool {
        self != Tune::PerTaskNode || per_task_node(Framework::builder()).is_some()
    }
}

/// A connected framework; over TLS for a `tcp+tls://` connect string (the
/// TLS workload's).
pub(crate) async fn framework(connect: &str, tune: Tune) -> Result<Framework, BoxError> {
    let builder = Framework::builder()
        .connect_string(connect)
        .session_timeout(SESSION_TIMEOUT)
        .connection_timeout(Duration::from_secs(10));
    let framework = tune.apply(configure(builder, connect)?)?.build()?;
    framework.start()?;
    framework.block_until_connected(CONNECT_LIMIT).await?;
    Ok(framework)
}

pub(crate) async fn raw_client(connect: &str) -> Result<zk::Client, BoxError> {
    let connecting = zk::Client::connector()
        .with_session_timeout(SESSION_TIMEOUT)
        .connect(connect);
    Ok(within(CONNECT_LIMIT, connecting).await??)
}

/// The scheme of a connect string reached over TLS (zk-curator's form; the
/// Curator peer strips it).
pub(crate) const TLS_SCHEME: &str = "tcp+tls://";

/// The client side of TLS, once the TLS workload has set it.
static CLIENT_TLS: OnceLock<TlsConfig> = OnceLock::new();

/// Hands the TLS client settings to every later `tcp+tls://` session (the
/// first call wins; a later one changes nothing).
pub(crate) fn set_client_tls(tls: TlsConfig) {
    let _ = CLIENT_TLS.set(tls);
}

/// `builder` with the TLS client settings when `connect` is a `tcp+tls://`
/// connect string; unchanged otherwise.
fn configure(builder: FrameworkBuilder, connect: &str) -> Result<FrameworkBuilder, BoxError> {
    if !connect.starts_with(TLS_SCHEME) {
        return Ok(builder);
    }
    let tls = CLIENT_TLS
        .get()
        .ok_or("a tcp+tls:// connect string before the TLS workload made its certificates")?;
    Ok(builder.tls(tls.clone()))
}
