//! `zk-curator server`'s options reach the embedded server: TTL nodes refused by default and
//! allowed with `--extended-types`; `conf` reports `--max-connections` and `--tick`; the TLS
//! options serve TLS (beside plaintext or alone, with client certificates required by
//! `--tls-client-ca`), and unusable TLS files are usage errors given before anything binds.
#![allow(clippy::unwrap_used, missing_docs)]

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_zk-curator");
/// The bound on each test body.
const TEST_LIMIT: Duration = Duration::from_secs(40);

async fn bounded<F: std::future::Future>(body: F) -> F::Output {
    tokio::time::timeout(TEST_LIMIT, body)
        .await
        .expect("test timed out")
}

/// Starts `zk-curator server --port 0` with `extra` options; returns the child and its
/// connect string.
async fn start_server(extra: &[&str]) -> (Child, String) {
    let (server, mut lines) = start_server_lines(extra, 1).await;
    (server, lines.remove(0))
}

/// Starts `zk-curator server --port 0` with `extra` options; returns the child and the first
/// `count` lines it prints on stdout.
async fn start_server_lines(extra: &[&str], count: usize) -> (Child, Vec<String>) {
    let mut server = Command::new(BIN)
        .args(["server", "--port", "0"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(server.stdout.take().unwrap()).lines();
    let mut lines = Vec::new();
    for _ in 0..count {
        lines.push(stdout.next_line().await.unwrap().unwrap());
    }
    (server, lines)
}

#[tokio::test(flavor = "multi_thread")]
async fn server_options_reach_the_server() {
    bounded(async {
        let ttl = zookeeper_client::CreateMode::Persistent
            .with_acls(zookeeper_client::Acls::anyone_all())
            .with_ttl(Duration::from_secs(60));
        // By default TTL nodes are refused, as by ZooKeeper.
        let (_plain, connect) = start_server(&[]).await;
        let client = zookeeper_client::Client::connect(&connect).await.unwrap();
        let refused = client.create("/ttl", b"", &ttl).await;
        assert!(
            matches!(refused, Err(zookeeper_client::Error::Unimplemented)),
            "{refused:?}"
        );
        drop(client);

        let (_tuned, connect) = start_server(&[
            "--extended-types",
            "--max-connections",
            "7",
            "--tick",
            "50ms",
        ])
        .await;
        let client = zookeeper_client::Client::connect(&connect).await.unwrap();
        let created = client.create("/ttl", b"", &ttl).await;
        assert!(created.is_ok(), "{created:?}");
        // `conf` reports the settings in ZooKeeper's layout.
        let mut conf = tokio::net::TcpStream::connect(&connect).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut conf, b"conf")
            .await
            .unwrap();
        let mut text = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut conf, &mut text)
            .await
            .unwrap();
        assert!(text.contains("maxClientCnxns=7\n"), "{text}");
        assert!(text.contains("tickTime=50\n"), "{text}");
    })
    .await;
}

// ---- TLS ----

/// PEM files made for one test: a server certificate for 127.0.0.1 from one CA, a client
/// CA, a client certificate from it, and one from a CA nobody trusts.
struct TlsFiles {
    dir: tempfile::TempDir,
    server_ca: String,
    client: (String, String),
    stranger: (String, String),
}

impl TlsFiles {
    fn new() -> TlsFiles {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, SanType,
        };
        let ca = |name: &str| {
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.distinguished_name.push(DnType::CommonName, name);
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
        };
        let leaf = |issuer: &CertifiedIssuer<'static, KeyPair>, ip: bool| {
            let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
            if ip {
                params
                    .subject_alt_names
                    .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
            }
            let key = KeyPair::generate().unwrap();
            let cert = params.signed_by(&key, issuer).unwrap();
            (cert.pem(), key.serialize_pem())
        };
        let server_ca = ca("server CA");
        let client_ca = ca("client CA");
        let stranger_ca = ca("stranger CA");
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = leaf(&server_ca, true);
        std::fs::write(dir.path().join("server.pem"), cert).unwrap();
        std::fs::write(dir.path().join("server.key"), key).unwrap();
        std::fs::write(dir.path().join("client-ca.pem"), client_ca.pem()).unwrap();
        std::fs::write(dir.path().join("junk.pem"), "not PEM at all").unwrap();
        TlsFiles {
            dir,
            server_ca: server_ca.pem(),
            client: leaf(&client_ca, false),
            stranger: leaf(&stranger_ca, false),
        }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_str().unwrap().to_owned()
    }

    /// Connects to `tcp+tls://...` trusting the server's CA, presenting `identity`.
    async fn connect(
        &self,
        address: &str,
        identity: Option<&(String, String)>,
    ) -> Result<zookeeper_client::Client, zookeeper_client::Error> {
        let mut options = zookeeper_client::TlsOptions::new()
            .with_pem_ca(&self.server_ca)
            .unwrap();
        if let Some((cert, key)) = identity {
            options = options.with_pem_identity(cert, key).unwrap();
        }
        zookeeper_client::Client::connector()
            .with_tls(options)
            .with_session_timeout(Duration::from_secs(4))
            .with_connection_timeout(Duration::from_millis(1500))
            .with_fail_eagerly()
            .connect(address)
            .await
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_options_serve_tls_beside_plaintext() {
    bounded(async {
        let files = TlsFiles::new();
        let (cert, key, ca) = (
            files.path("server.pem"),
            files.path("server.key"),
            files.path("client-ca.pem"),
        );
        let (_server, lines) = start_server_lines(
            &[
                "--tls-cert",
                &cert,
                "--tls-key",
                &key,
                "--tls-client-ca",
                &ca,
            ],
            2,
        )
        .await;
        let (plain, secure) = (&lines[0], &lines[1]);
        assert!(plain.starts_with("127.0.0.1:"), "{plain}");
        assert!(secure.starts_with("tcp+tls://127.0.0.1:"), "{secure}");
        assert_ne!(plain.rsplit(':').next(), secure.rsplit(':').next());

        // A client of the client CA is served over TLS, and sees what a plaintext client wrote.
        let writer = zookeeper_client::Client::connect(plain).await.unwrap();
        let persistent = zookeeper_client::CreateMode::Persistent
            .with_acls(zookeeper_client::Acls::anyone_all());
        writer.create("/tls", b"hello", &persistent).await.unwrap();
        let reader = files.connect(secure, Some(&files.client)).await.unwrap();
        let (data, _) = reader.get_data("/tls").await.unwrap();
        assert_eq!(data, b"hello");

        // No certificate, or one from another CA: refused.
        assert!(files.connect(secure, None).await.is_err());
        assert!(files.connect(secure, Some(&files.stranger)).await.is_err());
        let (data, _) = reader.get_data("/tls").await.unwrap();
        assert_eq!(data, b"hello");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_only_serves_tls_on_the_one_port() {
    bounded(async {
        let files = TlsFiles::new();
        let (cert, key) = (files.path("server.pem"), files.path("server.key"));
        // One line: the TLS connect string, the only one that works.
        let (_server, lines) =
            start_server_lines(&["--tls-only", "--tls-cert", &cert, "--tls-key", &key], 1).await;
        let secure = &lines[0];
        let main = secure
            .strip_prefix("tcp+tls://")
            .expect("the first line is the TLS connect string");
        let client = files.connect(secure, None).await.unwrap();
        assert!(client.check_stat("/").await.unwrap().is_some());
        // Plaintext gets nowhere on that port.
        let plain = zookeeper_client::Client::connector()
            .with_session_timeout(Duration::from_secs(2))
            .with_connection_timeout(Duration::from_millis(500))
            .with_fail_eagerly()
            .connect(main)
            .await;
        assert!(plain.is_err());
    })
    .await;
}

/// Runs `zk-curator server` with `args` expecting it to exit at once; returns its exit
/// code, stdout and stderr.
async fn server_fails(args: &[&str]) -> (Option<i32>, String, String) {
    let output = tokio::time::timeout(
        Duration::from_secs(20),
        Command::new(BIN)
            .arg("server")
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the server did not exit")
    .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn unusable_tls_files_are_usage_errors_before_binding() {
    bounded(async {
        let files = TlsFiles::new();
        let (cert, key, junk) = (
            files.path("server.pem"),
            files.path("server.key"),
            files.path("junk.pem"),
        );
        let missing = files.path("missing.pem");
        // The port is taken: a server that bound before checking would fail with 70.
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port().to_string();
        let cases: [(&[&str], &str); 5] = [
            (&["--tls-cert", &missing, "--tls-key", &key], "missing.pem"),
            (&["--tls-cert", &junk, "--tls-key", &key], "junk.pem"),
            (&["--tls-cert", &cert, "--tls-key", &junk], "junk.pem"),
            (&["--tls-cert", &cert, "--tls-key", &cert], "server.pem"),
            (
                &[
                    "--tls-cert",
                    &cert,
                    "--tls-key",
                    &key,
                    "--tls-client-ca",
                    &junk,
                ],
                "junk.pem",
            ),
        ];
        for (args, named) in cases {
            let mut all = vec!["--port", &port];
            all.extend_from_slice(args);
            let (code, stdout, stderr) = server_fails(&all).await;
            assert_eq!(code, Some(64), "{args:?}: {stderr}");
            assert!(stderr.contains(named), "{args:?}: {stderr}");
            assert!(stdout.is_empty(), "{args:?}: {stdout}");
        }
        // A key without a certificate (and the other way round) is refused by the parser.
        let (code, _, stderr) = server_fails(&["--port", &port, "--tls-key", &key]).await;
        assert_eq!(code, Some(64), "{stderr}");
        let (code, _, stderr) = server_fails(&["--port", &port, "--tls-only"]).await;
        assert_eq!(code, Some(64), "{stderr}");
        // Whereas with good files the taken port is what fails.
        let (code, _, stderr) =
            server_fails(&["--port", &port, "--tls-cert", &cert, "--tls-key", &key]).await;
        assert_eq!(code, Some(70), "{stderr}");
        drop(taken);
    })
    .await;
}
