//! Where the ensemble is: the connect string's rules, and the
//! [`EnsembleProvider`] the framework asks each time it builds a session.
//!
//! A connect string is `host[:port][,host[:port]...]`, each entry optionally
//! written `tcp://host:port` (plaintext) or `tcp+tls://host:port` (TLS,
//! ZooKeeper's `secureClientPort`). A bare `host:port` uses TLS when the
//! framework has a TLS configuration that says so (`TlsConfig::plain_hosts_use_tls`,
//! the default; feature `tls`), plaintext otherwise. The chroot is not part of it: it is the
//! framework's namespace.
//!
//! # What a session can follow
//!
//! The provider is asked for the string every time the framework builds a
//! session: at start, and after every session loss. A session, once built,
//! keeps the host list it was built with: it reconnects (after a
//! disconnection) only to those hosts. A service whose ensemble is replaced
//! host by host therefore follows it as long as one host of its session's
//! list is still up while the session lives; when none is, the session is
//! lost after the session timeout, and the next one is built on the
//! provider's new list. Nothing else changes for the recipes: a lost
//! session is the loss they already handle.

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};

/// Where the ensemble is now. The framework calls
/// [`connect_string`](Self::connect_string) each time it builds a session
/// (Curator's `EnsembleProvider`): return the hosts as they are at that
/// moment, read from a file, a service registry, DNS…
///
/// The call is synchronous and made on the framework's supervisor task:
/// keep it quick (return what a background refresh of your own last saw).
/// An error, or a string that breaks the connect-string rules, counts as a
/// failed attempt: it is logged, and the framework tries again after its
/// back-off.
pub trait EnsembleProvider: Send + Sync + fmt::Debug + 'static {
    /// The ensemble now, as a connect string (see the [module](self) doc).
    ///
    /// # Errors
    /// Whatever stops the provider from knowing the ensemble; the framework
    /// logs it and tries again later.
    fn connect_string(&self) -> Result<String>;
}

/// The default provider: the same connect string every time.
#[derive(Clone, Debug)]
pub struct FixedEnsemble(pub String);

impl EnsembleProvider for FixedEnsemble {
    fn connect_string(&self) -> Result<String> {
        Ok(self.0.clone())
    }
}

impl<P: EnsembleProvider> EnsembleProvider for Arc<P> {
    fn connect_string(&self) -> Result<String> {
        (**self).connect_string()
    }
}

/// Whether a connect string names TLS, plaintext or leaves it to the
/// framework's default, per entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    /// `tcp://host:port`.
    Plain,
    /// `tcp+tls://host:port`.
    Tls,
    /// `host:port`: the framework's default.
    Default,
}

/// Checks `connect_string` against the rules of the module doc and returns
/// it trimmed, with the transport of each entry.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the entry and what is wrong with it.
pub(crate) fn check(connect_string: &str) -> Result<(String, Vec<Transport>)> {
    let trimmed = connect_string.trim();
    if trimmed.is_empty() {
        return Err(Error::InvalidArgument(
            "a connect string is required".into(),
        ));
    }
    let mut transports = Vec::new();
    for entry in trimmed.split(',') {
        let entry = entry.trim();
        let (transport, address) = if let Some(rest) = entry.strip_prefix("tcp+tls://") {
            (Transport::Tls, rest)
        } else if let Some(rest) = entry.strip_prefix("tcp://") {
            (Transport::Plain, rest)
        } else if let Some((scheme, _)) = entry.split_once("://") {
            return Err(Error::InvalidArgument(format!(
                "connect string entry {entry:?}: unknown scheme {scheme:?} (use tcp:// or tcp+tls://)"
            )));
        } else {
            (Transport::Default, entry)
        };
        if address.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "connect string {trimmed:?} has an empty entry"
            )));
        }
        if address.contains('/') {
            return Err(Error::InvalidArgument(format!(
                "connect string entry {entry:?}: put the chroot in `namespace(..)`, not in the connect string"
            )));
        }
        if transport == Transport::Tls && !cfg!(feature = "tls") {
            return Err(Error::InvalidArgument(format!(
                "connect string entry {entry:?} asks for TLS, but zk-curator was built without its `tls` feature"
            )));
        }
        transports.push(transport);
    }
    Ok((trimmed.to_owned(), transports))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_may_name_their_transport() {
        let (s, t) = check(" 127.0.0.1:2181,tcp://a:1 ").expect("valid");
        assert_eq!(s, "127.0.0.1:2181,tcp://a:1");
        assert_eq!(t, vec![Transport::Default, Transport::Plain]);
    }

    #[test]
    fn a_chroot_an_unknown_scheme_or_an_empty_entry_is_refused() {
        for bad in [
            "",
            "a:1/chroot",
            "tcp://a:1/x",
            "http://a:1",
            "a:1,,b:2",
            "tcp+tls://",
        ] {
            let err = check(bad).expect_err(bad);
            assert!(matches!(err, Error::InvalidArgument(_)), "{bad}: {err}");
        }
    }

    #[test]
    fn tls_entries_need_the_feature() {
        let checked = check("tcp+tls://a:2281");
        assert_eq!(checked.is_ok(), cfg!(feature = "tls"), "{checked:?}");
    }

    #[test]
    fn the_fixed_provider_returns_its_string() {
        let provider = FixedEnsemble("a:1".into());
        assert_eq!(provider.connect_string().ok().as_deref(), Some("a:1"));
    }
}
