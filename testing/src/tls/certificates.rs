//! Test certificates (the `tls` feature): see the [parent module](super).

use std::fmt;
use std::fs;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use tempfile::TempDir;

use super::ServerTls;
use crate::error::Error;

/// Prefix of the temporary directories holding test certificates.
const DIR_PREFIX: &str = "zk-testing-tls-";

/// A certificate and its private key, as PEM text and as files.
#[derive(Clone)]
pub struct TestIdentity {
    name: String,
    cert_pem: String,
    key_pem: String,
    cert_path: PathBuf,
    key_path: PathBuf,
    bundle_path: PathBuf,
}

impl fmt::Debug for TestIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The key is a throwaway test key, but it has no place in logs either.
        f.debug_struct("TestIdentity")
            .field("name", &self.name)
            .field("cert_path", &self.cert_path)
            .field("key_path", &self.key_path)
            .finish_non_exhaustive()
    }
}

impl TestIdentity {
    /// The name its files are called after (`server`, `client`, `ca`, ...).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The certificate, PEM (`-----BEGIN CERTIFICATE-----`).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The private key, PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`).
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// The file holding [`cert_pem`](Self::cert_pem): `<name>.crt`.
    pub fn cert_path(&self) -> &Path {
        &self.cert_path
    }

    /// The file holding [`key_pem`](Self::key_pem): `<name>.key`.
    pub fn key_path(&self) -> &Path {
        &self.key_path
    }

    /// The file holding the key followed by the certificate, `<name>.pem`: what ZooKeeper's
    /// `ssl.keyStore.type=PEM` reads.
    pub fn bundle_path(&self) -> &Path {
        &self.bundle_path
    }

    /// The key followed by the certificate, as written to [`bundle_path`](Self::bundle_path).
    pub fn bundle_pem(&self) -> String {
        format!("{}{}", self.key_pem, self.cert_pem)
    }

    /// Overwrites `target`'s three files with this identity's certificate and key, so that
    /// whoever reads `target`'s paths next finds this identity (a reload test). `target`'s
    /// PEM text in memory is unchanged.
    ///
    /// # Errors
    /// A file could not be written.
    pub fn write_over(&self, target: &TestIdentity) -> Result<(), Error> {
        write_file(&target.cert_path, &self.cert_pem)?;
        write_file(&target.key_path, &self.key_pem)?;
        write_file(&target.bundle_path, &self.bundle_pem())
    }
}

/// A certificate authority: its identity and what signs with its key.
struct Authority {
    identity: TestIdentity,
    issuer: Issuer<'static, KeyPair>,
}

/// The certificates of a test, made by [`TestCertificates::generate`]; see the
/// [module docs](super).
pub struct TestCertificates {
    ca: Authority,
    server: TestIdentity,
    client: TestIdentity,
    untrusted_ca: Authority,
    untrusted_server: TestIdentity,
    untrusted_client: TestIdentity,
    expired_server: TestIdentity,
    expired_client: TestIdentity,
    // Declared last: the files go once nothing refers to them.
    dir: TempDir,
}

impl fmt::Debug for TestCertificates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestCertificates")
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

/// What a leaf certificate is for.
#[derive(Clone)]
enum Role {
    Server,
    /// A server certificate naming only this DNS name (not 127.0.0.1).
    ServerFor(String),
    Client,
}

/// Validity of a leaf certificate.
#[derive(Clone, Copy)]
enum Validity {
    Current,
    Expired,
}

impl TestCertificates {
    /// Makes every certificate of the [module docs](super) and writes them to a new temporary
    /// directory.
    ///
    /// # Errors
    /// Key generation or signing failed, or a file could not be written.
    pub fn generate() -> Result<Self, Error> {
        let dir = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .tempdir()
            .map_err(|err| Error::io("cannot create a directory for certificates", err))?;
        let root = dir.path();
        let ca = authority(root, "ca", "zk-curator test CA")?;
        let untrusted_ca = authority(root, "untrusted-ca", "zk-curator untrusted test CA")?;
        let leaf =
            |ca: &Authority, name: &str, role, validity| leaf(root, ca, name, role, validity);
        Ok(TestCertificates {
            server: leaf(&ca, "server", Role::Server, Validity::Current)?,
            client: leaf(&ca, "client", Role::Client, Validity::Current)?,
            untrusted_server: leaf(
                &untrusted_ca,
                "untrusted-server",
                Role::Server,
                Validity::Current,
            )?,
            untrusted_client: leaf(
                &untrusted_ca,
                "untrusted-client",
                Role::Client,
                Validity::Current,
            )?,
            expired_server: leaf(&ca, "expired-server", Role::Server, Validity::Expired)?,
            expired_client: leaf(&ca, "expired-client", Role::Client, Validity::Expired)?,
            ca,
            untrusted_ca,
            dir,
        })
    }

    /// The directory holding every file.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The trusted authority (self-signed; its key signs the other trusted certificates).
    pub fn ca(&self) -> &TestIdentity {
        &self.ca.identity
    }

    /// A server certificate from [`ca`](Self::ca) for `127.0.0.1` and `localhost`.
    pub fn server(&self) -> &TestIdentity {
        &self.server
    }

    /// A client certificate from [`ca`](Self::ca), common name `zk-curator-test-client`.
    pub fn client(&self) -> &TestIdentity {
        &self.client
    }

    /// A second authority, which nothing trusts by default.
    pub fn untrusted_ca(&self) -> &TestIdentity {
        &self.untrusted_ca.identity
    }

    /// A server certificate for `127.0.0.1` and `localhost` from
    /// [`untrusted_ca`](Self::untrusted_ca).
    pub fn untrusted_server(&self) -> &TestIdentity {
        &self.untrusted_server
    }

    /// A client certificate from [`untrusted_ca`](Self::untrusted_ca).
    pub fn untrusted_client(&self) -> &TestIdentity {
        &self.untrusted_client
    }

    /// A server certificate from [`ca`](Self::ca) for `127.0.0.1` and `localhost` that
    /// expired on 2020-01-02.
    pub fn expired_server(&self) -> &TestIdentity {
        &self.expired_server
    }

    /// A client certificate from [`ca`](Self::ca) that expired on 2020-01-02.
    pub fn expired_client(&self) -> &TestIdentity {
        &self.expired_client
    }

    /// Signs a new client certificate with the trusted authority, common name
    /// `zk-curator-test-<name>`, written as `<name>.crt`, `<name>.key` and `<name>.pem`.
    ///
    /// # Errors
    /// `name` is not a plain file name, signing failed, or a file could not be written.
    pub fn issue_client(&self, name: &str) -> Result<TestIdentity, Error> {
        check_name(name)?;
        leaf(self.dir(), &self.ca, name, Role::Client, Validity::Current)
    }

    /// Signs a new server certificate for `127.0.0.1` and `localhost` with the trusted
    /// authority, written as `<name>.crt`, `<name>.key` and `<name>.pem`.
    ///
    /// # Errors
    /// As [`issue_client`](Self::issue_client).
    pub fn issue_server(&self, name: &str) -> Result<TestIdentity, Error> {
        check_name(name)?;
        leaf(self.dir(), &self.ca, name, Role::Server, Validity::Current)
    }

    /// Signs a new server certificate with the trusted authority that names
    /// only the DNS name `host` (neither `127.0.0.1` nor `localhost`): a
    /// server presenting it on loopback is refused by a client checking the
    /// name. Written as `<name>.crt`, `<name>.key` and `<name>.pem`.
    ///
    /// # Errors
    /// As [`issue_client`](Self::issue_client), or `host` is not a DNS name.
    pub fn issue_server_for(&self, name: &str, host: &str) -> Result<TestIdentity, Error> {
        check_name(name)?;
        leaf(
            self.dir(),
            &self.ca,
            name,
            Role::ServerFor(host.to_owned()),
            Validity::Current,
        )
    }

    /// The [`ServerTls`] of a ZooKeeper presenting [`server`](Self::server) and trusting
    /// clients of [`ca`](Self::ca): TLS only, client certificates required.
    pub fn server_tls(&self) -> ServerTls {
        ServerTls::new(self.server.bundle_path(), self.ca().cert_path())
    }
}

fn check_name(name: &str) -> Result<(), Error> {
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if plain {
        Ok(())
    } else {
        Err(Error::InvalidConfig(format!(
            "certificate name {name:?}: use letters, digits, `-` and `_` only"
        )))
    }
}

fn tls_error(what: &str, err: rcgen::Error) -> Error {
    Error::InvalidConfig(format!("cannot make the test {what}: {err}"))
}

fn authority(root: &Path, name: &str, common_name: &str) -> Result<Authority, Error> {
    let key = KeyPair::generate().map_err(|err| tls_error("CA key", err))?;
    let mut params = CertificateParams::default();
    params.distinguished_name = distinguished_name(common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = params
        .self_signed(&key)
        .map_err(|err| tls_error("CA certificate", err))?;
    let identity = write_identity(root, name, cert.pem(), key.serialize_pem())?;
    Ok(Authority {
        identity,
        issuer: Issuer::new(params, key),
    })
}

fn leaf(
    root: &Path,
    ca: &Authority,
    name: &str,
    role: Role,
    validity: Validity,
) -> Result<TestIdentity, Error> {
    let key = KeyPair::generate().map_err(|err| tls_error("key", err))?;
    let mut params = CertificateParams::default();
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    match role {
        Role::Server => {
            params.distinguished_name = distinguished_name("localhost");
            params.subject_alt_names = vec![
                SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
                SanType::DnsName(
                    "localhost"
                        .try_into()
                        .map_err(|err| tls_error("server name", err))?,
                ),
            ];
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        }
        Role::ServerFor(host) => {
            params.distinguished_name = distinguished_name(&host);
            params.subject_alt_names = vec![SanType::DnsName(
                host.as_str()
                    .try_into()
                    .map_err(|err| tls_error("server name", err))?,
            )];
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        }
        Role::Client => {
            params.distinguished_name = distinguished_name(&format!("zk-curator-test-{name}"));
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        }
    }
    params.use_authority_key_identifier_extension = true;
    if let Validity::Expired = validity {
        params.not_before = rcgen::date_time_ymd(2019, 1, 1);
        params.not_after = rcgen::date_time_ymd(2020, 1, 2);
    }
    let cert = params
        .signed_by(&key, &ca.issuer)
        .map_err(|err| tls_error("certificate", err))?;
    write_identity(root, name, cert.pem(), key.serialize_pem())
}

fn distinguished_name(common_name: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "zk-curator tests");
    name.push(DnType::CommonName, common_name);
    name
}

fn write_identity(
    root: &Path,
    name: &str,
    cert_pem: String,
    key_pem: String,
) -> Result<TestIdentity, Error> {
    let identity = TestIdentity {
        name: name.to_owned(),
        cert_path: root.join(format!("{name}.crt")),
        key_path: root.join(format!("{name}.key")),
        bundle_path: root.join(format!("{name}.pem")),
        cert_pem,
        key_pem,
    };
    identity.write_over(&identity)?;
    Ok(identity)
}

fn write_file(path: &Path, contents: &str) -> Result<(), Error> {
    fs::write(path, contents)
        .map_err(|err| Error::io(format!("cannot write {}", path.display()), err))
}
