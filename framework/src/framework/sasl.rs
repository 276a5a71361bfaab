//! The SASL mechanism a framework authenticates every session with.

use std::fmt;

#[allow(unused_imports)]
use zookeeper_client as zk;

/// A SASL mechanism and its settings. Its `Debug` never shows a password.
#[derive(Clone)]
pub(crate) enum Sasl {
    /// DIGEST-MD5: a user and password the server's JAAS
    /// `DigestLoginModule` checks.
    #[cfg(feature = "sasl-digest-md5")]
    DigestMd5 { user: String, password: String },
    /// GSSAPI (Kerberos) from the credential cache, for the service
    /// principal `service/host` (host: the server's, unless given).
    #[cfg(feature = "sasl-gssapi")]
    Gssapi {
        service: String,
        host: Option<String>,
    },
}

impl fmt::Debug for Sasl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            #[cfg(feature = "sasl-digest-md5")]
            Sasl::DigestMd5 { ref user, .. } => f
                .debug_struct("DigestMd5")
                .field("user", user)
                .finish_non_exhaustive(),
            #[cfg(feature = "sasl-gssapi")]
            Sasl::Gssapi {
                ref service,
                ref host,
            } => f
                .debug_struct("Gssapi")
                .field("service", service)
                .field("host", host)
                .finish(),
        }
    }
}

impl Sasl {
    /// The client's options for one session.
    #[cfg(any(feature = "sasl-digest-md5", feature = "sasl-gssapi"))]
    pub(crate) fn options(&self) -> zk::SaslOptions {
        match self {
            #[cfg(feature = "sasl-digest-md5")]
            Sasl::DigestMd5 { user, password } => {
                zk::SaslOptions::digest_md5(user.clone(), password.clone()).into()
            }
            #[cfg(feature = "sasl-gssapi")]
            Sasl::Gssapi { service, host } => {
                let options = zk::SaslOptions::gssapi().with_username(service.clone());
                match host {
                    Some(host) => options.with_hostname(host.clone()).into(),
                    None => options.into(),
                }
            }
        }
    }
}
