//! What the server handle, its accept loop and timers, and every connection share: the
//! settings chosen through the builder and the [`Shared`] state behind one `Arc`. Both
//! `server` and `connection` build on this module; neither needs the other's insides.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::task::AbortHandle;

use crate::ensemble::replication::Seat;
use crate::faults::Faults;
use crate::state::{Limits, State};
use crate::watch::ConnId;

/// How many client connections are served at once unless the builder says otherwise.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1000;

/// How many bytes of unsent replies a connection may have before the server stops reading its
/// requests, unless the builder says otherwise.
pub const DEFAULT_MAX_OUTSTANDING_BYTES: usize = 4 << 20;

/// Settings chosen through [`EmbeddedServerBuilder`](crate::EmbeddedServerBuilder).
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) super_user: Option<String>,
    pub(crate) tick_time: Duration,
    pub(crate) min_session_timeout: Duration,
    pub(crate) max_session_timeout: Duration,
    pub(crate) container_check_interval: Duration,
    /// The port to listen on; 0 asks the system for a free one.
    pub(crate) port: u16,
    pub(crate) extended_types: bool,
    pub(crate) sorted_children: bool,
    /// What node times count from (ms since the epoch); `None`: the wall clock at start.
    pub(crate) node_time_origin: Option<i64>,
    pub(crate) max_connections: usize,
    pub(crate) max_outstanding_bytes: usize,
    /// Where TLS is served, if anywhere.
    #[cfg(feature = "tls")]
    pub(crate) tls: Option<TlsListen>,
}

/// Where the server speaks TLS.
#[cfg(feature = "tls")]
#[derive(Clone, Debug)]
pub(crate) enum TlsListen {
    /// Only TLS, on [`Settings::port`].
    Only(crate::tls::TlsConfig),
    /// Plaintext on [`Settings::port`] and TLS on this port (0: a free one).
    Beside(u16, crate::tls::TlsConfig),
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            super_user: None,
            tick_time: Duration::from_millis(100),
            min_session_timeout: Duration::from_millis(400),
            max_session_timeout: Duration::from_secs(60),
            container_check_interval: Duration::from_millis(100),
            port: 0,
            extended_types: false,
            sorted_children: false,
            node_time_origin: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_outstanding_bytes: DEFAULT_MAX_OUTSTANDING_BYTES,
            #[cfg(feature = "tls")]
            tls: None,
        }
    }
}

/// State shared by the handle and every task.
pub(crate) struct Shared {
    pub(crate) state: Mutex<State>,
    pub(crate) settings: Settings,
    /// The port serving plaintext, if any (for `conf`).
    pub(crate) client_port: Option<u16>,
    /// The port serving TLS, if any (for `conf`).
    pub(crate) secure_client_port: Option<u16>,
    pub(crate) faults: Faults,
    /// The task serving each connection, by id: `drop_connections` aborts them, and so
    /// wakes whatever waits on them, in that order.
    pub(crate) connections: Mutex<BTreeMap<ConnId, AbortHandle>>,
    pub(crate) next_conn: AtomicU64,
    pub(crate) stopped: AtomicBool,
    /// The server's place in a simulated ensemble, if it is a member of one
    /// ([`crate::ensemble`]); unset on a single server.
    pub(crate) seat: std::sync::OnceLock<Seat>,
}

impl Shared {
    /// Fresh state for a server with these settings, listening for plaintext on
    /// `client_port` and for TLS on `secure_client_port`.
    pub(crate) fn new(
        settings: Settings,
        client_port: Option<u16>,
        secure_client_port: Option<u16>,
    ) -> Self {
        let limits = Limits {
            min_session_timeout: settings.min_session_timeout,
            max_session_timeout: settings.max_session_timeout,
            super_digest: settings.super_user.clone(),
            extended_types: settings.extended_types,
            sorted_children: settings.sorted_children,
            node_time_origin: settings.node_time_origin,
        };
        Shared {
            state: Mutex::new(State::new(limits)),
            settings,
            client_port,
            secure_client_port,
            faults: Faults::default(),
            connections: Mutex::new(BTreeMap::new()),
            next_conn: AtomicU64::new(1),
            stopped: AtomicBool::new(false),
            seat: std::sync::OnceLock::new(),
        }
    }

    /// What the admin words report about the configuration.
    pub(crate) fn admin(&self) -> crate::admin::Config {
        crate::admin::Config {
            client_port: self.client_port,
            secure_client_port: self.secure_client_port,
            tick_time: self.settings.tick_time,
            min_session_timeout: self.settings.min_session_timeout,
            max_session_timeout: self.settings.max_session_timeout,
            max_connections: self.settings.max_connections,
        }
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn connections(&self) -> MutexGuard<'_, BTreeMap<ConnId, AbortHandle>> {
        self.connections.lock().unwrap_or_else(|p| p.into_inner())
    }
}
